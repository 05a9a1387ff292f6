#include "ir/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ir/dtype.h"

namespace yirage::ir {
namespace {

float half_at(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return f16_to_f32(bits);
}

float float16_at(QuantFormat format, const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return format == QuantFormat::bf16 ? std::bit_cast<float>(uint32_t(bits) << 16)
                                     : f16_to_f32(bits);
}

}  // namespace

std::string_view quant_format_name(QuantFormat format) {
  switch (format) {
    case QuantFormat::q4_1: return "q4_1";
    case QuantFormat::q8_0: return "q8_0";
    case QuantFormat::q4_0: return "q4_0";
    case QuantFormat::f16: return "f16";
    case QuantFormat::bf16: return "bf16";
  }
  return "?";
}

std::optional<QuantFormat> quant_format_from_name(std::string_view name) {
  for (QuantFormat f : {QuantFormat::q4_0, QuantFormat::q4_1, QuantFormat::q8_0, QuantFormat::f16,
                        QuantFormat::bf16})
    if (quant_format_name(f) == name) return f;
  return std::nullopt;
}

int64_t quant_block_bytes(QuantFormat format) {
  switch (format) {
    case QuantFormat::q4_1: return 20;
    case QuantFormat::q8_0: return 34;
    case QuantFormat::q4_0: return 18;
    case QuantFormat::f16:
    case QuantFormat::bf16: return 2 * kQuantBlock;
  }
  return 0;
}

bool quant_uses_block_sums(QuantFormat format) {
  return format == QuantFormat::q4_1;
}

bool quant_reads_float_activations(QuantFormat format) {
  return format == QuantFormat::f16 || format == QuantFormat::bf16;
}

void quantize_q8_blocks(const float* x, size_t blocks, int8_t* q, float* d, float* s) {
  for (size_t b = 0; b < blocks; ++b) {
    const float* src = x + b * kQuantBlock;
    int8_t* out = q + b * kQuantBlock;
    float amax = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(src[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      out[i] = static_cast<int8_t>(std::nearbyint(src[i] * id));  // half to even
      sum += out[i];
    }
    d[b] = round_to(DType::f16, amax / 127.0f);
    if (s != nullptr) s[b] = round_to(DType::f16, amax / 127.0f * static_cast<float>(sum));
  }
}

float quant_row_dot(QuantFormat format, const std::byte* row, int blocks, const int8_t* q,
                    const float* d, const float* s) {
  float sum = 0;
  for (int b = 0; b < blocks; ++b) {
    const int8_t* xq = q + b * kQuantBlock;
    int sumi = 0;
    if (format == QuantFormat::q4_1) {
      const std::byte* block = row + b * 20;
      const auto* qs = reinterpret_cast<const uint8_t*>(block + 4);
      for (int j = 0; j < 16; ++j) sumi += (qs[j] & 15) * xq[j] + (qs[j] >> 4) * xq[j + 16];
      sum += half_at(block) * d[b] * static_cast<float>(sumi) + half_at(block + 2) * s[b];
    } else if (format == QuantFormat::q4_0) {
      const std::byte* block = row + b * 18;
      const auto* qs = reinterpret_cast<const uint8_t*>(block + 2);
      for (int j = 0; j < 16; ++j)
        sumi += ((qs[j] & 15) - 8) * xq[j] + ((qs[j] >> 4) - 8) * xq[j + 16];
      sum += half_at(block) * d[b] * static_cast<float>(sumi);
    } else {
      const std::byte* block = row + b * 34;
      const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
      for (int j = 0; j < 32; ++j) sumi += qs[j] * xq[j];
      sum += half_at(block) * d[b] * static_cast<float>(sumi);
    }
  }
  return sum;
}

float quant_row_dot_floats(QuantFormat format, const std::byte* row, int64_t k, const float* x) {
  float sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += x[i] * float16_at(format, row + 2 * i);
  return sum;
}

float quant_element(QuantFormat format, const std::byte* row, int64_t i) {
  if (quant_reads_float_activations(format)) return float16_at(format, row + 2 * i);
  const int64_t b = i / kQuantBlock, j = i % kQuantBlock;
  const std::byte* block = row + b * quant_block_bytes(format);
  const float d = half_at(block);
  if (format == QuantFormat::q8_0)
    return d * static_cast<float>(static_cast<int8_t>(std::to_integer<uint8_t>(block[2 + j])));
  const bool offset = format == QuantFormat::q4_1;  // q4_1 stores a minimum after d
  const uint8_t byte = std::to_integer<uint8_t>(block[(offset ? 4 : 2) + j % 16]);
  const int nibble = j < 16 ? byte & 15 : byte >> 4;
  if (!offset) return static_cast<float>(nibble - 8) * d;
  return static_cast<float>(nibble) * d + half_at(block + 2);
}

}  // namespace yirage::ir
