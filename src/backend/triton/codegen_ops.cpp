// Kernel-level ops as one-node block graphs: the schedule a plain kernel takes, written in the
// search's own terms so that one lowering (codegen_block.cpp) serves both.
//
// Each graph partitions up to three of the result's dims over the grid (the innermost into tiles
// of up to a few thousand elements, then as many rows as fit a budget per block), walks a matmul's
// K or a reduction's dim with the for-loop, and folds the iterations with the accumulator that
// means the op: sum for products and sums, mean for means, max for maxima. Ops that need a whole
// row at once (norms, softmax) take a single iteration over it.
#include <algorithm>
#include <variant>

#include <fmt/format.h>

#include "backend/triton/codegen.h"
#include "ir/block_graph.h"
#include "support/error.h"

namespace yirage::backend::triton::detail {
namespace {

using ir::Dims;
using ir::kReplicate;

// The grid's y and z extents are at most 65535 on CUDA devices.
constexpr int64_t kMaxOuterBlocks = 65535;

// The fewest blocks along a dim of `extent` that leave tiles of at most `max_tile`: the smallest
// divisor of the extent at least extent / max_tile, since tiles must divide the dim exactly.
int64_t blocks_along(int64_t extent, int64_t max_tile) {
  for (int64_t g = std::max<int64_t>(1, (extent + max_tile - 1) / max_tile); g < extent; ++g)
    if (extent % g == 0) return g;
  return extent;
}

// Which result dim each grid axis partitions (kReplicate: none), and into how many blocks.
struct Partition {
  ir::AxisMap dim_of_axis{kReplicate, kReplicate, kReplicate};
  ir::GridDims grid;
};

// Partitions `dims` of the result over the grid: `order` lists the candidate dims, innermost
// first, with the largest tile each may keep, and the tile as a whole keeps at most `budget`
// elements of them; the first dim takes axis x (whose extent is unbounded), the next two y and z.
Partition partition(const Dims& dims, const std::vector<std::pair<int, int64_t>>& order,
                    int64_t budget) {
  Partition p;
  int axis = 0;
  int64_t tile = 1;
  for (auto [dim, max_tile] : order) {
    if (axis == ir::kGridAxes) break;
    const int64_t extent = dims[size_t(dim)];
    int64_t blocks = blocks_along(extent, std::min(max_tile, std::max<int64_t>(1, budget / tile)));
    if (axis > 0 && blocks > kMaxOuterBlocks)
      blocks = blocks_along(extent, (extent + kMaxOuterBlocks - 1) / kMaxOuterBlocks);
    tile *= extent / blocks;
    if (blocks == 1) continue;
    p.dim_of_axis[size_t(axis)] = dim;
    p.grid.extent[size_t(axis)] = blocks;
    ++axis;
  }
  return p;
}

// The imap of an operand of `operand` dims, right-aligned against a result of rank `rank` (NumPy
// broadcasting): an axis partitions the operand's dim where that dim is not broadcast.
ir::AxisMap operand_imap(const Partition& p, const Dims& operand, size_t rank, const Dims& result) {
  ir::AxisMap imap{kReplicate, kReplicate, kReplicate};
  const size_t lead = rank - operand.size();
  for (int a = 0; a < ir::kGridAxes; ++a) {
    const int d = p.dim_of_axis[size_t(a)];
    if (d == kReplicate || size_t(d) < lead) continue;
    if (operand[size_t(d) - lead] == result[size_t(d)]) imap[size_t(a)] = int(size_t(d) - lead);
  }
  return imap;
}

std::vector<ir::TensorType> operand_types(const ir::KernelGraph& graph, const ir::Node& node) {
  std::vector<ir::TensorType> types;
  for (ir::TensorRef t : node.inputs) types.push_back(graph.type(t));
  return types;
}

// The dims of `dims` innermost first, skipping `skip`: the innermost with tiles of up to
// `inner` elements, then as many rows as the partition's budget leaves room for.
std::vector<std::pair<int, int64_t>> rows_then_inner(const Dims& dims, int64_t inner,
                                                     std::vector<int> skip = {}) {
  std::vector<std::pair<int, int64_t>> order;
  for (int d = int(dims.size()) - 1; d >= 0; --d) {
    if (std::find(skip.begin(), skip.end(), d) != skip.end()) continue;
    order.push_back({d, order.empty() ? inner : dims[size_t(d)]});
  }
  return order;
}

// Elementwise ops: each block a run of the innermost dim of one row.
ir::BlockGraph elementwise(const ir::KernelGraph& graph, const ir::Node& node) {
  const Dims& out = node.outputs[0].dims;
  const Partition p = partition(out, rows_then_inner(out, 4096), 16384);
  ir::BlockGraph g(p.grid, 1, operand_types(graph, node));
  std::vector<int32_t> tiles;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    tiles.push_back(g.iterator(
        int(i), operand_imap(p, graph.type(node.inputs[i]).dims, out.size(), out), kReplicate));
  const int32_t y = g.add(*ir::shared_block_op(node.op), tiles);
  g.save(g.accumulate(ir::AccumFn::sum, y), p.dim_of_axis);
  return g;
}

// [..., M, K] x [..., K, N]: blocks over N, M and one batch dim, the loop over K.
ir::BlockGraph matmul(const ir::KernelGraph& graph, const ir::Node& node) {
  const Dims& out = node.outputs[0].dims;
  const int r = int(out.size());
  const Dims& a = graph.type(node.inputs[0]).dims;
  const Dims& b = graph.type(node.inputs[1]).dims;
  std::vector<std::pair<int, int64_t>> order = {{r - 1, 128}, {r - 2, 64}};
  if (r >= 3) order.push_back({r - 3, 1});
  const Partition p = partition(out, order, 128 * 64);
  const int64_t k = a.back();
  // A product of one row (decoding's GEMV) is a broadcast product, not tl.dot: longer K chunks
  // then halve the loop's trips at the same registers per element.
  const int64_t range = blocks_along(k, out[size_t(r - 2)] == 1 ? 256 : 128);
  ir::BlockGraph g(p.grid, range, operand_types(graph, node));
  // A's N is its K, B's M is its K: neither is partitioned by the axes of those result dims.
  ir::AxisMap imap_a = operand_imap(p, a, out.size(), out);
  ir::AxisMap imap_b = operand_imap(p, b, out.size(), out);
  for (int axis = 0; axis < ir::kGridAxes; ++axis) {
    if (p.dim_of_axis[size_t(axis)] == r - 1) imap_a[size_t(axis)] = kReplicate;
    if (p.dim_of_axis[size_t(axis)] == r - 2) imap_b[size_t(axis)] = kReplicate;
  }
  const int32_t ta = g.iterator(0, imap_a, int(a.size()) - 1);
  const int32_t tb = g.iterator(1, imap_b, int(b.size()) - 2);
  g.save(g.accumulate(ir::AccumFn::sum, g.add(ir::MatmulOp{}, {ta, tb})), p.dim_of_axis);
  return g;
}

// A reduction: blocks over the other dims, the loop along the reduced one.
ir::BlockGraph reduction(const ir::KernelGraph& graph, const ir::Node& node,
                         const ir::ReduceOp& r) {
  const Dims& x = graph.type(node.inputs[0]).dims;
  const bool innermost = size_t(r.dim) + 1 == x.size();
  const int64_t inner = innermost ? 16 : 128;
  const Partition over_x = partition(x, rows_then_inner(x, inner, {r.dim}), inner);
  const int64_t range = blocks_along(x[size_t(r.dim)], innermost ? 1024 : 32);
  ir::BlockGraph g(over_x.grid, range, operand_types(graph, node));
  const int32_t t = g.iterator(0, over_x.dim_of_axis, r.dim);
  const int32_t part = g.add(r, {t});
  const ir::AccumFn fn = r.fn == ir::ReduceFn::sum    ? ir::AccumFn::sum
                         : r.fn == ir::ReduceFn::mean ? ir::AccumFn::mean
                                                      : ir::AccumFn::max;
  ir::AxisMap omap = over_x.dim_of_axis;
  for (int& d : omap)
    if (d != kReplicate && !r.keepdim && d > r.dim) --d;
  g.save(g.accumulate(fn, part), omap);
  return g;
}

// Ops over whole rows (norms, softmax): blocks over the other dims, as many rows a block as fit
// kRowBudget elements, one iteration.
constexpr int64_t kRowBudget = 16384;
Partition rows_partition(const Dims& dims, const std::vector<int>& row_dims) {
  int64_t row = 1;
  for (int d : row_dims) row *= dims[size_t(d)];
  std::vector<std::pair<int, int64_t>> order;
  for (int d = int(dims.size()) - 1; d >= 0; --d)
    if (std::find(row_dims.begin(), row_dims.end(), d) == row_dims.end())
      order.push_back({d, dims[size_t(d)]});
  return partition(dims, order, std::max<int64_t>(1, kRowBudget / row));
}

ir::BlockGraph norm(const ir::KernelGraph& graph, const ir::Node& node, size_t normalized) {
  const Dims& x = graph.type(node.inputs[0]).dims;
  std::vector<int> row_dims;
  for (size_t d = x.size() - normalized; d < x.size(); ++d) row_dims.push_back(int(d));
  const Partition p = rows_partition(x, row_dims);
  ir::BlockGraph g(p.grid, 1, operand_types(graph, node));
  std::vector<int32_t> tiles = {g.iterator(0, p.dim_of_axis, kReplicate)};
  for (size_t i = 1; i < node.inputs.size(); ++i)
    tiles.push_back(g.iterator(int(i), {kReplicate, kReplicate, kReplicate}, kReplicate));
  g.save(g.accumulate(ir::AccumFn::sum, g.add(*ir::shared_block_op(node.op), tiles)),
         p.dim_of_axis);
  return g;
}

// softmax(x) = exp(x - max) / sum(exp(x - max)) along `dim`, each block the whole of it.
ir::BlockGraph softmax(const ir::KernelGraph& graph, const ir::Node& node, int dim) {
  const Dims& x = graph.type(node.inputs[0]).dims;
  const Partition p = rows_partition(x, {dim});
  ir::BlockGraph g(p.grid, 1, operand_types(graph, node));
  const int32_t t = g.iterator(0, p.dim_of_axis, kReplicate);
  const int32_t top = g.add(ir::ReduceOp{ir::ReduceFn::max, dim, true}, {t});
  const int32_t e =
      g.add(ir::UnaryOp{ir::UnaryFn::exp}, {g.add(ir::BinaryOp{ir::BinaryFn::sub}, {t, top})});
  const int32_t sum = g.add(ir::ReduceOp{ir::ReduceFn::sum, dim, true}, {e});
  const int32_t y = g.add(ir::BinaryOp{ir::BinaryFn::div}, {e, sum});
  g.save(g.accumulate(ir::AccumFn::sum, y), p.dim_of_axis);
  return g;
}

}  // namespace

bool has_block_graph(const ir::Op& op) {
  return std::holds_alternative<ir::UnaryOp>(op) || std::holds_alternative<ir::BinaryOp>(op) ||
         std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::ReduceOp>(op) ||
         std::holds_alternative<ir::RmsNormOp>(op) || std::holds_alternative<ir::LayerNormOp>(op) ||
         std::holds_alternative<ir::SoftmaxOp>(op);
}

ir::BlockGraph block_graph_of(const ir::KernelGraph& graph, const ir::Node& node) {
  return std::visit(
      ir::Overloaded{
          [&](const ir::UnaryOp&) { return elementwise(graph, node); },
          [&](const ir::BinaryOp&) { return elementwise(graph, node); },
          [&](const ir::MatmulOp&) { return matmul(graph, node); },
          [&](const ir::ReduceOp& r) { return reduction(graph, node, r); },
          [&](const ir::RmsNormOp& n) { return norm(graph, node, n.normalized_shape.size()); },
          [&](const ir::LayerNormOp& n) { return norm(graph, node, n.normalized_shape.size()); },
          [&](const ir::SoftmaxOp& s) { return softmax(graph, node, s.dim); },
          [&](const auto&) -> ir::BlockGraph {
            fail("triton: node '{}' ({}) has no block-graph form", node.name, ir::op_name(node.op));
          },
      },
      node.op);
}

}  // namespace yirage::backend::triton::detail
