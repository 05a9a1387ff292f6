#include "ir/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "support/error.h"

namespace yirage::ir {

HostTensor::HostTensor(TensorType t)
    : type(std::move(t)), bytes(size_t(num_elements(type.dims)) * dtype_size(type.dtype)) {}

namespace {
template <typename T>
T load(const std::vector<std::byte>& bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + size_t(i) * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(std::vector<std::byte>& bytes, int64_t i, T v) {
  std::memcpy(bytes.data() + size_t(i) * sizeof(T), &v, sizeof(T));
}
}  // namespace

float HostTensor::get(int64_t i) const {
  switch (type.dtype) {
    case DType::f32: return load<float>(bytes, i);
    case DType::f16: return f16_to_f32(load<uint16_t>(bytes, i));
    case DType::bf16: return bf16_to_f32(load<uint16_t>(bytes, i));
    case DType::i32: return float(load<int32_t>(bytes, i));
    case DType::i8: return float(load<int8_t>(bytes, i));
    case DType::u8: return float(load<uint8_t>(bytes, i));
  }
  return 0.0f;
}

void HostTensor::set(int64_t i, float v) {
  switch (type.dtype) {
    case DType::f32: return store<float>(bytes, i, v);
    case DType::f16: return store<uint16_t>(bytes, i, f32_to_f16(v));
    case DType::bf16: return store<uint16_t>(bytes, i, f32_to_bf16(v));
    case DType::i32: return store<int32_t>(bytes, i, int32_t(v));
    case DType::i8: return store<int8_t>(bytes, i, int8_t(v));
    case DType::u8: return store<uint8_t>(bytes, i, uint8_t(v));
  }
}

int32_t HostTensor::get_i32(int64_t i) const {
  if (type.dtype != DType::i32) fail("get_i32 on a {} tensor", dtype_name(type.dtype));
  return load<int32_t>(bytes, i);
}

void HostTensor::set_i32(int64_t i, int32_t v) {
  if (type.dtype != DType::i32) fail("set_i32 on a {} tensor", dtype_name(type.dtype));
  store<int32_t>(bytes, i, v);
}

std::vector<float> HostTensor::to_floats() const {
  std::vector<float> values(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) values[size_t(i)] = get(i);
  return values;
}

namespace {

// Values in [lo, hi), two per draw (24 bits each); clamped so that rounding never gives hi.
template <typename Store>
void fill_floats(int64_t n, SplitMix64& bits, float lo, float hi, Store store) {
  const float width = hi - lo;
  const float below_hi = std::nextafter(hi, lo);
  auto value = [&](uint64_t b24) {
    return std::min(lo + width * (float(b24) * 0x1p-24f), below_hi);
  };
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t b = bits();
    store(i, value(b >> 40));
    store(i + 1, value((b >> 16) & 0xffffff));
  }
  if (i < n) store(i, value(bits() >> 40));
}

}  // namespace

void fill_random(HostTensor& t, std::mt19937_64& rng, float lo, float hi, int32_t int_bound) {
  const int64_t n = t.size();
  SplitMix64 bits(rng());
  if (t.type.dtype == DType::f32) {  // the common case, filled without the per-element dispatch
    auto* data = reinterpret_cast<float*>(t.bytes.data());
    fill_floats(n, bits, lo, hi, [data](int64_t i, float v) { data[i] = v; });
  } else if (is_float(t.type.dtype)) {
    fill_floats(n, bits, lo, hi, [&t](int64_t i, float v) { t.set(i, v); });
  } else if (t.type.dtype == DType::i32) {
    const uint64_t bound = uint64_t(std::max(int_bound, 1));
    for (int64_t i = 0; i < n; ++i) t.set_i32(i, int32_t(((bits() >> 32) * bound) >> 32));
  } else {
    // i8 and u8 hold quantized weight blocks (ir/quant.h). Bytes up to 0x3B make any two
    // adjacent bytes a finite f16 below 1 in magnitude, so every block scale drawn is sane.
    for (int64_t i = 0; i < n; i += 8) {
      const uint64_t b = bits();
      for (int64_t j = 0; j < 8 && i + j < n; ++j)
        t.bytes[size_t(i + j)] = std::byte(uint8_t((((b >> (8 * j)) & 0xff) * 0x3C) >> 8));
    }
  }
}

void make_paged_attention_indices_valid(const KernelGraph& graph, std::vector<HostTensor>& inputs) {
  const std::vector<TensorRef> refs = graph.inputs();
  auto input = [&](TensorRef ref) -> HostTensor* {
    const auto it = std::find(refs.begin(), refs.end(), ref);
    return it == refs.end() ? nullptr : &inputs[size_t(it - refs.begin())];
  };
  for (const Node& node : graph.nodes()) {
    const auto* op = std::get_if<PagedAttentionOp>(&node.op);
    if (!op) continue;
    HostTensor *table = input(node.inputs[4]), *positions = input(node.inputs[5]);
    if (!table || !positions) continue;
    const int64_t rows = table->type.dims[0], max_blocks = table->type.dims[1];
    const int64_t blocks = graph.type(node.inputs[3]).dims[0], tokens = op->block_tokens;
    for (int64_t r = 0; r < rows; ++r) {
      // Row r stores to token (r / blocks) of block r mod blocks: distinct for every row the
      // pool can hold. That block is entry j of its table, the others follow it round the pool.
      // Contexts of up to 8 blocks: long enough to cross blocks, short enough that the float
      // check's reference (in double) stays quick at a model's pool sizes.
      const int64_t j = 7 * r % std::min<int64_t>(max_blocks, 8);
      for (int64_t i = 0; i < max_blocks; ++i)
        table->set_i32(r * max_blocks + i, int32_t(((r + i - j) % blocks + blocks) % blocks));
      positions->set_i32(r, r < blocks * tokens ? int32_t(j * tokens + r / blocks % tokens) : -1);
    }
  }
}

void poison(HostTensor& t) {
  std::memset(t.bytes.data(), 0xFF, t.bytes.size());
}

}  // namespace yirage::ir
