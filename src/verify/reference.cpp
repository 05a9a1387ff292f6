// The reference executor: one plain loop nest per op, written to be checked by reading.
//
// Every kernel reads operands widened to float (HostTensor::get), computes in double and stores
// each result element once, rounded to the result's dtype. Index arithmetic goes through the
// small helpers of verify/indexing.h (unravel/ravel, broadcasting, an axis view) rather than
// per-op tricks.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"
#include "verify/indexing.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

using ir::Dims;
using ir::DType;
using ir::HostTensor;
using ir::Node;
using ir::TensorType;

// ---- storing results ------------------------------------------------------------------------

// HostTensor::set takes a float and rounds it to f16/bf16 to nearest even. Narrowing a double to
// float by nearest first would round twice: a double just above an f16 midpoint can land exactly
// on the midpoint and then tie to even, downwards. Narrowing by "round to odd" (truncate, then
// set the last bit when anything was cut off) keeps the cut-off information in that sticky bit,
// and since float carries at least two more bits than f16 or bf16, the second rounding then
// gives the correctly rounded result.
float narrow_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

// Stores `v` rounded once to the tensor's dtype.
void store(HostTensor& t, int64_t i, double v) {
  t.set(i, t.type.dtype == DType::f32 ? static_cast<float>(v) : narrow_to_odd(v));
}

double load(const HostTensor& t, int64_t i) {
  return static_cast<double>(t.get(i));
}

// Shape ops move elements without arithmetic, so they copy the stored bytes exactly.
void copy_element(const HostTensor& from, int64_t from_index, HostTensor& to, int64_t to_index) {
  const size_t size = ir::dtype_size(from.type.dtype);
  std::memcpy(to.bytes.data() + size_t(to_index) * size,
              from.bytes.data() + size_t(from_index) * size, size);
}

// The elements as floats: f32 storage read where it is (a weight is hundreds of MB at real
// shapes), other dtypes widened into `storage`.
const float* floats_of(const HostTensor& t, std::vector<float>& storage) {
  if (t.type.dtype == DType::f32) return reinterpret_cast<const float*>(t.bytes.data());
  storage = t.to_floats();
  return storage.data();
}

// ---- index arithmetic -----------------------------------------------------------------------

Dims leading(const Dims& dims, size_t drop) {
  return Dims(dims.begin(), dims.end() - long(drop));
}

// ---- kernels --------------------------------------------------------------------------------

// Each output row is a row of double sums that the products A[m, k]·B[k, :] are added into, k
// ascending: every element is the textbook sum in the textbook order, while B is read along its
// rows (walking its columns missed the cache at every step once B was wide).
HostTensor matmul(const HostTensor& a, const HostTensor& b, const TensorType& out_type) {
  HostTensor out(out_type);
  const Dims& ad = a.type.dims;
  const Dims& bd = b.type.dims;
  const int64_t m_size = ad[ad.size() - 2], k_size = ad.back(), n_size = bd.back();
  const Dims a_batch = leading(ad, 2), b_batch = leading(bd, 2);
  const Dims out_batch = leading(out_type.dims, 2);
  std::vector<float> a_storage, b_storage;
  const float* av = floats_of(a, a_storage);
  const float* bv = floats_of(b, b_storage);
  std::vector<double> row(static_cast<size_t>(n_size));
  for (int64_t batch = 0; batch < ir::num_elements(out_batch); ++batch) {
    const Dims coords = unravel(batch, out_batch);
    const int64_t a_base = broadcast_index(coords, a_batch) * m_size * k_size;
    const int64_t b_base = broadcast_index(coords, b_batch) * k_size * n_size;
    for (int64_t m = 0; m < m_size; ++m) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t k = 0; k < k_size; ++k) {
        const double x = av[a_base + m * k_size + k];
        const float* b_row = bv + (b_base + k * n_size);
        for (int64_t n = 0; n < n_size; ++n) row[size_t(n)] += x * double(b_row[n]);
      }
      for (int64_t n = 0; n < n_size; ++n)
        store(out, (batch * m_size + m) * n_size + n, row[size_t(n)]);
    }
  }
  return out;
}

double apply(const ir::UnaryOp& op, double x) {
  using ir::UnaryFn;
  switch (op.fn) {
    case UnaryFn::exp: return std::exp(x);
    case UnaryFn::silu: return x / (1.0 + std::exp(-x));
    case UnaryFn::gelu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case UnaryFn::relu: return x < 0.0 ? 0.0 : x;  // keeps NaN, like NumPy
    case UnaryFn::sqrt: return std::sqrt(x);
    case UnaryFn::rsqrt: return 1.0 / std::sqrt(x);
    case UnaryFn::square: return x * x;
    case UnaryFn::neg: return -x;
    case UnaryFn::reciprocal: return 1.0 / x;
    case UnaryFn::mul_scalar: return x * op.scalar;
  }
  fail("reference: unary op with unknown function code {}", int(op.fn));
}

double apply(ir::BinaryFn fn, double a, double b) {
  using ir::BinaryFn;
  switch (fn) {
    case BinaryFn::add: return a + b;
    case BinaryFn::sub: return a - b;
    case BinaryFn::mul: return a * b;
    case BinaryFn::div: return a / b;
    case BinaryFn::pow: return std::pow(a, b);
  }
  fail("reference: binary op with unknown function code {}", int(fn));
}

HostTensor unary(const ir::UnaryOp& op, const HostTensor& x, const TensorType& out_type) {
  HostTensor out(out_type);
  for (int64_t i = 0; i < out.size(); ++i) store(out, i, apply(op, load(x, i)));
  return out;
}

HostTensor binary(ir::BinaryFn fn, const HostTensor& a, const HostTensor& b,
                  const TensorType& out_type) {
  HostTensor out(out_type);
  for (int64_t i = 0; i < out.size(); ++i) {
    const Dims coords = unravel(i, out_type.dims);
    const double av = load(a, broadcast_index(coords, a.type.dims));
    const double bv = load(b, broadcast_index(coords, b.type.dims));
    store(out, i, apply(fn, av, bv));
  }
  return out;
}

HostTensor reduce(const ir::ReduceOp& op, const HostTensor& x, const TensorType& out_type) {
  HostTensor out(out_type);
  const AxisView view(x.type.dims, op.dim);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double acc = op.fn == ir::ReduceFn::max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t k = 0; k < view.extent; ++k) {
        const double v = load(x, view.index(o, k, i));
        if (op.fn != ir::ReduceFn::max)
          acc += v;
        else if (v > acc || std::isnan(v))  // a NaN wins and stays, like NumPy's max
          acc = v;
      }
      if (op.fn == ir::ReduceFn::mean) acc /= double(view.extent);
      store(out, o * view.inner + i, acc);
    }
  }
  return out;
}

// The weight and bias of a norm apply per position within the normalized trailing dims, so a
// norm sees its input as rows of `group` elements.
struct NormRows {
  int64_t rows, group;
  NormRows(const Dims& x, const Dims& normalized)
      : rows(ir::num_elements(x) / ir::num_elements(normalized)),
        group(ir::num_elements(normalized)) {}
};

HostTensor rms_norm(const ir::RmsNormOp& op, const std::vector<const HostTensor*>& in,
                    const TensorType& out_type) {
  HostTensor out(out_type);
  const HostTensor& x = *in[0];
  const NormRows shape(x.type.dims, op.normalized_shape);
  for (int64_t r = 0; r < shape.rows; ++r) {
    const int64_t base = r * shape.group;
    double sum_squares = 0.0;
    for (int64_t j = 0; j < shape.group; ++j) sum_squares += load(x, base + j) * load(x, base + j);
    const double denom = std::sqrt(sum_squares / double(shape.group) + op.eps);
    for (int64_t j = 0; j < shape.group; ++j) {
      double y = load(x, base + j) / denom;
      if (op.has_weight) y *= load(*in[1], j);
      store(out, base + j, y);
    }
  }
  return out;
}

HostTensor layer_norm(const ir::LayerNormOp& op, const std::vector<const HostTensor*>& in,
                      const TensorType& out_type) {
  HostTensor out(out_type);
  const HostTensor& x = *in[0];
  const HostTensor* weight = op.has_weight ? in[1] : nullptr;
  const HostTensor* bias = op.has_bias ? in[op.has_weight ? 2 : 1] : nullptr;
  const NormRows shape(x.type.dims, op.normalized_shape);
  for (int64_t r = 0; r < shape.rows; ++r) {
    const int64_t base = r * shape.group;
    double sum = 0.0;
    for (int64_t j = 0; j < shape.group; ++j) sum += load(x, base + j);
    const double mean = sum / double(shape.group);
    double sum_squares = 0.0;  // population variance, two-pass for accuracy
    for (int64_t j = 0; j < shape.group; ++j)
      sum_squares += (load(x, base + j) - mean) * (load(x, base + j) - mean);
    const double denom = std::sqrt(sum_squares / double(shape.group) + op.eps);
    for (int64_t j = 0; j < shape.group; ++j) {
      double y = (load(x, base + j) - mean) / denom;
      if (weight) y *= load(*weight, j);
      if (bias) y += load(*bias, j);
      store(out, base + j, y);
    }
  }
  return out;
}

HostTensor softmax(const ir::SoftmaxOp& op, const HostTensor& x, const TensorType& out_type) {
  HostTensor out(out_type);
  const AxisView view(x.type.dims, op.dim);
  std::vector<double> exps(size_t(view.extent));
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      // Subtracting the max keeps exp from overflowing; the result is mathematically unchanged.
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < view.extent; ++k) max = std::max(max, load(x, view.index(o, k, i)));
      double sum = 0.0;
      for (int64_t k = 0; k < view.extent; ++k) {
        exps[size_t(k)] = std::exp(load(x, view.index(o, k, i)) - max);
        sum += exps[size_t(k)];
      }
      for (int64_t k = 0; k < view.extent; ++k)
        store(out, view.index(o, k, i), exps[size_t(k)] / sum);
    }
  }
  return out;
}

HostTensor concat(const ir::ConcatOp& op, const std::vector<const HostTensor*>& in,
                  const TensorType& out_type) {
  HostTensor out(out_type);
  const AxisView out_view(out_type.dims, op.dim);
  int64_t offset = 0;  // where the current operand starts along the concat dim
  for (const HostTensor* part : in) {
    const AxisView view(part->type.dims, op.dim);
    for (int64_t o = 0; o < view.outer; ++o)
      for (int64_t k = 0; k < view.extent; ++k)
        for (int64_t i = 0; i < view.inner; ++i)
          copy_element(*part, view.index(o, k, i), out, out_view.index(o, offset + k, i));
    offset += view.extent;
  }
  return out;
}

std::vector<HostTensor> split(const ir::SplitOp& op, const HostTensor& x,
                              const std::vector<TensorType>& out_types) {
  std::vector<HostTensor> outs;
  const AxisView in_view(x.type.dims, op.dim);
  int64_t offset = 0;  // where the current part starts along the split dim
  for (const TensorType& type : out_types) {
    HostTensor part(type);
    const AxisView view(type.dims, op.dim);
    for (int64_t o = 0; o < view.outer; ++o)
      for (int64_t k = 0; k < view.extent; ++k)
        for (int64_t i = 0; i < view.inner; ++i)
          copy_element(x, in_view.index(o, offset + k, i), part, view.index(o, k, i));
    offset += view.extent;
    outs.push_back(std::move(part));
  }
  return outs;
}

// Row-major layout makes a reshape a copy of the bytes under a new shape.
HostTensor reshape(const HostTensor& x, const TensorType& out_type) {
  HostTensor out(out_type);
  out.bytes = x.bytes;
  return out;
}

HostTensor permute(const ir::PermuteOp& op, const HostTensor& x, const TensorType& out_type) {
  HostTensor out(out_type);
  Dims in_coords(x.type.dims.size());
  for (int64_t i = 0; i < out.size(); ++i) {
    const Dims coords = unravel(i, out_type.dims);
    for (size_t j = 0; j < op.perm.size(); ++j) in_coords[size_t(op.perm[j])] = coords[j];
    copy_element(x, ravel(in_coords, x.type.dims), out, i);
  }
  return out;
}

HostTensor embedding(const Node& node, const HostTensor& table, const HostTensor& ids,
                     const TensorType& out_type) {
  HostTensor out(out_type);
  const int64_t vocab = table.type.dims[0], width = table.type.dims[1];
  for (int64_t t = 0; t < ids.size(); ++t) {
    const int32_t id = ids.get_i32(t);
    if (id < 0 || id >= vocab)
      fail("embedding '{}': ids{} = {} is outside the table's rows [0, {})", node.name,
           ir::format_dims(unravel(t, ids.type.dims)), id, vocab);
    for (int64_t d = 0; d < width; ++d) copy_element(table, id * width + d, out, t * width + d);
  }
  return out;
}

// ggml's arithmetic, row by row (ir/quant.h); for 16-bit float weights, the float product. At an
// LLM's widths this is most of a float check's time (the tuner's search runs it on every input
// distribution, rows × K × N per weight), so the output columns, which are independent, are split
// among the hardware's threads; every element is computed by the same code whatever the split, so
// the result does not depend on it.
HostTensor quant_matmul(const ir::QuantMatmulOp& op, const HostTensor& x, const HostTensor& w,
                        const TensorType& out_type) {
  HostTensor out(out_type);
  const int64_t k = x.type.dims.back(), n = w.type.dims[0], rows = x.size() / k;
  const int blocks = int(k / ir::kQuantBlock);
  const size_t row_bytes = size_t(w.type.dims[1]);
  const bool floats = ir::quant_reads_float_activations(op.format);
  std::vector<int8_t> q(floats ? 0 : static_cast<size_t>(rows * k));
  std::vector<float> d(floats ? 0 : static_cast<size_t>(rows * blocks)), s(d.size());
  const auto* xf = reinterpret_cast<const float*>(x.bytes.data());
  auto* y = reinterpret_cast<float*>(out.bytes.data());
  for (int64_t r = 0; r < rows && !floats; ++r)
    ir::quantize_q8_blocks(xf + r * k, size_t(blocks), q.data() + r * k, d.data() + r * blocks,
                           s.data() + r * blocks);
  auto columns = [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = begin; c < end; ++c) {
        const std::byte* row = w.bytes.data() + size_t(c) * row_bytes;
        y[r * n + c] = floats ? ir::quant_row_dot_floats(op.format, row, k, xf + r * k)
                              : ir::quant_row_dot(op.format, row, blocks, q.data() + r * k,
                                                  d.data() + r * blocks, s.data() + r * blocks);
      }
  };
  // A thread per 2^22 products at least: small matmuls stay on the caller's thread.
  const int64_t threads =
      std::clamp<int64_t>(rows * k * n >> 22, 1, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back(columns, n * t / threads, n * (t + 1) / threads);
  columns(0, n / threads);
  for (std::thread& t : pool) t.join();
  return out;
}

HostTensor rope(const Node& node, const ir::RopeOp& op, const HostTensor& x,
                const HostTensor& positions, const TensorType& out_type) {
  HostTensor out(out_type);
  const Dims& dims = x.type.dims;
  const int64_t seq = dims[dims.size() - 3], heads = dims[dims.size() - 2], head_dim = dims.back();
  const int64_t half = head_dim / 2;
  const int64_t outer = ir::num_elements(leading(dims, 3));
  for (int64_t s = 0; s < seq; ++s) {
    const int32_t pos = positions.get_i32(s);
    if (pos < 0)
      fail("rope '{}': positions[{}] = {} is negative; positions count from 0", node.name, s, pos);
    for (int64_t p = 0; p < half; ++p) {
      const double angle = double(pos) * std::pow(op.theta, -2.0 * double(p) / double(head_dim));
      const double cos = std::cos(angle), sin = std::sin(angle);
      // The two head elements rotated together, per style (see ir::RopeStyle).
      const int64_t ia = op.style == ir::RopeStyle::interleaved ? 2 * p : p;
      const int64_t ib = op.style == ir::RopeStyle::interleaved ? 2 * p + 1 : p + half;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t base = ((o * seq + s) * heads + h) * head_dim;
          const double a = load(x, base + ia), b = load(x, base + ib);
          store(out, base + ia, a * cos - b * sin);
          store(out, base + ib, a * sin + b * cos);
        }
      }
    }
  }
  return out;
}

// See ir::PagedAttentionOp: the appends first, rounded to f16 as the pool holds them, then for each
// row and head the scores over positions 0 ... p in order, the safe softmax and the weighted sum,
// all in double.
class PagedAttention {
 public:
  PagedAttention(const Node& node, const ir::PagedAttentionOp& op,
                 const std::vector<const HostTensor*>& in)
      : node_(node),
        q_(*in[0]),
        k_(*in[1]),
        v_(*in[2]),
        table_(*in[4]),
        positions_(*in[5]),
        out_(node.outputs[0]),
        pool_(*in[3]),
        rows_(q_.type.dims[0]),
        heads_(q_.type.dims[1]),
        d_(q_.type.dims[2]),
        kv_heads_(k_.type.dims[1]),
        blocks_(pool_.type.dims[0]),
        tokens_(op.block_tokens),
        max_blocks_(table_.type.dims[1]) {}

  std::vector<HostTensor> run() {
    append();
    for (int64_t r = 0; r < rows_; ++r)
      if (position(r) >= 0)
        for (int64_t h = 0; h < heads_; ++h) attend(r, h);
    return {std::move(out_), std::move(pool_)};
  }

 private:
  int32_t position(int64_t r) const {
    const int32_t p = positions_.get_i32(r);
    if (p < -1 || p >= max_blocks_ * tokens_)
      fail(
          "paged_attention '{}': positions[{}] = {} is outside [-1, {}) (the table's {} blocks of "
          "{} tokens)",
          node_.name, r, p, max_blocks_ * tokens_, max_blocks_, tokens_);
    return p;
  }

  // The pool block that holds position p of row r.
  int64_t block(int64_t r, int64_t p) const {
    const int32_t b = table_.get_i32(r * max_blocks_ + p / tokens_);
    if (b < 0 || b >= blocks_)
      fail("paged_attention '{}': table[{}][{}] = {} is outside the pool's {} blocks", node_.name,
           r, p / tokens_, b, blocks_);
    return b;
  }

  // Element 0 of (kind 0 keys / 1 values, kv head h) at position p of row r's table.
  int64_t slot(int64_t r, int64_t p, int kind, int64_t h) const {
    return (((block(r, p) * 2 + kind) * kv_heads_ + h) * tokens_ + p % tokens_) * d_;
  }

  void append() {
    std::vector<int64_t> writer(size_t(blocks_ * tokens_), -1);
    for (int64_t r = 0; r < rows_; ++r) {
      const int32_t p = position(r);
      if (p < 0) continue;
      int64_t& w = writer[size_t(block(r, p) * tokens_ + p % tokens_)];
      if (w >= 0)
        fail("paged_attention '{}': rows {} and {} both store to token {} of pool block {}",
             node_.name, w, r, p % tokens_, block(r, p));
      w = r;
      for (int64_t h = 0; h < kv_heads_; ++h)
        for (int64_t e = 0; e < d_; ++e) {
          store(pool_, slot(r, p, 0, h) + e, load(k_, (r * kv_heads_ + h) * d_ + e));
          store(pool_, slot(r, p, 1, h) + e, load(v_, (r * kv_heads_ + h) * d_ + e));
        }
    }
  }

  void attend(int64_t r, int64_t h) {
    const int64_t p = position(r), kvh = h / (heads_ / kv_heads_);
    const int64_t q0 = (r * heads_ + h) * d_;
    std::vector<double> scores(size_t(p + 1));
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j <= p; ++j) {
      const int64_t key = slot(r, j, 0, kvh);
      double dot = 0;
      for (int64_t e = 0; e < d_; ++e) dot += load(q_, q0 + e) * load(pool_, key + e);
      scores[size_t(j)] = dot / std::sqrt(double(d_));
      top = std::max(top, scores[size_t(j)]);
    }
    double total = 0;
    for (double& s : scores) total += (s = std::exp(s - top));
    std::vector<double> acc(size_t(d_), 0.0);
    for (int64_t j = 0; j <= p; ++j) {
      const int64_t value = slot(r, j, 1, kvh);
      for (int64_t e = 0; e < d_; ++e) acc[size_t(e)] += scores[size_t(j)] * load(pool_, value + e);
    }
    for (int64_t e = 0; e < d_; ++e)
      store(out_, r * heads_ * d_ + h * d_ + e, acc[size_t(e)] / total);
  }

  const Node& node_;
  const HostTensor &q_, &k_, &v_, &table_, &positions_;
  HostTensor out_, pool_;
  const int64_t rows_, heads_, d_, kv_heads_, blocks_, tokens_, max_blocks_;
};

// ---- driving the graph ----------------------------------------------------------------------

class Executor {
 public:
  // Inputs are read where they are, not copied: at real shapes a weight is hundreds of MB.
  Executor(const ir::KernelGraph& graph, const std::vector<HostTensor>& inputs)
      : graph_(graph), values_(graph.nodes().size()), input_of_(graph.nodes().size(), nullptr) {
    const std::vector<ir::TensorRef> refs = graph.inputs();
    for (size_t i = 0; i < refs.size(); ++i) input_of_[size_t(refs[i].node)] = &inputs[i];
  }

  std::vector<HostTensor> run() {
    for (size_t id = 0; id < graph_.nodes().size(); ++id) {
      const Node& node = graph_.nodes()[id];
      if (!std::holds_alternative<ir::InputOp>(node.op)) values_[id] = evaluate(node);
    }
    std::vector<HostTensor> results;
    for (const ir::GraphOutput& output : graph_.outputs()) results.push_back(value(output.tensor));
    return results;
  }

 private:
  const HostTensor& value(const ir::TensorRef& ref) const {
    const HostTensor* input = input_of_[size_t(ref.node)];
    return input ? *input : values_[size_t(ref.node)][size_t(ref.port)];
  }

  std::vector<HostTensor> evaluate(const Node& node) const {
    std::vector<const HostTensor*> in;
    for (const ir::TensorRef& ref : node.inputs) in.push_back(&value(ref));
    const TensorType& type = node.outputs[0];
    using Result = std::vector<HostTensor>;
    return std::visit(
        ir::Overloaded{
            [&](const ir::InputOp&) -> Result {
              fail("reference: input node '{}' has no bound value", node.name);
            },
            [&](const ir::MatmulOp&) -> Result { return {matmul(*in[0], *in[1], type)}; },
            [&](const ir::UnaryOp& op) -> Result { return {unary(op, *in[0], type)}; },
            [&](const ir::BinaryOp& op) -> Result { return {binary(op.fn, *in[0], *in[1], type)}; },
            [&](const ir::ReduceOp& op) -> Result { return {reduce(op, *in[0], type)}; },
            [&](const ir::RmsNormOp& op) -> Result { return {rms_norm(op, in, type)}; },
            [&](const ir::LayerNormOp& op) -> Result { return {layer_norm(op, in, type)}; },
            [&](const ir::SoftmaxOp& op) -> Result { return {softmax(op, *in[0], type)}; },
            [&](const ir::ConcatOp& op) -> Result { return {concat(op, in, type)}; },
            [&](const ir::SplitOp& op) -> Result { return split(op, *in[0], node.outputs); },
            [&](const ir::ReshapeOp&) -> Result { return {reshape(*in[0], type)}; },
            [&](const ir::PermuteOp& op) -> Result { return {permute(op, *in[0], type)}; },
            [&](const ir::EmbeddingOp&) -> Result {
              return {embedding(node, *in[0], *in[1], type)};
            },
            [&](const ir::RopeOp& op) -> Result { return {rope(node, op, *in[0], *in[1], type)}; },
            [&](const ir::QuantMatmulOp& op) -> Result {
              return {quant_matmul(op, *in[0], *in[1], type)};
            },
            [&](const ir::PagedAttentionOp& op) -> Result {
              return PagedAttention(node, op, in).run();
            },
            [&](const ir::FusedOp& op) -> Result { return run_block_graph(*op.body, in); },
        },
        node.op);
  }

  const ir::KernelGraph& graph_;
  std::vector<std::vector<HostTensor>> values_;  // per node, per output port
  std::vector<const HostTensor*> input_of_;      // per node: the bound input, if it is one
};

std::string input_names(const ir::KernelGraph& graph) {
  std::vector<std::string> names;
  for (const ir::TensorRef& ref : graph.inputs()) names.push_back(graph.node(ref.node).name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

void check_inputs(const ir::KernelGraph& graph, const std::vector<HostTensor>& inputs) {
  const std::vector<ir::TensorRef> refs = graph.inputs();
  if (inputs.size() != refs.size())
    fail("expected {} input{} ({}), got {}", refs.size(), refs.size() == 1 ? "" : "s",
         input_names(graph), inputs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::string& name = graph.node(refs[i].node).name;
    const TensorType& want = graph.type(refs[i]);
    const HostTensor& got = inputs[i];
    if (got.type != want)
      fail("input '{}': expected {}, got {}", name, ir::format_type(want),
           ir::format_type(got.type));
    const size_t need = size_t(ir::num_elements(want.dims)) * ir::dtype_size(want.dtype);
    if (got.bytes.size() != need)
      fail("input '{}': holds {} bytes, but {} takes {}", name, got.bytes.size(),
           ir::format_type(want), need);
  }
}

std::vector<HostTensor> run_reference(const ir::KernelGraph& graph,
                                      const std::vector<HostTensor>& inputs) {
  check_inputs(graph, inputs);
  return Executor(graph, inputs).run();
}

}  // namespace yirage::verify
