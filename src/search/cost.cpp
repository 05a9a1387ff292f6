// The cost estimate that ranks candidates until a backend can profile them.
//
// A kernel costs   launch_seconds + bytes / bytes_per_second + flops / (flops_per_second · busy)
// where, for a fused kernel, bytes are every iterator tile loaded by every block in every
// iteration (replicated operands are loaded again by each block) plus the outputs written, flops
// are every block op's work on its tiles (a matmul 2·M·N·K per tile, other ops one per element
// they read or write, whichever is more) in every block and iteration, and busy is the fraction
// of the device's parallel units the grid keeps busy. Accumulators fold once per iteration, one
// flop per element, except the sum of a matmul's tile, which is the matmul's own accumulation (a
// GEMM adds into its output tile) and costs nothing more. A kernel op reads its operands and writes
// its results once, with the whole device busy; a reshape is free (it renames the dims of a
// contiguous tensor). The rates come from capabilities.search.
#include <algorithm>

#include "search/internal.h"

namespace yirage::search {
namespace {

double bytes_of(const ir::TensorType& t) {
  return double(ir::num_elements(t.dims)) * double(ir::dtype_size(t.dtype));
}

double matmul_flops(const ir::Dims& a, const ir::Dims& out) {
  return 2.0 * double(ir::num_elements(out)) * double(a.back());
}

double op_flops(const ir::Op& op, const std::vector<const ir::TensorType*>& in,
                const ir::TensorType& out) {
  if (std::holds_alternative<ir::MatmulOp>(op)) return matmul_flops(in.at(0)->dims, out.dims);
  double elements = double(ir::num_elements(out.dims));
  for (const ir::TensorType* t : in)
    elements = std::max(elements, double(ir::num_elements(t->dims)));
  return elements;
}

double kernel_seconds(double bytes, double flops, double busy, const SearchSpace& space) {
  return space.launch_seconds + bytes / space.bytes_per_second +
         flops / (space.flops_per_second * std::max(busy, 1e-9));
}

}  // namespace

double block_graph_cost(const ir::BlockGraph& body, const SearchSpace& space) {
  const double blocks = double(body.grid().blocks());
  const double iterations = double(body.forloop_range());
  double bytes = 0, flops = 0;
  for (const ir::TensorType& out : body.output_types()) bytes += bytes_of(out);
  const auto& nodes = body.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const ir::BlockNode& node = nodes[id];
    const ir::BlockPhase phase = body.phase(int32_t(id));
    const double times = phase == ir::BlockPhase::in_loop ? blocks * iterations : blocks;
    if (std::holds_alternative<ir::InputIteratorOp>(node.op)) {
      bytes += bytes_of(node.tile) * times;
      continue;
    }
    if (phase == ir::BlockPhase::saver) continue;
    std::vector<const ir::TensorType*> in;
    for (int32_t i : node.inputs) in.push_back(&nodes[size_t(i)].tile);
    if (auto shared = ir::shared_kernel_op(node.op))
      flops += op_flops(*shared, in, node.tile) * times;
    else if (!std::holds_alternative<ir::MatmulOp>(nodes[size_t(node.inputs[0])].op))
      flops += double(ir::num_elements(node.tile.dims)) * blocks * iterations;
  }
  const double busy = std::min(blocks, double(space.parallel_units)) / double(space.parallel_units);
  return kernel_seconds(bytes, flops, busy, space);
}

double kernel_op_cost(const ir::KernelGraph& graph, const ir::Node& node,
                      const SearchSpace& space) {
  if (std::holds_alternative<ir::InputOp>(node.op) ||
      std::holds_alternative<ir::ReshapeOp>(node.op))
    return 0;
  if (const auto* fused = std::get_if<ir::FusedOp>(&node.op))
    return block_graph_cost(*fused->body, space);
  double bytes = 0;
  std::vector<const ir::TensorType*> in;
  for (const ir::TensorRef& t : node.inputs) {
    bytes += bytes_of(graph.type(t));
    in.push_back(&graph.type(t));
  }
  double flops = 0;
  for (const ir::TensorType& out : node.outputs) {
    bytes += bytes_of(out);
    flops += op_flops(node.op, in, out);
  }
  return kernel_seconds(bytes, flops, 1.0, space);
}

double mugraph_cost(const ir::KernelGraph& graph, const SearchSpace& space) {
  double seconds = 0;
  for (const ir::Node& node : graph.nodes()) seconds += kernel_op_cost(graph, node, space);
  return seconds;
}

}  // namespace yirage::search
