// Grid axes over a reduced dim: a block graph whose for-loop walks a summed-over dim, split over
// a grid axis into partials that a second, finishing kernel combines.
//
// Why a transform of found block graphs rather than a dimension of the enumeration: the parts
// kernel is the found body with its loop cut into `splits` ranges, one per block along a free grid
// axis, and the finish is that body's post-loop part behind a loop over the splits. Both follow
// from the body alone, so the split adds no block-level states (what it costs the search is one
// more µGraph's proof and float check, search.cpp) and every block graph the search finds with a
// loop gets its split forms.
//
// The parts kernel keeps the body's grid, iterators, in-loop ops and accumulators; the new axis
// partitions each walked operand dim (an iterator's fmap) into the splits' ranges, and the loop
// walks `range / splits` iterations of the same tile, so every tile keeps its shape. It saves
// each accumulator's tile instead of running the post-loop ops, stacked along the split axis on
// a dim no other axis uses. The finish kernel runs the body's grid (or a finer one, below) with a
// loop of `splits` iterations: its iterators read back block (g, i)'s partial tile in iteration i
// of block g, and fold them with the accumulator that combines partials of the body's own:
//   sum -> sum, sum;  mean -> mean, mean (equal ranges, so the mean of means is the mean);
//   max -> max, max;  rms -> mean, rms with the body's eps (the rms of the whole range).
// rescaled_sum(v, m), the online softmax's -> rescaled_sum in the parts, whose partial is
// Σ exp(m_j - M_i)·v_j over the split's iterations j with M_i the split's running max, which the
// parts also save (a max accumulator of m); the finish's rescaled_sum(partial_i, M_i) is
// Σ_i exp(M_i - M)·partial_i = Σ_j exp(m_j - M)·v_j, the body's: key-split attention, whose
// partial softmax-weighted sums and row sums are rescaled to the global max. A body is not split
// when a partial tile has every dim already carrying a grid axis (a rank-2 product on a grid over
// rows and columns): two axes on one dim would overlap, not nest, and the IR has no block-level
// reshape to add a dim for them.
//
// The finish may also take a grid finer than the body's along its first axis (refine times: a
// narrow body grid, one that the loop's tiles kept to few blocks, leaves the finish's elementwise
// work on few parallel units); a partial that is one element per block along that axis's dim is
// then read whole and averaged over its copies, as the hand-built rmsnorm_linear splits do, when
// it reads no operand that the axis partitions (so every strip computed the same value).
//
// The finish may instead read each partial whole, in one iteration (split_one_view): a kernel-level
// reshape views the stacked dim as [splits, tile], and the finish reduces over the splits' dim at
// once, the rescaled sums weighted by exp(M_i - M) with M the largest running max (flash-
// decoding's combine), on the body's grid refined along any of its axes. A loop over the splits
// makes each of a finish's blocks wait on `splits` small loads in turn; one view issues them
// together. Bodies with an rms accumulator keep the loop (its eps follows the mean).
//
// Both kernels are plain block graphs: the IR needs no new construct, the verifier proves the
// two-kernel µGraph like any other, and every backend that lowers a fused kernel runs them.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "search/internal.h"
#include "support/error.h"

namespace yirage::search {
namespace {

// The grid axis of extent 1 that the split takes, or -1 when the grid uses all three.
int split_free_axis(const ir::GridDims& grid) {
  for (int a = 0; a < ir::kGridAxes; ++a)
    if (grid.extent[size_t(a)] == 1) return a;
  return -1;
}

// Where a partial tile of `rank` dims is laid out: the body's savers' omap where one of them has
// the tile's rank (so a partial lies like the output it becomes), else the grid's axes on the
// leading dims in order; then the split axis on the first dim left. Empty when the dims run out.
std::optional<ir::AxisMap> split_partial_omap(const ir::BlockGraph& body, size_t rank, int axis) {
  const ir::GridDims& grid = body.grid();
  std::optional<ir::AxisMap> omap;
  for (const ir::BlockNode& node : body.nodes())
    if (const auto* save = std::get_if<ir::OutputSaverOp>(&node.op);
        save && node.tile.dims.size() == rank) {
      omap = save->omap;
      break;
    }
  if (!omap) {
    omap = ir::AxisMap{ir::kReplicate, ir::kReplicate, ir::kReplicate};
    int next = 0;
    for (int a = 0; a < ir::kGridAxes; ++a)
      if (grid.extent[size_t(a)] > 1) {
        if (size_t(next) >= rank) return std::nullopt;
        (*omap)[size_t(a)] = next++;
      }
  }
  std::vector<bool> used(rank, false);
  for (int a = 0; a < ir::kGridAxes; ++a) {
    const int d = (*omap)[size_t(a)];
    if (grid.extent[size_t(a)] == 1 || d == ir::kReplicate) continue;
    // Two axes on one dim would leave the order of their blocks to the convention of each side.
    if (size_t(d) >= rank || used[size_t(d)]) return std::nullopt;
    used[size_t(d)] = true;
  }
  (*omap)[size_t(axis)] = ir::kReplicate;
  for (size_t d = 0; d < rank; ++d)
    if (!used[d]) {
      (*omap)[size_t(axis)] = int(d);
      return omap;
    }
  return std::nullopt;
}

// The first axis of extent > 1, the one a finer finish refines, or -1.
int split_first_axis(const ir::GridDims& grid) {
  for (int a = 0; a < ir::kGridAxes; ++a)
    if (grid.extent[size_t(a)] > 1) return a;
  return -1;
}

}  // namespace

std::vector<int64_t> split_finish_refinements(const ir::GridDims& grid, int64_t tile,
                                              const SearchSpace& space) {
  std::vector<int64_t> out = {1};
  if (split_first_axis(grid) < 0) return out;
  const int64_t most = kSplitFinishUnits * space.parallel_units / grid.blocks();
  for (int64_t f = 2; f <= most; f *= 2) out.push_back(f);
  // A body tile of 640 columns (50 blocks of 32000) refines 5 times into 128-column strips.
  constexpr int64_t kGranule = 16;
  for (int64_t f = 3; f <= most && tile > 0; ++f)
    if (tile % f == 0 && (tile / f) % kGranule == 0 && (f & (f - 1)) != 0) out.push_back(f);
  std::sort(out.begin(), out.end());
  return out;
}

int64_t first_axis_tile(const ir::BlockGraph& body) {
  const int axis = split_first_axis(body.grid());
  if (axis < 0) return 0;
  for (const ir::BlockNode& node : body.nodes())
    if (const auto* save = std::get_if<ir::OutputSaverOp>(&node.op)) {
      const int d = save->omap[size_t(axis)];
      return d == ir::kReplicate ? 0 : node.tile.dims[size_t(d)];
    }
  return 0;
}

std::vector<int64_t> split_counts(const ir::GridDims& grid, int64_t range,
                                  const SearchSpace& space) {
  std::vector<int64_t> out;
  if (range < 2 || split_free_axis(grid) < 0) return out;
  const int64_t limit = space.max_grid_blocks > 0 ? space.max_grid_blocks / grid.blocks() : range;
  for (int64_t s : split_extents(range, limit, 0))
    if (s > 1) out.push_back(s);
  return out;
}

namespace {

// The parts kernel of a split, and what its finish needs to know of each partial.
struct SplitParts {
  // A partial: a body accumulator's, or (running_max) the split's running max of the chunk max m
  // that a rescaled_sum reads (`source` is then m).
  struct Partial {
    int32_t source;
    bool running_max = false;
  };
  std::shared_ptr<const ir::BlockGraph> parts;
  std::vector<Partial> partials;   // in the parts' saver order
  std::vector<ir::AxisMap> omaps;  // each partial's saver omap
  int axis = -1;                   // the grid axis the splits take
};

// The body's loop cut into `splits` ranges on a free grid axis, each accumulator's partial saved
// instead of running the post-loop ops; nullopt with `why` where the body does not split.
std::optional<SplitParts> split_parts(const ir::BlockGraph& body, int64_t splits,
                                      std::string& why) {
  const int64_t range = body.forloop_range();
  const int axis = split_free_axis(body.grid());
  if (splits < 2 || range % splits != 0 || axis < 0) {
    why = fmt::format("a loop of {} over a grid [{}, {}, {}] does not split {} ways", range,
                      body.grid().extent[0], body.grid().extent[1], body.grid().extent[2], splits);
    return std::nullopt;
  }
  ir::GridDims grid = body.grid();
  grid.extent[size_t(axis)] = splits;
  ir::BlockGraph parts(grid, range / splits, body.operands());
  const auto& nodes = body.nodes();
  std::map<int32_t, int32_t> in_parts;  // body node -> parts node
  // The parts' savers, in order: body accumulators, and for each chunk max m that a rescaled_sum
  // reads, the split's running max of m, saved just before its first reader.
  SplitParts out;
  std::vector<SplitParts::Partial>& partials = out.partials;
  std::map<int32_t, size_t> running_max;  // m -> its partial
  bool walks = false;
  for (size_t id = 0; id < nodes.size(); ++id) {
    const ir::BlockNode& node = nodes[id];
    if (body.phase(int32_t(id)) != ir::BlockPhase::in_loop &&
        !std::holds_alternative<ir::AccumulatorOp>(node.op))
      continue;
    std::vector<int32_t> inputs;
    for (int32_t in : node.inputs) inputs.push_back(in_parts.at(in));
    ir::BlockOp op = node.op;
    if (auto* it = std::get_if<ir::InputIteratorOp>(&op)) {
      if (it->fmap != ir::kReplicate) {
        for (int a = 0; a < ir::kGridAxes; ++a)
          if (it->imap[size_t(a)] == it->fmap) {
            why = fmt::format("operand {}'s walked dim {} is also split by grid axis {}",
                              it->operand, it->fmap, a);
            return std::nullopt;
          }
        walks = true;
      }
      it->imap[size_t(axis)] = it->fmap;
    } else if (auto* acc = std::get_if<ir::AccumulatorOp>(&op)) {
      if (acc->fn == ir::AccumFn::rescaled_sum && !running_max.count(node.inputs[1])) {
        running_max[node.inputs[1]] = partials.size();
        partials.push_back({node.inputs[1], true});
      }
      if (acc->fn == ir::AccumFn::rms) *acc = ir::AccumulatorOp{ir::AccumFn::mean};
      partials.push_back({int32_t(id)});
    }
    in_parts[int32_t(id)] = parts.add(std::move(op), std::move(inputs));
  }
  if (!walks) {
    why = "no operand is walked by the loop";
    return std::nullopt;
  }
  for (const SplitParts::Partial& p : partials) {
    const int32_t acc = p.source;
    std::optional<ir::AxisMap> omap =
        split_partial_omap(body, nodes[size_t(acc)].tile.dims.size(), axis);
    if (!omap) {
      why = fmt::format("accumulator {}'s tile has no dim left for the split's partials", acc);
      return std::nullopt;
    }
    parts.save(
        p.running_max ? parts.accumulate(ir::AccumFn::max, in_parts.at(acc)) : in_parts.at(acc),
        *omap);
    out.omaps.push_back(*omap);
  }
  out.parts = std::make_shared<const ir::BlockGraph>(std::move(parts));
  out.axis = axis;
  return out;
}

// The body's post-loop ops (the accumulators' readers and the savers) appended to `finish`, on
// the finish's values of the accumulators (`in_finish`: body node -> finish node, extended).
void add_post_loop_ops(const ir::BlockGraph& body, ir::BlockGraph& finish,
                       std::map<int32_t, int32_t>& in_finish) {
  const auto& nodes = body.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const ir::BlockPhase phase = body.phase(int32_t(id));
    if (phase == ir::BlockPhase::in_loop || in_finish.count(int32_t(id))) continue;
    std::vector<int32_t> inputs;
    for (int32_t in : nodes[id].inputs) inputs.push_back(in_finish.at(in));
    in_finish[int32_t(id)] = finish.add(nodes[id].op, std::move(inputs));
  }
}

}  // namespace

std::optional<SplitBodies> split_over_loop(const ir::BlockGraph& body, int64_t splits,
                                           std::string& why, int64_t refine) {
  std::optional<SplitParts> split = split_parts(body, splits, why);
  if (!split) return std::nullopt;
  const auto& nodes = body.nodes();
  const std::vector<SplitParts::Partial>& partials = split->partials;
  const std::vector<ir::AxisMap>& omaps = split->omaps;
  const int axis = split->axis;

  // The finish's grid: the body's, its first axis `refine` times finer.
  ir::GridDims finish_grid = body.grid();
  const int refined = refine > 1 ? split_first_axis(finish_grid) : -1;
  if (refine > 1) {
    if (refined < 0) {
      why = "a finish grid finer than a grid of one block";
      return std::nullopt;
    }
    finish_grid.extent[size_t(refined)] *= refine;
  }
  // Per body node, the grid axes whose block coordinate it depends on (through the iterators it
  // reads): a partial that depends on none of the refined axis's is the same in every strip.
  std::vector<uint32_t> reads_axis(nodes.size(), 0);
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&nodes[id].op))
      for (int a = 0; a < ir::kGridAxes; ++a)
        if (it->imap[size_t(a)] != ir::kReplicate) reads_axis[id] |= 1u << a;
    for (int32_t in : nodes[id].inputs) reads_axis[id] |= reads_axis[size_t(in)];
  }
  const std::vector<ir::TensorType> partial_types = split->parts->output_types();
  ir::BlockGraph finish(finish_grid, splits, partial_types);
  std::map<int32_t, int32_t> in_finish;  // body node -> finish node
  std::map<int32_t, int32_t> max_reads;  // chunk max m -> the finish's iterator of its running max
  try {
    for (size_t j = 0; j < partials.size(); ++j) {
      const int32_t source = partials[j].source;
      ir::AxisMap imap = omaps[j];
      const int stacked = imap[size_t(axis)];
      imap[size_t(axis)] = ir::kReplicate;
      // A partial of extent 1 per block along the refined axis's dim (a row statistic that each
      // column strip computed alike) cannot be cut finer: the finish reads all the strips' copies
      // and takes their mean. The proof rejects the body where the copies differ.
      bool copies = false;
      if (refined >= 0) {
        const int d = omaps[j][size_t(refined)];
        copies = d != ir::kReplicate && !(reads_axis[size_t(source)] >> refined & 1) &&
                 nodes[size_t(source)].tile.dims[size_t(d)] == 1;
        if (copies) imap[size_t(refined)] = ir::kReplicate;
      }
      int32_t it = finish.iterator(int(j), imap, stacked);
      if (copies)
        it = finish.add(ir::ReduceOp{ir::ReduceFn::mean, omaps[j][size_t(refined)]}, {it});
      if (partials[j].running_max) {
        max_reads[source] = it;
        continue;
      }
      const ir::BlockNode& node = nodes[size_t(source)];
      const auto& acc = std::get<ir::AccumulatorOp>(node.op);
      in_finish[source] = acc.fn == ir::AccumFn::rescaled_sum
                              ? finish.rescaled_sum(it, max_reads.at(node.inputs[1]))
                              : finish.add(acc, {it});
    }
    add_post_loop_ops(body, finish, in_finish);
  } catch (const Error& e) {
    why = fmt::format("the finish on a grid {} times finer: {}", refine, e.what());
    return std::nullopt;
  }
  return SplitBodies{split->parts, std::make_shared<const ir::BlockGraph>(std::move(finish)),
                     splits};
}

std::vector<std::pair<int, int64_t>> split_one_view_refinements(const ir::GridDims& grid,
                                                                const SearchSpace& space) {
  std::vector<std::pair<int, int64_t>> out = {{-1, 1}};
  const int64_t limit = space.max_grid_blocks > 0 ? space.max_grid_blocks : grid.blocks() * 1024;
  for (int a = 0; a < ir::kGridAxes; ++a)
    if (grid.extent[size_t(a)] > 1)
      for (int64_t f = 2; grid.blocks() * f <= limit; f *= 2) out.push_back({a, f});
  return out;
}

std::optional<SplitBodies> split_one_view(const ir::BlockGraph& body, int64_t splits,
                                          std::string& why, int refine_axis, int64_t refine) {
  std::optional<SplitParts> split = split_parts(body, splits, why);
  if (!split) return std::nullopt;
  const auto& nodes = body.nodes();
  const std::vector<ir::TensorType> partial_types = split->parts->output_types();
  ir::GridDims grid = body.grid();
  if (refine > 1) {
    if (refine_axis < 0 || grid.extent[size_t(refine_axis)] == 1) {
      why = fmt::format("grid axis {} is not one the body's blocks spread over", refine_axis);
      return std::nullopt;
    }
    grid.extent[size_t(refine_axis)] *= refine;
  }
  // Each partial as the finish reads it: its stacked dim (split-major, as the savers lay the
  // splits' tiles one after another) cut into [splits, tile], the splits' dim at `stacked`.
  std::vector<ir::TensorType> views;
  std::vector<int> stacked_dims;
  for (size_t j = 0; j < split->partials.size(); ++j) {
    const int d = split->omaps[j][size_t(split->axis)];
    ir::TensorType view = partial_types[j];
    view.dims[size_t(d)] /= splits;
    view.dims.insert(view.dims.begin() + d, splits);
    views.push_back(view);
    stacked_dims.push_back(d);
  }
  ir::BlockGraph finish(grid, 1, views);
  std::map<int32_t, int32_t> in_finish;  // body node -> finish node
  std::map<int32_t, int32_t> weights;    // chunk max m -> exp(M_i - M) of its running maxes
  std::map<int32_t, int> weight_dims;    // chunk max m -> the splits' dim of those weights
  try {
    for (size_t j = 0; j < split->partials.size(); ++j) {
      const int stacked = stacked_dims[j];
      ir::AxisMap imap = split->omaps[j];
      imap[size_t(split->axis)] = ir::kReplicate;
      for (int& d : imap)
        if (d != ir::kReplicate && d >= stacked) ++d;
      const int32_t it = finish.iterator(int(j), imap, ir::kReplicate);
      const int32_t source = split->partials[j].source;
      if (split->partials[j].running_max) {
        // exp(M_i - M), M the largest of the splits' running maxes M_i: the factor that brings
        // each split's rescaled sums to the common max, as rescaled_sum's finish does in a loop.
        const int32_t max = finish.add(ir::ReduceOp{ir::ReduceFn::max, stacked, true}, {it});
        weights[source] = finish.add(ir::UnaryOp{ir::UnaryFn::exp},
                                     {finish.add(ir::BinaryOp{ir::BinaryFn::sub}, {it, max})});
        weight_dims[source] = stacked;
        continue;
      }
      const auto& acc = std::get<ir::AccumulatorOp>(nodes[size_t(source)].op);
      int32_t folded = -1;
      switch (acc.fn) {
        case ir::AccumFn::sum:
          folded = finish.add(ir::ReduceOp{ir::ReduceFn::sum, stacked, false}, {it});
          break;
        case ir::AccumFn::mean:  // equal ranges: the mean of the splits' means
          folded = finish.add(ir::ReduceOp{ir::ReduceFn::mean, stacked, false}, {it});
          break;
        case ir::AccumFn::max:
          folded = finish.add(ir::ReduceOp{ir::ReduceFn::max, stacked, false}, {it});
          break;
        case ir::AccumFn::rescaled_sum: {
          const int32_t m = nodes[size_t(source)].inputs[1];
          if (weight_dims.at(m) != stacked) {
            why = "a rescaled sum and its running maxes are stacked on different dims";
            return std::nullopt;
          }
          const int32_t scaled = finish.add(ir::BinaryOp{ir::BinaryFn::mul}, {it, weights.at(m)});
          folded = finish.add(ir::ReduceOp{ir::ReduceFn::sum, stacked, false}, {scaled});
          break;
        }
        case ir::AccumFn::rms:
          why = "an rms accumulator's finish needs its eps after the mean; only the loop has it";
          return std::nullopt;
      }
      // A loop of one iteration: the sum accumulator passes the combined partial through, into
      // the post-loop phase where the body's own post-loop ops and savers run.
      in_finish[source] = finish.accumulate(ir::AccumFn::sum, folded);
    }
    add_post_loop_ops(body, finish, in_finish);
  } catch (const Error& e) {
    why = fmt::format("a one-view finish on a grid {} times finer along axis {}: {}", refine,
                      refine_axis, e.what());
    return std::nullopt;
  }
  return SplitBodies{split->parts, std::make_shared<const ir::BlockGraph>(std::move(finish)),
                     splits};
}

std::vector<ir::TensorRef> add_finish(ir::KernelGraph& graph,
                                      const std::shared_ptr<const ir::BlockGraph>& finish,
                                      std::vector<ir::TensorRef> partials,
                                      const std::string& name) {
  const std::vector<ir::TensorType>& reads = finish->operands();
  for (size_t j = 0; j < partials.size() && j < reads.size(); ++j)
    if (graph.type(partials[j]).dims != reads[j].dims)
      partials[j] = graph.reshape(partials[j], reads[j].dims);
  return graph.add_node(ir::FusedOp{finish}, partials, name);
}

ir::KernelGraph split_kernel_graph(const ir::KernelGraph& target, const SplitBodies& split) {
  ir::KernelGraph out;
  std::vector<ir::TensorRef> inputs;
  for (const ir::TensorRef& in : target.inputs()) {
    const ir::Node& node = target.node(in.node);
    inputs.push_back(out.input(node.name, node.outputs[0].dims, node.outputs[0].dtype));
  }
  std::vector<ir::TensorRef> partials = out.add_node(ir::FusedOp{split.parts}, inputs, "parts");
  std::vector<ir::TensorRef> results = add_finish(out, split.finish, partials, "finish");
  for (size_t k = 0; k < target.outputs().size(); ++k)
    out.mark_output(results.at(k), target.outputs()[k].name);
  return out;
}

std::vector<BlockCandidate> split_candidates(const BlockCandidate& c, const SearchSpace& space) {
  std::vector<BlockCandidate> out;
  if (c.finish) return out;
  const ir::BlockLimits limits = space.limits();
  for (int64_t s : split_counts(c.body->grid(), c.body->forloop_range(), space)) {
    if (c.body->grid().blocks() * s > kSplitPartsUnits * space.parallel_units) break;
    auto add = [&](std::optional<SplitBodies> split, const std::string& key) {
      if (!split) return;
      try {
        split->parts->validate(limits);
        split->finish->validate(limits);
      } catch (const Error&) {
        return;  // the finish's tiles exceed the limits the body's post-loop part kept to
      }
      BlockCandidate sc;
      sc.body = split->parts;
      sc.finish = split->finish;
      sc.splits = s;
      sc.cost = block_graph_cost(*split->parts, space) + block_graph_cost(*split->finish, space);
      sc.key = key + ":" + c.key;
      out.push_back(std::move(sc));
    };
    std::string why;
    for (int64_t refine : split_finish_refinements(c.body->grid(), first_axis_tile(*c.body), space))
      add(split_over_loop(*c.body, s, why, refine), fmt::format("split{}/{}", s, refine));
    for (auto [axis, refine] : split_one_view_refinements(c.body->grid(), space))
      add(split_one_view(*c.body, s, why, axis, refine),
          fmt::format("split{}/view{}x{}", s, axis, refine));
  }
  return out;
}

}  // namespace yirage::search
