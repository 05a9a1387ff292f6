// Block graphs: tile-type inference, phase tracking and the whole-graph validity rules.
//
// Tiles carry the dtype of the kernel operands they derive from, so that a saver knows the dtype
// of the output it writes; the values themselves are computed in f32 (see block_executor.cpp),
// which is also what the memory rules count: 4 bytes per element for every computed tile, and
// the operand's own element size for an iterator's tile, which holds the loaded operand data.
#include "ir/block_graph.h"

#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

namespace yirage::ir {
namespace {

constexpr std::string_view kAxisNames[kGridAxes] = {"x", "y", "z"};
constexpr int64_t kComputeBytes = 4;  // tiles are computed in f32

// Formats a failed rule as "<op>(<operand tiles>): <why>", like the kernel-level rules.
class BlockRule {
 public:
  BlockRule(const BlockOp& op, std::string operands) : op_(op), operands_(std::move(operands)) {}

  [[noreturn]] void broken(const std::string& why) const {
    fail("{}({}): {}", block_op_label(op_), operands_, why);
  }

  void expect_operands(size_t want, size_t got) const {
    if (got != want)
      broken(fmt::format("takes {} operand{}, got {}", want, want == 1 ? "" : "s", got));
  }

  // A map entry names a dim of a rank-`rank` tensor or is kReplicate; no dim twice.
  void check_axis_map(std::string_view name, const AxisMap& map, int rank) const {
    for (int a = 0; a < kGridAxes; ++a) {
      int d = map[size_t(a)];
      if (d == kReplicate) continue;
      if (d < 0 || d >= rank)
        broken(fmt::format("{}[{}] = {} is neither a dim of the rank-{} tensor nor {} (replicate)",
                           name, a, d, rank, kReplicate));
      for (int b = 0; b < a; ++b)
        if (map[size_t(b)] == d)
          broken(fmt::format("{} names dim {} for both grid axes {} and {}", name, d, kAxisNames[b],
                             kAxisNames[a]));
    }
  }

 private:
  const BlockOp& op_;
  std::string operands_;
};

std::string format_types(const std::vector<TensorType>& types) {
  std::vector<std::string> parts;
  for (const TensorType& t : types) parts.push_back(format_type(t));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The output extent of each dim: the tile's, times the grid axis laid out on it; fails rather
// than overflowing int64.
Dims saver_output_dims(const Dims& tile, const AxisMap& omap, const GridDims& grid,
                       const BlockRule& rule) {
  Dims dims = tile;
  for (int a = 0; a < kGridAxes; ++a) {
    if (omap[size_t(a)] == kReplicate) continue;
    int64_t& d = dims[size_t(omap[size_t(a)])];
    if (grid.extent[size_t(a)] > kMaxElements / d)
      rule.broken("the output would exceed 2^40 elements");
    d *= grid.extent[size_t(a)];
  }
  if (!fits_element_limit(dims))
    rule.broken(fmt::format("the output {} would exceed 2^40 elements", format_dims(dims)));
  return dims;
}

}  // namespace

std::optional<Op> shared_kernel_op(const BlockOp& op) {
  return std::visit(Overloaded{
                        [](const InputIteratorOp&) -> std::optional<Op> { return {}; },
                        [](const ReduceToWidthOp&) -> std::optional<Op> { return {}; },
                        [](const AccumulatorOp&) -> std::optional<Op> { return {}; },
                        [](const OutputSaverOp&) -> std::optional<Op> { return {}; },
                        [](const auto& shared) -> std::optional<Op> { return Op(shared); },
                    },
                    op);
}

std::optional<BlockOp> shared_block_op(const Op& op) {
  return std::visit(Overloaded{
                        [](const MatmulOp& o) -> std::optional<BlockOp> { return o; },
                        [](const UnaryOp& o) -> std::optional<BlockOp> { return o; },
                        [](const BinaryOp& o) -> std::optional<BlockOp> { return o; },
                        [](const ReduceOp& o) -> std::optional<BlockOp> { return o; },
                        [](const RmsNormOp& o) -> std::optional<BlockOp> { return o; },
                        [](const LayerNormOp& o) -> std::optional<BlockOp> { return o; },
                        [](const ConcatOp& o) -> std::optional<BlockOp> { return o; },
                        [](const auto&) -> std::optional<BlockOp> { return {}; },
                    },
                    op);
}

std::string_view accum_name(AccumFn fn) {
  switch (fn) {
    case AccumFn::sum: return "sum";
    case AccumFn::mean: return "mean";
    case AccumFn::rms: return "rms";
    case AccumFn::max: return "max";
    case AccumFn::rescaled_sum: return "rescaled_sum";
  }
  return "?";
}

std::string block_op_label(const BlockOp& op) {
  if (const auto* acc = std::get_if<AccumulatorOp>(&op))
    return fmt::format("{} {}", block_op_name(op), accum_name(acc->fn));
  return std::string(block_op_name(op));
}

std::string_view block_op_name(const BlockOp& op) {
  return std::visit(
      Overloaded{
          [](const InputIteratorOp&) -> std::string_view { return "iterator"; },
          [](const ReduceToWidthOp&) -> std::string_view { return "reduce_to_width"; },
          [](const AccumulatorOp&) -> std::string_view { return "accum"; },
          [](const OutputSaverOp&) -> std::string_view { return "save"; },
          [](const auto& shared) { return op_name(Op(shared)); },
      },
      op);
}

BlockGraph::BlockGraph(GridDims grid, int64_t forloop_range, std::vector<TensorType> operands)
    : grid_(grid), forloop_range_(forloop_range), operands_(std::move(operands)) {
  int64_t blocks = 1;
  for (int a = 0; a < kGridAxes; ++a) {
    int64_t e = grid_.extent[size_t(a)];
    if (e < 1)
      fail("block graph: grid axis {} has extent {}; extents must be >= 1", kAxisNames[a], e);
    if (e > kMaxElements / blocks)
      fail("block graph: grid [{}] has more than 2^40 blocks", fmt::join(grid_.extent, ", "));
    blocks *= e;
  }
  if (forloop_range_ < 1 || forloop_range_ > kMaxElements)
    fail("block graph: forloop_range {} must be between 1 and 2^40", forloop_range_);
  for (size_t i = 0; i < operands_.size(); ++i) {
    const TensorType& t = operands_[i];
    if (t.dims.empty() || int(t.dims.size()) > kMaxRank || !fits_element_limit(t.dims))
      fail(
          "block graph: operand {} has shape {}; operands have 1 to {} dims, each >= 1, and at "
          "most 2^40 elements",
          i, format_dims(t.dims), kMaxRank);
    if (!is_float(t.dtype))
      fail("block graph: operand {} has dtype {}; fused kernels compute on f32, f16 or bf16", i,
           dtype_name(t.dtype));
  }
}

int32_t BlockGraph::add(BlockOp op, std::vector<int32_t> inputs) {
  const int32_t id = int32_t(nodes_.size());
  try {
    if (const auto* m = std::get_if<MatmulOp>(&op); m && m->library)
      fail(
          "matmul: a library matmul is a kernel-level call of the backend's BLAS; a block graph "
          "holds generated code only");
    std::vector<TensorType> tiles;
    for (size_t i = 0; i < inputs.size(); ++i) {
      int32_t in = inputs[i];
      if (in < 0 || in >= id)
        fail("{}: operand {} refers to block node {}; a node reads only nodes added before it{}",
             block_op_label(op), i, in,
             id == 0 ? std::string() : fmt::format(" (0 to {})", id - 1));
      if (phases_[size_t(in)] == BlockPhase::saver)
        fail("{}: operand {} is block node {}, a saver; savers produce no tile", block_op_label(op),
             i, in);
      tiles.push_back(nodes_[size_t(in)].tile);
    }
    TensorType tile = infer_tile(op, tiles);
    BlockPhase phase = infer_phase(op, inputs, tiles);
    nodes_.push_back(BlockNode{std::move(op), std::move(inputs), std::move(tile)});
    phases_.push_back(phase);
  } catch (const Error& e) {
    fail("block node {}: {}", id, e.what());
  }
  return id;
}

TensorType BlockGraph::infer_tile(BlockOp& op, const std::vector<TensorType>& tiles) const {
  BlockRule rule(op, format_types(tiles));
  return std::visit(
      Overloaded{
          [&](InputIteratorOp& it) { return iterator_tile(it, tiles.size()); },
          [&](ReduceToWidthOp& r) -> TensorType {
            rule.expect_operands(1, tiles.size());
            Dims dims = tiles[0].dims;
            auto dim = normalize_axis(r.dim, int(dims.size()));
            if (!dim)
              rule.broken(fmt::format("dim {} is out of range for rank {}", r.dim, dims.size()));
            r.dim = *dim;
            int64_t& extent = dims[size_t(r.dim)];
            if (r.width < 1 || extent % r.width != 0)
              rule.broken(fmt::format("width {} must be >= 1 and divide dim {}'s extent {}",
                                      r.width, r.dim, extent));
            extent = r.width;
            return {tiles[0].dtype, dims};
          },
          [&](AccumulatorOp& acc) -> TensorType {
            if (!(acc.eps >= 0.0 && std::isfinite(acc.eps)))
              rule.broken(fmt::format("eps {} must be finite and >= 0", acc.eps));
            if (acc.eps != 0.0 && acc.fn != AccumFn::rms)
              rule.broken(
                  fmt::format("eps {} is set, but only an rms accumulator has one", acc.eps));
            if (acc.fn != AccumFn::rescaled_sum) {
              rule.expect_operands(1, tiles.size());
              return tiles[0];
            }
            rule.expect_operands(2, tiles.size());
            if (tiles[0].dtype != tiles[1].dtype) rule.broken("v and m have different dtypes");
            if (broadcast_dims(tiles[0].dims, tiles[1].dims) != tiles[0].dims)
              rule.broken("m (operand 1) must broadcast to the shape of v (operand 0)");
            return tiles[0];
          },
          [&](OutputSaverOp& save) -> TensorType {
            rule.expect_operands(1, tiles.size());
            rule.check_axis_map("omap", save.omap, int(tiles[0].dims.size()));
            saver_output_dims(tiles[0].dims, save.omap, grid_, rule);
            return tiles[0];
          },
          [&](auto& shared) -> TensorType {
            Op kop = shared;
            std::vector<TensorType> results = infer_types(kop, tiles);
            if (!fits_element_limit(results[0].dims))
              rule.broken(fmt::format("result {} has more than 2^40 elements",
                                      format_dims(results[0].dims)));
            canonicalize_op(kop, tiles, results);
            shared = std::get<std::decay_t<decltype(shared)>>(kop);
            return results[0];
          },
      },
      op);
}

TensorType BlockGraph::iterator_tile(const InputIteratorOp& it, size_t operand_count) const {
  BlockOp op = it;
  if (it.operand < 0 || size_t(it.operand) >= operands_.size())
    BlockRule(op, fmt::format("operand {}", it.operand))
        .broken(fmt::format("the fused kernel has {} operand{}", operands_.size(),
                            operands_.size() == 1 ? "" : "s"));
  const TensorType& operand = operands_[size_t(it.operand)];
  BlockRule rule(op, fmt::format("operand {}: {}", it.operand, format_type(operand)));
  rule.expect_operands(0, operand_count);
  const int rank = int(operand.dims.size());
  rule.check_axis_map("imap", it.imap, rank);
  Dims tile = operand.dims;
  for (int a = 0; a < kGridAxes; ++a) {
    int d = it.imap[size_t(a)];
    if (d == kReplicate) continue;
    int64_t g = grid_.extent[size_t(a)];
    if (tile[size_t(d)] % g != 0)
      rule.broken(
          fmt::format("dim {} of extent {} does not divide into the {} blocks of grid axis {}", d,
                      tile[size_t(d)], g, kAxisNames[a]));
    tile[size_t(d)] /= g;
  }
  if (it.fmap != kReplicate) {
    if (it.fmap < 0 || it.fmap >= rank)
      rule.broken(
          fmt::format("fmap = {} is neither a dim of the rank-{} operand nor {} (replicate)",
                      it.fmap, rank, kReplicate));
    if (tile[size_t(it.fmap)] % forloop_range_ != 0)
      rule.broken(fmt::format("dim {} of extent {} per block does not divide into {} iterations",
                              it.fmap, tile[size_t(it.fmap)], forloop_range_));
    tile[size_t(it.fmap)] /= forloop_range_;
  }
  return {operand.dtype, tile};
}

BlockPhase BlockGraph::infer_phase(const BlockOp& op, const std::vector<int32_t>& inputs,
                                   const std::vector<TensorType>& tiles) const {
  BlockRule rule(op, format_types(tiles));
  auto phase_name = [](BlockPhase p) {
    return p == BlockPhase::in_loop ? "in the loop body" : "after the loop";
  };
  if (std::holds_alternative<InputIteratorOp>(op)) return BlockPhase::in_loop;
  if (std::holds_alternative<AccumulatorOp>(op)) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (phases_[size_t(inputs[i])] != BlockPhase::in_loop)
        rule.broken(fmt::format(
            "operand {} (block node {}) runs after the loop; an accumulator folds in-loop tiles", i,
            inputs[i]));
    return BlockPhase::post_loop;
  }
  if (std::holds_alternative<OutputSaverOp>(op)) {
    if (phases_[size_t(inputs[0])] != BlockPhase::post_loop)
      rule.broken(fmt::format(
          "block node {} runs in the loop body; a saver writes a tile computed after the loop "
          "(accumulate it first)",
          inputs[0]));
    return BlockPhase::saver;
  }
  const BlockPhase first = phases_[size_t(inputs[0])];
  for (size_t i = 1; i < inputs.size(); ++i)
    if (phases_[size_t(inputs[i])] != first)
      rule.broken(fmt::format(
          "operand 0 (block node {}) runs {}, but operand {} (block node {}) runs {}; an op "
          "reads either in-loop tiles or post-loop tiles",
          inputs[0], phase_name(first), i, inputs[i], phase_name(phases_[size_t(inputs[i])])));
  return first;
}

int32_t BlockGraph::iterator(int operand, AxisMap imap, int fmap) {
  return add(InputIteratorOp{operand, imap, fmap}, {});
}

int32_t BlockGraph::accumulate(AccumFn fn, int32_t x, double eps) {
  return add(AccumulatorOp{fn, eps}, {x});
}

int32_t BlockGraph::rescaled_sum(int32_t v, int32_t m) {
  return add(AccumulatorOp{AccumFn::rescaled_sum}, {v, m});
}

int32_t BlockGraph::save(int32_t x, AxisMap omap) {
  return add(OutputSaverOp{omap}, {x});
}

std::vector<TensorType> BlockGraph::output_types() const {
  std::vector<TensorType> types;
  for (const BlockNode& node : nodes_) {
    const auto* save = std::get_if<OutputSaverOp>(&node.op);
    if (!save) continue;
    TensorType type = node.tile;
    for (int a = 0; a < kGridAxes; ++a)
      if (save->omap[size_t(a)] != kReplicate)
        type.dims[size_t(save->omap[size_t(a)])] *= grid_.extent[size_t(a)];
    types.push_back(std::move(type));
  }
  return types;
}

int64_t BlockGraph::tile_bytes(int32_t id) const {
  const BlockNode& node = nodes_.at(size_t(id));
  if (std::holds_alternative<OutputSaverOp>(node.op)) return 0;  // writes its operand's tile
  if (std::holds_alternative<InputIteratorOp>(node.op))
    return num_elements(node.tile.dims) * int64_t(dtype_size(node.tile.dtype));
  int64_t bytes = num_elements(node.tile.dims) * kComputeBytes;
  // The online rescale keeps the running max M next to the running sum.
  if (const auto* acc = std::get_if<AccumulatorOp>(&node.op);
      acc && acc->fn == AccumFn::rescaled_sum)
    bytes += num_elements(nodes_[size_t(node.inputs[1])].tile.dims) * kComputeBytes;
  return bytes;
}

void BlockGraph::validate(const BlockLimits& limits) const {
  check_structure();
  if (limits.max_grid_blocks > 0 && grid_.blocks() > limits.max_grid_blocks)
    fail("block graph: the grid [{}] has {} blocks, more than the limit of {}",
         fmt::join(grid_.extent, ", "), grid_.blocks(), limits.max_grid_blocks);
  const TileOverrun over = tile_overrun(limits);
  switch (over.kind) {
    case TileOverrun::Kind::none: return;
    case TileOverrun::Kind::in_loop:
      fail("block graph: the loop body's tiles take {} bytes, more than the limit of {}",
           over.bytes, over.limit);
    case TileOverrun::Kind::staged:
      fail("block graph: the streamed products hold {} bytes of A, more than the limit of {}",
           over.bytes, over.limit);
    case TileOverrun::Kind::total:
      if (const int64_t buffers = pipeline_buffers(limits.pipeline_stages, forloop_range_);
          buffers > 1)
        fail(
            "block graph: the tiles take {} bytes in all, with {} buffers of each tile the loop "
            "walks, more than the limit of {}",
            over.bytes, buffers, over.limit);
      fail("block graph: the tiles take {} bytes in all, more than the limit of {}", over.bytes,
           over.limit);
  }
}

void BlockGraph::check_structure() const {
  std::vector<bool> read(nodes_.size(), false);
  std::vector<bool> loaded(operands_.size(), false);
  bool has_saver = false;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const BlockNode& node = nodes_[id];
    for (int32_t in : node.inputs) read[size_t(in)] = true;
    if (const auto* it = std::get_if<InputIteratorOp>(&node.op)) loaded[size_t(it->operand)] = true;
    const auto* save = std::get_if<OutputSaverOp>(&node.op);
    if (!save) continue;
    has_saver = true;
    for (int a = 0; a < kGridAxes; ++a)
      if (grid_.extent[size_t(a)] > 1 && save->omap[size_t(a)] == kReplicate)
        fail(
            "block node {}: save({}): grid axis {} has {} blocks but is not in the omap, so "
            "they would all write the same elements",
            id, format_type(node.tile), kAxisNames[a], grid_.extent[size_t(a)]);
  }
  if (!has_saver) fail("block graph: no saver; a fused kernel writes at least one output");
  for (size_t i = 0; i < operands_.size(); ++i)
    if (!loaded[i])
      fail("block graph: operand {} ({}) is loaded by no iterator", i, format_type(operands_[i]));
  // Rejecting unread tiles means that every in-loop tile flows into an accumulator and every
  // post-loop tile into a saver, and that equal programs do not differ by dead work.
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (!read[id] && phases_[id] != BlockPhase::saver)
      fail("block node {}: {} computes a {} tile that no node reads", id,
           block_op_label(nodes_[id].op), format_type(nodes_[id].tile));
}

}  // namespace yirage::ir
