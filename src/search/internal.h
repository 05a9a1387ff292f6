// What the passes of the search share: fusion groups, block configurations, candidates.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/block_graph.h"
#include "ir/ir.h"
#include "search/search.h"

namespace yirage::search {

// A set of op nodes fused into one kernel, as a kernel graph of its own: its inputs are the
// group's operands as the fused node receives them (a rank-1 operand may come as a column
// [E, 1], a free reshape, so that it broadcasts along the rows of a tile), reshaped back where
// the group's ops read them; its outputs are the group's tensors read outside it.
struct Group {
  uint64_t mask = 0;                    // node ids of the original graph
  std::vector<int32_t> nodes;           // in topological order
  std::vector<ir::TensorRef> operands;  // tensors of the original graph, in order of first use
  std::vector<bool> column;             // per operand: presented as [E, 1]
  std::vector<ir::TensorRef> outputs;   // tensors of the original graph
  ir::KernelGraph target;
};

// Builds the group, or returns an empty optional with `why` set when an op cannot be fused.
// `columns`: present every rank-1 operand as a column.
std::optional<Group> make_group(const ir::KernelGraph& graph, uint64_t mask, bool columns,
                                std::string& why);
// Whether any operand of the group would be presented differently with `columns` set.
bool has_rank1_operand(const ir::KernelGraph& graph, uint64_t mask);

// The graph with every exp-normalize spelled out by hand, exp(x) / Σ_d exp(x) (or with the row
// max subtracted first), as one softmax op over d, whose parts the search builds in the safe
// form (exp_normalize.cpp); `rewritten` gets how many it replaced. The same graph when none.
ir::KernelGraph with_softmax_ops(const ir::KernelGraph& graph, int* rewritten = nullptr);

// One point of the block-level space: the grid, the loop, and where each operand and output
// sits in it (dims.cpp derives these from the dim correspondence of the group).
struct BlockConfig {
  ir::GridDims grid;
  int64_t range = 1;
  std::vector<ir::InputIteratorOp> iterators;  // one per operand
  std::vector<ir::AxisMap> omaps;              // one per output
  std::string describe() const;
};

// The extents a variable of `extent` may be split into by a grid axis (at most `limit` blocks;
// `units`, the device's parallel units, adds the best wave fit) or by the loop (units = 0), in
// increasing order; dims.cpp says which.
std::vector<int64_t> split_extents(int64_t extent, int64_t limit, int64_t units);

// Configurations kept per loop choice (no loop, or one contracted variable), by the load model.
inline constexpr size_t kConfigsPerLoopChoice = 2;

// The group's configurations: for each loop choice, the `per_loop_choice` best by the load model
// (dims.cpp), best first, and as many loops of one iteration that stream a weight besides;
// SIZE_MAX gives the whole space, for tests.
std::vector<BlockConfig> block_configs(const ir::KernelGraph& target, const SearchSpace& space,
                                       size_t per_loop_choice = kConfigsPerLoopChoice);

// The shared counters and stop condition of one search.
class Z3Oracle;

struct Budget {
  std::chrono::steady_clock::time_point deadline;
  Z3Oracle* z3 = nullptr;  // the pruning oracle under Pruner::z3, shared by the work items
  uint64_t max_states = 0;
  const std::function<bool()>* should_stop = nullptr;  // SearchOptions::should_stop
  std::atomic<uint64_t> states{0}, pruned{0}, candidates{0}, verified{0};
  std::atomic<uint64_t> expr_pruned{0};  // of pruned: by the abstract-expression test
  std::atomic<bool> stopped{false};
  std::atomic<bool> cancelled{false};  // by should_stop; also sets `stopped`
  std::atomic<uint64_t> cut_items{0};  // work items stopped at their own state limit
  // SearchOptions::max_memory_bytes: what the work items hold, as they count it (hold/release).
  uint64_t max_bytes = 0;
  std::atomic<uint64_t> held_bytes{0}, peak_bytes{0};
  std::atomic<bool> memory_bound_hit{false};
  void hold(uint64_t bytes) {
    const uint64_t now = held_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    uint64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    if (max_bytes && now > max_bytes) {
      memory_bound_hit = true;
      stopped = true;
    }
  }
  void release(uint64_t bytes) { held_bytes.fetch_sub(bytes, std::memory_order_relaxed); }
  // SearchOptions::reject_body, and what it dropped: how many bodies, and the first one's reason.
  const std::function<std::string(const ir::BlockGraph&)>* reject_body = nullptr;
  std::atomic<uint64_t> rejected{0};
  std::mutex rejection_mutex;
  std::string first_rejection;
  // Whether the backend rejects `body` (counted when it does).
  bool rejects(const ir::BlockGraph& body) {
    if (!reject_body || !*reject_body) return false;
    std::string why = (*reject_body)(body);
    if (why.empty()) return false;
    ++rejected;
    std::lock_guard lock(rejection_mutex);
    if (first_rejection.empty()) first_rejection = std::move(why);
    return true;
  }
  std::mutex hook_mutex;
  bool stop() {
    if (stopped.load(std::memory_order_relaxed)) return true;
    const uint64_t s = states.load(std::memory_order_relaxed);
    if ((max_states && s >= max_states) ||
        ((s & 255) == 0 && (std::chrono::steady_clock::now() >= deadline || poll_cancel())))
      stopped = true;
    return stopped.load(std::memory_order_relaxed);
  }
  // Asks the caller's hook, one thread at a time, until it says stop; then stays cancelled.
  bool poll_cancel() {
    if (!should_stop || !*should_stop) return false;
    std::lock_guard lock(hook_mutex);
    if (!cancelled && (*should_stop)()) {
      cancelled = true;
      stopped = true;
    }
    return cancelled;
  }
};

struct BlockCandidate {
  std::shared_ptr<const ir::BlockGraph> body;
  // Set when the loop is split over a grid axis (split_reduced.cpp): `body` is then the kernel
  // of partials and `finish` the kernel that combines `splits` of them into the group's outputs.
  std::shared_ptr<const ir::BlockGraph> finish;
  int64_t splits = 1;
  double cost = 0;
  std::string key;  // canonical JSON, the tie-break of equal costs
};

// Enumerates the block graphs of one group under one configuration (block_search.cpp).
std::vector<BlockCandidate> search_block_graphs(const Group& group, const BlockConfig& config,
                                                const SearchSpace& space, Budget& budget);

// A grid axis over a reduced dim (split_reduced.cpp): a body whose loop walks a summed-over dim,
// as a kernel of `splits` partials per output tile and a finishing kernel that combines them.
struct SplitBodies {
  std::shared_ptr<const ir::BlockGraph> parts, finish;
  int64_t splits = 1;
};
// The split counts a body of `grid` and a loop of `range` may take: divisors of the range (as
// split_extents gives them) within the grid-block limit, none when no grid axis is free.
std::vector<int64_t> split_counts(const ir::GridDims& grid, int64_t range,
                                  const SearchSpace& space);
// Finish grids reach up to this many times the device's parallel units.
inline constexpr int64_t kSplitFinishUnits = 4;
// The partials' grid too: beyond a few waves, more splits only add partials to write and read.
inline constexpr int64_t kSplitPartsUnits = 4;
// How many times finer than `grid` along its first axis a split's finish may run: 1, the powers
// of two, and the divisors of `tile` (that axis's tile extent; 0 where unknown) that leave tiles of
// whole 16-element granules, up to kSplitFinishUnits times the parallel units in blocks.
std::vector<int64_t> split_finish_refinements(const ir::GridDims& grid, int64_t tile,
                                              const SearchSpace& space);
// The extent of the tile that a body's first grid axis spreads over (its first saver's), or 0.
int64_t first_axis_tile(const ir::BlockGraph& body);
// The split form of `body`, its finish `refine` times finer along the grid's first axis, or
// nullopt with `why` (no free grid axis, tiles that do not divide, ...).
std::optional<SplitBodies> split_over_loop(const ir::BlockGraph& body, int64_t splits,
                                           std::string& why, int64_t refine = 1);
// The split form of `body` whose finish reads each partial whole, as one view with the splits on a
// dim of their own (a kernel-level reshape), and combines them in one iteration, on the body's
// grid with axis `refine_axis` `refine` times finer; or nullopt with `why`.
std::optional<SplitBodies> split_one_view(const ir::BlockGraph& body, int64_t splits,
                                          std::string& why, int refine_axis = -1,
                                          int64_t refine = 1);
// The (axis, factor) refinements a one-view finish of a body of `grid` may take: (-1, 1), and per
// axis of extent > 1 the powers of two up to the device's grid-block limit (whether the partial
// tiles divide that finely is split_one_view's to check).
std::vector<std::pair<int, int64_t>> split_one_view_refinements(const ir::GridDims& grid,
                                                                const SearchSpace& space);
// A fused kernel of `finish` on `partials`, each reshaped first where the finish reads it as a
// view of other dims (split_one_view).
std::vector<ir::TensorRef> add_finish(ir::KernelGraph& graph,
                                      const std::shared_ptr<const ir::BlockGraph>& finish,
                                      std::vector<ir::TensorRef> partials, const std::string& name);
// The two kernels as a kernel graph with `target`'s inputs and outputs, for proofs and tests.
ir::KernelGraph split_kernel_graph(const ir::KernelGraph& target, const SplitBodies& split);
// The split forms of a found candidate that fit the limits, up to kSplitPartsUnits times the
// device's parallel units in partials' blocks, costed as both kernels.
std::vector<BlockCandidate> split_candidates(const BlockCandidate& c, const SearchSpace& space);

// The cost model's predicted seconds of one fused kernel's body (cost/cost_model.h).
inline double block_graph_cost(const ir::BlockGraph& body, const SearchSpace& space) {
  return cost::kernel_phases(body, space.rates).total();
}

// Kernel-level partitions (partition.cpp): every partition of the op nodes into connected,
// convex groups, each once; a unary elementwise op that follows a fusable op (an epilogue) sits
// with its producer or apart from it. Stops after max_partitions partitions (or a bounded walk),
// setting *stopped_early.
struct Partition {
  std::vector<uint64_t> groups;  // masks, ordered by their first node
  bool epilogue_apart = false;   // an epilogue is not in its producer's group
};
std::vector<Partition> enumerate_partitions(const ir::KernelGraph& graph, size_t max_partitions,
                                            bool* stopped_early = nullptr);
// Whether a lone op (a group of one) is also searched as a generated kernel of its own, beside
// the backend's kernel or library call: a matmul (a narrow product's GEMV can beat the library's)
// and a softmax (whole rows a block, between two library matmuls). The driver ranks the best
// µGraph with one such kernel apart (search.cpp), so the tuner measures it against the library.
bool lone_op_searched(const ir::Op& op);

// The µGraph in which each of `fused` becomes one fused node running `bodies[i]`; the nodes of
// no group stay kernel ops.
// A group whose `finishes[i]` is set becomes two fused nodes: `bodies[i]`, the split's partials,
// and the finish that combines them (split_reduced.cpp).
ir::KernelGraph build_mugraph(
    const ir::KernelGraph& graph, const std::vector<const Group*>& fused,
    const std::vector<std::shared_ptr<const ir::BlockGraph>>& bodies,
    const std::vector<std::shared_ptr<const ir::BlockGraph>>& finishes = {});

}  // namespace yirage::search
