#include "ir/kernel_graph.h"

#include <fmt/format.h>

#include "support/error.h"

namespace yirage::ir {

std::string format_type(const TensorType& type) {
  return fmt::format("{}{}", dtype_name(type.dtype), format_dims(type.dims));
}

void KernelGraph::check_ref(TensorRef t, std::string_view op, size_t operand) const {
  if (t.node < 0 || size_t(t.node) >= nodes_.size())
    fail("{}: operand {} refers to node {}, but the graph has {} nodes", op, operand, t.node,
         nodes_.size());
  const Node& n = nodes_[size_t(t.node)];
  if (t.port < 0 || size_t(t.port) >= n.outputs.size())
    fail("{}: operand {} refers to output {} of node '{}', which has {} output{}", op, operand,
         t.port, n.name, n.outputs.size(), n.outputs.size() == 1 ? "" : "s");
}

std::vector<TensorRef> KernelGraph::add_node(Op op, std::vector<TensorRef> inputs,
                                             std::string name) {
  std::string_view kind = op_name(op);
  if (name.empty()) name = unused_name();
  if (find(name) >= 0) fail("{} '{}': a node with this name already exists", kind, name);
  std::vector<TensorType> operand_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_ref(inputs[i], kind, i);
    operand_types.push_back(type(inputs[i]));
  }
  std::vector<TensorType> results;
  try {
    results = infer_types(op, operand_types);
  } catch (const Error& e) {
    fail("node '{}': {}", name, e.what());
  }
  for (const TensorType& result : results)
    if (!fits_element_limit(result.dims))
      fail("node '{}': {} result {} has more than 2^40 elements", name, kind,
           format_dims(result.dims));
  canonicalize_op(op, operand_types, results);
  const int32_t id = int32_t(nodes_.size());
  nodes_.push_back(Node{std::move(name), std::move(op), std::move(inputs), std::move(results)});
  std::vector<TensorRef> refs;
  for (size_t port = 0; port < nodes_.back().outputs.size(); ++port)
    refs.push_back({id, int32_t(port)});
  return refs;
}

TensorRef KernelGraph::input(std::string name, Dims dims, DType dtype) {
  if (name.empty()) fail("input: every input needs a name");
  if (find(name) >= 0) fail("input '{}': a node with this name already exists", name);
  if (dims.empty() || int(dims.size()) > kMaxRank)
    fail("input '{}': shape {} must have 1 to {} dims", name, format_dims(dims), kMaxRank);
  for (int64_t d : dims)
    if (d < 1) fail("input '{}': shape {} has a dim below 1", name, format_dims(dims));
  if (!fits_element_limit(dims))
    fail("input '{}': shape {} has more than 2^40 elements", name, format_dims(dims));
  nodes_.push_back(Node{std::move(name), InputOp{}, {}, {TensorType{dtype, std::move(dims)}}});
  return {int32_t(nodes_.size() - 1), 0};
}

TensorRef KernelGraph::matmul(TensorRef a, TensorRef b) {
  return add_node(MatmulOp{}, {a, b})[0];
}

TensorRef KernelGraph::unary(UnaryFn fn, TensorRef x, double scalar) {
  return add_node(UnaryOp{fn, scalar}, {x})[0];
}

TensorRef KernelGraph::binary(BinaryFn fn, TensorRef a, TensorRef b) {
  return add_node(BinaryOp{fn}, {a, b})[0];
}

TensorRef KernelGraph::reduce(ReduceFn fn, TensorRef x, int dim, bool keepdim) {
  return add_node(ReduceOp{fn, dim, keepdim}, {x})[0];
}

TensorRef KernelGraph::rms_norm(TensorRef x, Dims normalized_shape, std::optional<TensorRef> weight,
                                double eps) {
  std::vector<TensorRef> operands{x};
  if (weight) operands.push_back(*weight);
  return add_node(RmsNormOp{std::move(normalized_shape), eps, weight.has_value()}, operands)[0];
}

TensorRef KernelGraph::layer_norm(TensorRef x, Dims normalized_shape,
                                  std::optional<TensorRef> weight, std::optional<TensorRef> bias,
                                  double eps) {
  std::vector<TensorRef> operands{x};
  if (weight) operands.push_back(*weight);
  if (bias) operands.push_back(*bias);
  return add_node(
      LayerNormOp{std::move(normalized_shape), eps, weight.has_value(), bias.has_value()},
      operands)[0];
}

TensorRef KernelGraph::softmax(TensorRef x, int dim) {
  return add_node(SoftmaxOp{dim}, {x})[0];
}

TensorRef KernelGraph::concat(std::vector<TensorRef> xs, int dim) {
  return add_node(ConcatOp{dim}, std::move(xs))[0];
}

std::vector<TensorRef> KernelGraph::split(TensorRef x, int dim, Dims sizes) {
  return add_node(SplitOp{dim, std::move(sizes)}, {x});
}

TensorRef KernelGraph::reshape(TensorRef x, Dims dims) {
  return add_node(ReshapeOp{std::move(dims)}, {x})[0];
}

TensorRef KernelGraph::permute(TensorRef x, std::vector<int> perm) {
  return add_node(PermuteOp{std::move(perm)}, {x})[0];
}

TensorRef KernelGraph::transpose(TensorRef x, int dim0, int dim1) {
  check_ref(x, "transpose", 0);
  const int rank = int(type(x).dims.size());
  auto a = normalize_axis(dim0, rank), b = normalize_axis(dim1, rank);
  if (!a || !b)
    fail("transpose({}): dims {} and {} must be in range for rank {}", format_type(type(x)), dim0,
         dim1, rank);
  std::vector<int> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[size_t(i)] = i;
  std::swap(perm[size_t(*a)], perm[size_t(*b)]);
  return permute(x, std::move(perm));
}

TensorRef KernelGraph::embedding(TensorRef table, TensorRef ids) {
  return add_node(EmbeddingOp{}, {table, ids})[0];
}

TensorRef KernelGraph::rope(TensorRef x, TensorRef positions, double theta, RopeStyle style) {
  return add_node(RopeOp{theta, style}, {x, positions})[0];
}

TensorRef KernelGraph::quant_matmul(TensorRef x, TensorRef w, QuantFormat format) {
  return add_node(QuantMatmulOp{format}, {x, w})[0];
}

std::vector<TensorRef> KernelGraph::paged_attention(TensorRef q, TensorRef k, TensorRef v,
                                                    TensorRef pool, TensorRef table,
                                                    TensorRef positions, int64_t block_tokens) {
  return add_node(PagedAttentionOp{block_tokens}, {q, k, v, pool, table, positions});
}

void KernelGraph::mark_output(TensorRef t, std::string name) {
  check_ref(t, "mark_output", 0);
  if (name.empty()) {
    const Node& n = nodes_[size_t(t.node)];
    name = t.port == 0 ? n.name : fmt::format("{}:{}", n.name, t.port);
  }
  for (const GraphOutput& o : outputs_)
    if (o.name == name) fail("mark_output: an output named '{}' already exists", name);
  outputs_.push_back({t, std::move(name)});
}

const TensorType& KernelGraph::type(TensorRef t) const {
  check_ref(t, "type", 0);
  return nodes_[size_t(t.node)].outputs[size_t(t.port)];
}

std::vector<TensorRef> KernelGraph::inputs() const {
  std::vector<TensorRef> refs;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (std::holds_alternative<InputOp>(nodes_[i].op)) refs.push_back({int32_t(i), 0});
  return refs;
}

std::string KernelGraph::unused_name() const {
  for (size_t i = nodes_.size();; ++i)
    if (std::string name = fmt::format("t{}", i); find(name) < 0) return name;
}

int32_t KernelGraph::find(std::string_view name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].name == name) return int32_t(i);
  return -1;
}

}  // namespace yirage::ir
