// The cost estimate that ranks candidates until a backend can profile them.
//
// A kernel costs   launch_seconds + bytes / bytes_per_second + flops / (flops_per_second · busy)
// where, for a fused kernel, bytes are the iterator tiles it moves from memory plus the outputs
// written, flops are every block op's work on its tiles (a matmul 2·M·N·K per tile, other ops one
// per element they read or write, whichever is more) in every block and iteration, and busy is
// the fraction of the device's parallel units the grid keeps busy. Blocks run in waves of
// parallel_units consecutive blocks (x fastest); within a wave, blocks that load the same tile
// share one read from memory (the shared cache serves the others), so an iterator moves its tile,
// per iteration, once for each distinct tile of each wave: an operand replicated across the grid
// costs its bytes once per wave, not once per block. Accumulators fold once per iteration, one
// flop per element, except the sum of a matmul's tile, which is the matmul's own accumulation (a
// GEMM adds into its output tile) and costs nothing more. A kernel op reads its operands and writes
// its results once, with the whole device busy; a reshape is free (it renames the dims of a
// contiguous tensor). So a fused kernel saves, against the kernels it replaces, their launches and
// the memory round trip of every intermediate it keeps on chip. The rates come from
// capabilities.search.
#include <algorithm>
#include <vector>

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
  if (std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::QuantMatmulOp>(op))
    return matmul_flops(in.at(0)->dims, out.dims);
  double elements = double(ir::num_elements(out.dims));
  for (const ir::TensorType* t : in)
    elements = std::max(elements, double(ir::num_elements(t->dims)));
  return elements;
}

// Σ over waves of the distinct tiles of `it` its blocks load (the block's coordinates on the grid
// axes that partition the operand tell its tiles apart).
double distinct_tiles_per_wave(const ir::GridDims& grid, const ir::InputIteratorOp& it,
                               int64_t units) {
  const auto& e = grid.extent;
  const int64_t blocks = grid.blocks(), wave = std::min(blocks, units);
  double tiles = 0;
  std::vector<int64_t> seen;
  for (int64_t first = 0; first < blocks; first += wave) {
    seen.clear();
    for (int64_t b = first; b < std::min(blocks, first + wave); ++b) {
      const int64_t coord[ir::kGridAxes] = {b % e[0], b / e[0] % e[1], b / (e[0] * e[1])};
      int64_t tile = 0;
      for (int a = ir::kGridAxes; a-- > 0;)
        tile = tile * e[size_t(a)] + (it.imap[size_t(a)] == ir::kReplicate ? 0 : coord[a]);
      seen.push_back(tile);
    }
    std::sort(seen.begin(), seen.end());
    tiles += double(std::unique(seen.begin(), seen.end()) - seen.begin());
  }
  return tiles;
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
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&node.op)) {
      const double loads = phase == ir::BlockPhase::in_loop ? iterations : 1;
      bytes += bytes_of(node.tile) * loads *
               distinct_tiles_per_wave(body.grid(), *it, space.parallel_units);
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
