// The kernel graph: a DAG of device-level tensor ops.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/ops.h"
#include "ir/shape.h"

namespace yirage::ir {

// One output of one node.
struct TensorRef {
  int32_t node = -1;
  int32_t port = 0;
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
  friend auto operator<=>(const TensorRef&, const TensorRef&) = default;
};

struct TensorType {
  DType dtype = DType::f32;
  Dims dims;
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

// "f32[2, 4096]"
std::string format_type(const TensorType& type);

struct Node {
  std::string name;  // unique within the graph; generated ("t7") when the builder gets none
  Op op;
  std::vector<TensorRef> inputs;
  std::vector<TensorType> outputs;  // inferred when the node is added
};

struct GraphOutput {
  TensorRef tensor;
  std::string name;
};

// Nodes are stored in insertion order, which is always a topological order: an operand must
// exist before the node that reads it. Every builder call checks its operands and infers the
// result type, throwing yirage::Error with a one-line message on an invalid program.
class KernelGraph {
 public:
  // The generic entry point every builder below goes through. `name` may be empty.
  std::vector<TensorRef> add_node(Op op, std::vector<TensorRef> inputs, std::string name = {});

  TensorRef input(std::string name, Dims dims, DType dtype);
  TensorRef matmul(TensorRef a, TensorRef b);

  TensorRef unary(UnaryFn fn, TensorRef x, double scalar = 0.0);
  TensorRef exp(TensorRef x) { return unary(UnaryFn::exp, x); }
  TensorRef silu(TensorRef x) { return unary(UnaryFn::silu, x); }
  TensorRef gelu(TensorRef x) { return unary(UnaryFn::gelu, x); }
  TensorRef relu(TensorRef x) { return unary(UnaryFn::relu, x); }
  TensorRef sqrt(TensorRef x) { return unary(UnaryFn::sqrt, x); }
  TensorRef rsqrt(TensorRef x) { return unary(UnaryFn::rsqrt, x); }
  TensorRef square(TensorRef x) { return unary(UnaryFn::square, x); }
  TensorRef neg(TensorRef x) { return unary(UnaryFn::neg, x); }
  TensorRef reciprocal(TensorRef x) { return unary(UnaryFn::reciprocal, x); }
  TensorRef mul_scalar(TensorRef x, double s) { return unary(UnaryFn::mul_scalar, x, s); }

  TensorRef binary(BinaryFn fn, TensorRef a, TensorRef b);
  TensorRef add(TensorRef a, TensorRef b) { return binary(BinaryFn::add, a, b); }
  TensorRef sub(TensorRef a, TensorRef b) { return binary(BinaryFn::sub, a, b); }
  TensorRef mul(TensorRef a, TensorRef b) { return binary(BinaryFn::mul, a, b); }
  TensorRef div(TensorRef a, TensorRef b) { return binary(BinaryFn::div, a, b); }
  TensorRef pow(TensorRef a, TensorRef b) { return binary(BinaryFn::pow, a, b); }

  // `dim` may be negative (counted from the end).
  TensorRef reduce(ReduceFn fn, TensorRef x, int dim, bool keepdim = true);
  TensorRef rms_norm(TensorRef x, Dims normalized_shape, std::optional<TensorRef> weight = {},
                     double eps = 1e-6);
  TensorRef layer_norm(TensorRef x, Dims normalized_shape, std::optional<TensorRef> weight = {},
                       std::optional<TensorRef> bias = {}, double eps = 1e-5);
  TensorRef softmax(TensorRef x, int dim);

  TensorRef concat(std::vector<TensorRef> xs, int dim);
  std::vector<TensorRef> split(TensorRef x, int dim, Dims sizes);
  // One entry of `dims` may be -1: it is inferred from the element count.
  TensorRef reshape(TensorRef x, Dims dims);
  TensorRef permute(TensorRef x, std::vector<int> perm);
  TensorRef transpose(TensorRef x, int dim0, int dim1);

  TensorRef embedding(TensorRef table, TensorRef ids);
  TensorRef rope(TensorRef x, TensorRef positions, double theta = 10000.0,
                 RopeStyle style = RopeStyle::interleaved);
  // x · dequantized(w)ᵀ with w u8 [N, K/32 · block bytes] (ops.h QuantMatmulOp).
  TensorRef quant_matmul(TensorRef x, TensorRef w, QuantFormat format);
  // Attention over a paged KV pool (ops.h PagedAttentionOp): {out, the pool with the appends}.
  std::vector<TensorRef> paged_attention(TensorRef q, TensorRef k, TensorRef v, TensorRef pool,
                                         TensorRef table, TensorRef positions,
                                         int64_t block_tokens);

  // Outputs are positional; the name is for display and defaults to the node's name.
  void mark_output(TensorRef t, std::string name = {});

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int32_t id) const { return nodes_.at(size_t(id)); }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  const TensorType& type(TensorRef t) const;
  // Input nodes' outputs in insertion order: the order in which executors take inputs.
  std::vector<TensorRef> inputs() const;
  // Node id by name, or -1.
  int32_t find(std::string_view name) const;

 private:
  void check_ref(TensorRef t, std::string_view op, size_t operand) const;
  std::string unused_name() const;  // "t<n>" for nodes the caller did not name

  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

// Infers the output types of `op` applied to operands of the given types, or throws
// yirage::Error naming the op, the operand types and the rule broken (infer_types.cpp).
std::vector<TensorType> infer_types(const Op& op, const std::vector<TensorType>& operands);

// After infer_types accepted `op`: stores negative axes as 0..rank-1 and a reshape's -1 as the
// inferred extent, so that equal programs store equal ops.
void canonicalize_op(Op& op, const std::vector<TensorType>& operands,
                     const std::vector<TensorType>& results);

// `graph` with each node's op (inputs aside) passed through `rewrite`, which returns whether it
// changed it; node for node in the same order, so node ids are unchanged. nullopt when no op
// changed (schedule_choices.cpp).
std::optional<KernelGraph> with_ops_rewritten(const KernelGraph& graph,
                                              const std::function<bool(const Node&, Op&)>& rewrite);

// `graph` with its schedule choices at the defaults (MatmulOp::library, QuantMatmulOp::prefetch:
// how a backend computes an op, not what it computes), so that a graph and a variant that
// differs from it only in them compare equal.
KernelGraph without_schedule_choices(const KernelGraph& graph);

}  // namespace yirage::ir
