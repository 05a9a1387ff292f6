// Shape and dtype inference: the rules every kernel-graph op must satisfy.
//
// Each rule that fails throws one line: "<op>(<operand types>): <rule broken>", for example
// "matmul(f32[2, 3], f32[4, 5]): inner dims differ (3 vs 4)". KernelGraph::add_node prefixes
// the node's name.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/block_graph.h"
#include "ir/kernel_graph.h"
#include "support/error.h"

namespace yirage::ir {
namespace {

class Rule {
 public:
  Rule(const Op& op, const std::vector<TensorType>& operands) : op_(op), operands_(operands) {}

  [[noreturn]] void broken(const std::string& why) const {
    std::vector<std::string> types;
    for (const TensorType& t : operands_) types.push_back(format_type(t));
    fail("{}({}): {}", op_name(op_), fmt::join(types, ", "), why);
  }

  void expect_operands(size_t lo, size_t hi) const {
    size_t n = operands_.size();
    if (n < lo || n > hi) {
      std::string want = lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi);
      broken(fmt::format("takes {} operand{}, got {}", want, hi == 1 ? "" : "s", n));
    }
  }

  // Arithmetic needs a float dtype, the same one on every operand in [first, last).
  DType expect_float(size_t first = 0, size_t last = SIZE_MAX) const {
    last = std::min(last, operands_.size());
    DType dtype = operands_[first].dtype;
    for (size_t i = first; i < last; ++i) {
      DType d = operands_[i].dtype;
      if (!is_float(d))
        broken(fmt::format(
            "operand {} has dtype {}; this op computes on f32, f16 or bf16{}", i, dtype_name(d),
            d == DType::i8 || d == DType::u8 ? " (i8/u8 are storage types for quantized weights)"
                                             : ""));
      if (d != dtype)
        broken(fmt::format("operands have different dtypes ({} and {}); convert explicitly",
                           dtype_name(dtype), dtype_name(d)));
    }
    return dtype;
  }

  int axis(int64_t dim, int rank) const {
    auto a = normalize_axis(dim, rank);
    if (!a) broken(fmt::format("dim {} is out of range for rank {}", dim, rank));
    return *a;
  }

  void expect_rank_at_most_4(const Dims& dims) const {
    if (int(dims.size()) > kMaxRank)
      broken(fmt::format("result {} has rank {}; tensors have at most {} dims", format_dims(dims),
                         dims.size(), kMaxRank));
  }

  const TensorType& operand(size_t i) const { return operands_[i]; }

 private:
  const Op& op_;
  const std::vector<TensorType>& operands_;
};

void check_eps(const Rule& rule, double eps) {
  if (!std::isfinite(eps) || eps < 0)
    rule.broken(fmt::format("eps must be finite and >= 0, got {}", eps));
}

void check_normalized(const Rule& rule, const Dims& x, const Dims& normalized, size_t params) {
  if (normalized.empty() || normalized.size() > x.size())
    rule.broken(fmt::format("normalized_shape {} must be 1 to {} trailing dims of the input",
                            format_dims(normalized), x.size()));
  if (!std::equal(normalized.begin(), normalized.end(), x.end() - long(normalized.size())))
    rule.broken(fmt::format("normalized_shape {} does not match the input's trailing dims",
                            format_dims(normalized)));
  for (size_t i = 1; i <= params; ++i)
    if (rule.operand(i).dims != normalized)
      rule.broken(fmt::format("operand {} must have shape normalized_shape {}", i,
                              format_dims(normalized)));
}

std::vector<TensorType> infer(const MatmulOp&, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, 2);
  DType dtype = rule.expect_float();
  const Dims& a = in[0].dims;
  const Dims& b = in[1].dims;
  if (a.size() < 2 || b.size() < 2) rule.broken("both operands need at least 2 dims");
  if (a.back() != b[b.size() - 2])
    rule.broken(fmt::format("inner dims differ ({} vs {})", a.back(), b[b.size() - 2]));
  Dims batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  auto batch = broadcast_dims(batch_a, batch_b);
  if (!batch)
    rule.broken(fmt::format("batch dims {} and {} do not broadcast", format_dims(batch_a),
                            format_dims(batch_b)));
  Dims out = *batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  rule.expect_rank_at_most_4(out);
  return {{dtype, out}};
}

std::vector<TensorType> infer(const UnaryOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  if (!std::isfinite(op.scalar)) rule.broken("scalar must be finite");
  return {{rule.expect_float(), in[0].dims}};
}

std::vector<TensorType> infer(const BinaryOp&, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, 2);
  DType dtype = rule.expect_float();
  auto out = broadcast_dims(in[0].dims, in[1].dims);
  if (!out) rule.broken("shapes do not broadcast (NumPy rules: trailing dims equal or 1)");
  return {{dtype, *out}};
}

std::vector<TensorType> infer(const ReduceOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  DType dtype = rule.expect_float();
  Dims out = in[0].dims;
  int dim = rule.axis(op.dim, int(out.size()));
  if (op.keepdim) {
    out[size_t(dim)] = 1;
  } else {
    if (out.size() == 1) rule.broken("cannot drop the only dim; use keepdim");
    out.erase(out.begin() + dim);
  }
  return {{dtype, out}};
}

std::vector<TensorType> infer(const RmsNormOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  size_t params = op.has_weight ? 1 : 0;
  rule.expect_operands(1 + params, 1 + params);
  DType dtype = rule.expect_float();
  check_eps(rule, op.eps);
  check_normalized(rule, in[0].dims, op.normalized_shape, params);
  return {{dtype, in[0].dims}};
}

std::vector<TensorType> infer(const LayerNormOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  size_t params = (op.has_weight ? 1 : 0) + (op.has_bias ? 1 : 0);
  rule.expect_operands(1 + params, 1 + params);
  DType dtype = rule.expect_float();
  check_eps(rule, op.eps);
  check_normalized(rule, in[0].dims, op.normalized_shape, params);
  return {{dtype, in[0].dims}};
}

std::vector<TensorType> infer(const SoftmaxOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  DType dtype = rule.expect_float();
  rule.axis(op.dim, int(in[0].dims.size()));
  return {{dtype, in[0].dims}};
}

std::vector<TensorType> infer(const ConcatOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, SIZE_MAX);
  DType dtype = rule.expect_float();
  Dims out = in[0].dims;
  int dim = rule.axis(op.dim, int(out.size()));
  for (size_t i = 1; i < in.size(); ++i) {
    const Dims& d = in[i].dims;
    if (d.size() != out.size()) rule.broken(fmt::format("operand {} has a different rank", i));
    for (size_t k = 0; k < d.size(); ++k)
      if (int(k) != dim && d[k] != out[k])
        rule.broken(
            fmt::format("operand {} differs in dim {} ({} vs {}), which is not the concat dim", i,
                        k, d[k], out[k]));
    out[size_t(dim)] += d[size_t(dim)];
  }
  return {{dtype, out}};
}

std::vector<TensorType> infer(const SplitOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  DType dtype = rule.expect_float();
  int dim = rule.axis(op.dim, int(in[0].dims.size()));
  if (op.sizes.empty()) rule.broken("sizes is empty");
  int64_t total = 0;
  for (int64_t s : op.sizes) {
    if (s < 1) rule.broken(fmt::format("sizes {} has an entry below 1", format_dims(op.sizes)));
    total += s;
  }
  if (total != in[0].dims[size_t(dim)])
    rule.broken(fmt::format("sizes {} add up to {}, but dim {} has extent {}",
                            format_dims(op.sizes), total, dim, in[0].dims[size_t(dim)]));
  std::vector<TensorType> out;
  for (int64_t s : op.sizes) {
    Dims d = in[0].dims;
    d[size_t(dim)] = s;
    out.push_back({dtype, d});
  }
  return out;
}

std::vector<TensorType> infer(const ReshapeOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  DType dtype = rule.expect_float();
  if (op.shape.empty()) rule.broken("target shape is empty");
  rule.expect_rank_at_most_4(op.shape);
  Dims out = op.shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1 && inferred < 0) {
      inferred = int(i);
    } else if (out[i] < 1) {
      rule.broken(fmt::format("target shape {} may hold one -1 and otherwise dims >= 1",
                              format_dims(op.shape)));
    } else {
      known *= out[i];
    }
  }
  int64_t count = num_elements(in[0].dims);
  if (inferred >= 0) {
    if (count % known != 0)
      rule.broken(
          fmt::format("cannot infer the -1 in {}: {} elements", format_dims(op.shape), count));
    out[size_t(inferred)] = count / known;
  }
  if (num_elements(out) != count)
    rule.broken(fmt::format("target shape {} has {} elements, the input {}", format_dims(op.shape),
                            num_elements(out), count));
  return {{dtype, out}};
}

std::vector<TensorType> infer(const PermuteOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(1, 1);
  DType dtype = rule.expect_float();
  const Dims& d = in[0].dims;
  std::vector<int> sorted = op.perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(d.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity)
    rule.broken(fmt::format("perm [{}] is not a permutation of the {} dims",
                            fmt::join(op.perm, ", "), d.size()));
  Dims out;
  for (int p : op.perm) out.push_back(d[size_t(p)]);
  return {{dtype, out}};
}

std::vector<TensorType> infer(const EmbeddingOp&, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, 2);
  DType dtype = rule.expect_float(0, 1);
  if (in[0].dims.size() != 2) rule.broken("the table (operand 0) must have shape [vocab, dim]");
  if (in[1].dtype != DType::i32) rule.broken("the ids (operand 1) must have dtype i32");
  Dims out = in[1].dims;
  out.push_back(in[0].dims[1]);
  rule.expect_rank_at_most_4(out);
  return {{dtype, out}};
}

std::vector<TensorType> infer(const RopeOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, 2);
  DType dtype = rule.expect_float(0, 1);
  const Dims& x = in[0].dims;
  if (x.size() < 3) rule.broken("x must have shape [..., seq, heads, head_dim]");
  if (x.back() % 2 != 0) rule.broken(fmt::format("head_dim {} must be even", x.back()));
  if (in[1].dtype != DType::i32 || in[1].dims != Dims{x[x.size() - 3]})
    rule.broken(fmt::format("positions (operand 1) must be i32[{}], one per sequence position",
                            x[x.size() - 3]));
  if (!(op.theta > 0) || !std::isfinite(op.theta)) rule.broken("theta must be finite and > 0");
  return {{dtype, x}};
}

std::vector<TensorType> infer(const QuantMatmulOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(2, 2);
  const Dims &x = in[0].dims, &w = in[1].dims;
  if (in[0].dtype != DType::f32) rule.broken("x (operand 0) must be f32");
  if (in[1].dtype != DType::u8 || w.size() != 2)
    rule.broken("the weight (operand 1) must be u8 [N, K/32 · block bytes]");
  if (x.empty()) rule.broken("x (operand 0) needs at least 1 dim");
  const int64_t k = x.back(), block_bytes = quant_block_bytes(op.format);
  if (k % kQuantBlock != 0)
    rule.broken(fmt::format("x's last dim {} is not a multiple of {}", k, kQuantBlock));
  if (w[1] != k / kQuantBlock * block_bytes)
    rule.broken(fmt::format("weight rows of {} bytes; K = {} in {} takes {} blocks of {} bytes",
                            w[1], k, quant_format_name(op.format), k / kQuantBlock, block_bytes));
  Dims out = x;
  out.back() = w[0];
  return {{DType::f32, out}};
}

std::vector<TensorType> infer(const PagedAttentionOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  rule.expect_operands(6, 6);
  const TensorType &q = in[0], &k = in[1], &v = in[2], &pool = in[3], &table = in[4],
                   &positions = in[5];
  if (q.dtype != DType::f32 || q.dims.size() != 3)
    rule.broken("q (operand 0) must be f32 [rows, heads, head_dim]");
  const int64_t rows = q.dims[0], heads = q.dims[1], d = q.dims[2];
  if (k.dtype != DType::f32 || k.dims.size() != 3 || k.dims[0] != rows || k.dims[2] != d)
    rule.broken(fmt::format("k (operand 1) must be f32 [{}, kv_heads, {}]", rows, d));
  const int64_t kv_heads = k.dims[1];
  if (heads % kv_heads != 0)
    rule.broken(fmt::format("{} heads are not a multiple of {} kv heads", heads, kv_heads));
  if (v != k) rule.broken(fmt::format("v (operand 2) must be {} like k", format_type(k)));
  if (op.block_tokens < 1) rule.broken(fmt::format("block_tokens {} < 1", op.block_tokens));
  const Dims want_pool{pool.dims.empty() ? 0 : pool.dims[0], 2 * kv_heads, op.block_tokens, d};
  if (pool.dtype != DType::f16 || pool.dims != want_pool || want_pool[0] < 1)
    rule.broken(
        fmt::format("the pool (operand 3) must be f16 [blocks, {}, {}, {}] (keys then "
                    "values of {} kv heads)",
                    2 * kv_heads, op.block_tokens, d, kv_heads));
  if (table.dtype != DType::i32 || table.dims.size() != 2 || table.dims[0] != rows ||
      table.dims[1] < 1)
    rule.broken(fmt::format("the table (operand 4) must be i32 [{}, max_blocks]", rows));
  if (positions.dtype != DType::i32 || positions.dims != Dims{rows})
    rule.broken(fmt::format("positions (operand 5) must be i32 [{}]", rows));
  return {{DType::f32, {rows, heads * d}}, pool};
}

// The body was checked op by op as it was built; validate() adds the whole-graph rules, without
// device limits, which belong to a backend.
std::vector<TensorType> infer(const FusedOp& op, const Rule& rule,
                              const std::vector<TensorType>& in) {
  if (!op.body) rule.broken("the fused kernel has no body");
  const std::vector<TensorType>& want = op.body->operands();
  rule.expect_operands(want.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (in[i] != want[i])
      rule.broken(fmt::format("operand {} is {}, but the body takes {}", i, format_type(in[i]),
                              format_type(want[i])));
  try {
    op.body->validate({});
  } catch (const Error& e) {
    rule.broken(fmt::format("invalid body: {}", e.what()));
  }
  return op.body->output_types();
}

}  // namespace

std::vector<TensorType> infer_types(const Op& op, const std::vector<TensorType>& operands) {
  Rule rule(op, operands);
  return std::visit(Overloaded{
                        [&](const InputOp&) -> std::vector<TensorType> {
                          rule.broken("inputs are created with KernelGraph::input");
                        },
                        [&](const auto& concrete) { return infer(concrete, rule, operands); },
                    },
                    op);
}

void canonicalize_op(Op& op, const std::vector<TensorType>& operands,
                     const std::vector<TensorType>& results) {
  auto fix = [&](int& dim) { dim = *normalize_axis(dim, int(operands[0].dims.size())); };
  std::visit(Overloaded{
                 [&](ReduceOp& r) { fix(r.dim); },
                 [&](SoftmaxOp& s) { fix(s.dim); },
                 [&](ConcatOp& c) { fix(c.dim); },
                 [&](SplitOp& s) { fix(s.dim); },
                 [&](ReshapeOp& r) { r.shape = results[0].dims; },
                 [](auto&) {},
             },
             op);
}

}  // namespace yirage::ir
