// YiRage search: the superoptimizer that turns a kernel graph into faster, proven-equal µGraphs.
//
// superoptimize() partitions the graph's ops into fusion groups (kernel level; a unary elementwise
// epilogue both with its producer and apart from it, the best µGraph of each choice proved and
// returned, so that the tuner measures both: partition.cpp), and for every group of two or more
// ops, and every lone matmul or softmax (lone_op_searched), enumerates block graphs (block level):
// grids, imaps, fmaps, omaps and for-loop ranges come from a dim-correspondence analysis of the
// group, with extents that divide the dims (powers of two, extents whose tiles are aligned powers
// of two, and for the grid the best fit to the device's parallel units; dims.cpp) filtered by the
// device description's `capabilities["search"]` (documented in backend/device.h); block ops are
// enumerated in a canonical order, each prefix pruned unless its abstract expression can be part of
// the group's (abstract_expr.h documents the axioms). Exp-normalize is built in its safe form only:
// a softmax (or exp(x) / Σexp(x) written out, read as one; exp_normalize.cpp) has its row max
// subtracted before the exp, and in a loop over its dim becomes an online softmax, a running max
// with rescaled accumulators (block_search.cpp). Complete candidates are ranked by the phase cost
// model (cost/cost_model.h), at the device's rough rates or calibrated ones; the cheapest µGraphs
// are proved equivalent to the input graph by finite-field fingerprints (verify::check_equivalent),
// each once, besides the best that split one group's loop over a grid axis, that split every
// group's, and that run one lone op as a generated kernel (search.cpp; Candidate::form names
// which), and each is checked in floating point against the reference executor on the input
// distributions of verify/numerics.h, which drops one that overflows where the input graph does
// not. The unfused input graph is always a valid candidate, so the result is never empty.
//
// Determinism: the enumeration order is fixed and work items are merged in item order, so a
// search that finishes within its budgets returns the same ranking for the same seed whatever
// the thread count. A budget that runs out cuts the search where the clock says, which may differ
// from run to run; `stats.budget_exhausted` says when that happened.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.h"
#include "cost/cost_model.h"
#include "ir/ir.h"
#include "verify/numerics.h"
#include "verify/verify.h"

namespace yirage::search {

struct SearchProgress {
  uint64_t states = 0;      // block-graph prefixes visited so far
  uint64_t pruned = 0;      // prefixes cut by abstract-expression or partial-sum pruning
  uint64_t candidates = 0;  // complete block graphs whose expression matches the target's
  uint64_t verified = 0;    // candidates proved equivalent by fingerprints
  double seconds = 0;
  double states_per_second = 0;
};

// What decides whether a prefix's abstract expression can be part of the target's: the normal
// form (abstract_expr.h), or Z3 proving or refuting it under the same axioms (abstract_expr_z3.h;
// it keeps what it can do neither for). Z3 is optional at build time: see z3_available().
enum class Pruner { normal_form, z3 };
const char* pruner_name(Pruner pruner);
// Whether this build has the Z3 pruner (CMake YIRAGE_Z3, Debian libz3-dev).
bool z3_available();

struct SearchOptions {
  double budget_seconds = 60;  // wall-clock budget for the enumeration
  uint64_t max_states = 0;     // 0 = unlimited
  // Bytes the enumeration may hold in the block graphs it found (counted as twice their canonical
  // JSON, which a body's structs take about as much as) and in each work item's memo of abstract
  // expressions. Past it the enumeration stops as at the end of its budget, keeping what it found,
  // and says so in the notes and stats.memory_bound_hit. 0: a quarter of the memory available
  // when the search starts (support/system_memory.h).
  uint64_t max_memory_bytes = 0;
  uint64_t seed = 0;            // same seed -> same result; also seeds the float check's inputs
  int threads = 0;              // 0 = hardware concurrency
  std::string checkpoint_path;  // empty = none; resumed from when the file exists
  verify::FingerprintOptions fingerprint;
  // Called from the searching threads, serialised, at most a few times a second.
  std::function<void(const SearchProgress&)> progress;
  // Pruner::z3 in a build without Z3 is an error, never a silent fallback.
  Pruner pruner = Pruner::normal_form;
  // Cancellation: polled from the searching threads, serialised, where the budget is checked (at
  // the start of every block-level work item, every 256 states) and before every proof. Once it
  // returns true it is not called again, and the search stops as if its budget had run out: the
  // result holds what was proved before (the unfused input graph at least), each still
  // float-checked, and stats.cancelled is set. Empty = never cancelled.
  std::function<bool()> should_stop;
  // The rates candidates are ranked by (cost/cost_model.h): a calibration's (tune::Calibration,
  // `yirage calibrate`) where the caller has one; empty: the device description's rough rates.
  std::optional<cost::Device> rates;
  // The target backend's check of a body it would lower (backend::Backend::reject_body): called
  // from the searching threads on each finished body that fits the description's limits; a body
  // with a reason is dropped, and the drops are counted in the stats. Empty: the limits alone.
  std::function<std::string(const ir::BlockGraph&)> reject_body;
};

// The float check of one candidate: it and the input graph run on fresh inputs from each of
// verify::kAllDistributions in turn, until one fails (verify/numerics.h).
struct FloatCheck {
  bool passed = false;
  double max_error = 0;  // the largest verify::Comparison::max_error over the distributions run
  // verify::tolerance on uniform inputs for the outputs' dtypes and the graph's reductions; the
  // stress distributions' are larger by their magnitude, each stated in the summary.
  double tolerance = 0;
  // Per distribution run, in order; the last is the one that failed when !passed.
  std::vector<std::pair<verify::InputDistribution, verify::Comparison>> distributions;
  std::string summary;     // every distribution run, its result and the tolerance, on one line
  int reference_runs = 0;  // verify::run_reference calls it made, on either program
};

// `candidate` against `graph` on the reference executor, both in the same dtype, on each input
// distribution of verify/numerics.h in turn until one fails (the two programs at once when
// `parallel`).
FloatCheck float_check(const ir::KernelGraph& graph, const ir::KernelGraph& candidate,
                       uint64_t seed, bool parallel);

struct Candidate {
  ir::KernelGraph mugraph;          // the input graph's inputs and outputs, with fused nodes
  int kernels = 0;                  // count_kernels(mugraph)
  double estimated_seconds = 0;     // predicted.total()
  cost::Phases predicted;           // the cost model's phases (cost/cost_model.h)
  verify::EquivalenceResult proof;  // against the input graph
  FloatCheck float_check;           // passed: a candidate that fails it is not returned
  // Which of the driver's rankings proposed it (search.cpp): "fused", "epilogue apart", "split",
  // "all-split", "lone-op" or "input graph"; reports name a winner by it.
  std::string form;
};

// The Z3 pruner's work in one search: queries asked, answered from the cache, and of those Z3
// ran, the verdicts; the last two count verdicts that differ from the normal form's.
struct Z3PrunerStats {
  uint64_t queries = 0, cache_hits = 0, proved = 0, refuted = 0, unknown = 0;
  uint64_t proved_but_cut = 0, refuted_but_kept = 0;
  std::vector<std::string> differences;  // the first few of those, for the notes
  double seconds = 0;                    // in Z3, summed over threads
};

struct SearchStats {
  uint64_t states = 0, pruned = 0, candidates = 0, verified = 0;
  // Of pruned: prefixes the abstract-expression test cut (or too large to normalise), not counting
  // work items resumed from a checkpoint.
  uint64_t expr_pruned = 0;
  Pruner pruner = Pruner::normal_form;  // the one that ran
  Z3PrunerStats z3;                     // with Pruner::z3
  double seconds = 0;
  // Where `seconds` went: the block-level enumeration (bounded by budget_seconds), the
  // fingerprint proofs of the chosen µGraphs and groups, and the float checks of the proved ones
  // on the reference executor; each proof and float check runs to its end whatever the budget.
  double enumerate_seconds = 0, prove_seconds = 0, float_check_seconds = 0;
  int proofs = 0;          // check_equivalent calls, whole µGraphs and single groups
  int reference_runs = 0;  // verify::run_reference calls made by the float checks
  bool budget_exhausted = false;
  bool memory_bound_hit = false;   // SearchOptions::max_memory_bytes stopped the enumeration
  uint64_t memory_held_bytes = 0;  // the most the enumeration held at once, as counted there
  bool cancelled = false;          // should_stop returned true
  bool resumed = false;            // work items were taken from the checkpoint
  uint64_t backend_rejected = 0;   // finished bodies SearchOptions::reject_body dropped
};

struct SearchResult {
  // Best first; never empty: the unfused input graph is always a valid candidate.
  std::vector<Candidate> ranked;
  SearchStats stats;
  // ranked[0].float_check. Every fused candidate is float-checked, not only the best: the tuner
  // compiles and may choose any of them. Notes say which were dropped by the check, and why.
  FloatCheck float_check;
  // Why the search could not do better, one line each: ops it cannot place in a fused kernel,
  // groups with no verified block graph, an exhausted budget, a cancellation. Empty when nothing to
  // report.
  std::vector<std::string> notes;
  cost::Device rates;  // what the candidates were ranked by (capabilities or a calibration)
};

// Throws yirage::Error when the device description has no usable capabilities["search"] or the
// graph is invalid; never for a graph it cannot fuse (the unfused graph is the answer then).
SearchResult superoptimize(const ir::KernelGraph& graph, const backend::DeviceDescription& device,
                           const SearchOptions& options);

// Kernels a µGraph launches: every node but inputs counts one (a fused node is one kernel),
// except a reshape, which only renames the dims of a contiguous tensor and so costs nothing.
int count_kernels(const ir::KernelGraph& graph);

// The search space a device description allows (capabilities["search"]); exposed for tests and
// the CLI. Throws yirage::Error naming the missing or invalid key.
struct SearchSpace {
  int64_t max_tile_bytes_in_loop = 0;  // 0: no limit of its own (the total still counts the loop)
  int64_t max_tile_bytes_total = 0;
  int64_t pipeline_stages = 1;     // ir::BlockLimits::pipeline_stages
  ir::RegisterTiles in_registers;  // capabilities.search.in_registers
  int64_t max_grid_blocks = 0;
  int64_t parallel_units = 1;    // SMs or cores: the cost model's waves, and a grid extent's fit
  ir::StreamedWeights streamed;  // capabilities.search.streamed_weights; none when absent
  cost::Device rates;            // from the capabilities, or SearchOptions::rates when set
  ir::BlockLimits limits() const {
    return {max_tile_bytes_in_loop, max_tile_bytes_total, max_grid_blocks, streamed,
            pipeline_stages,        in_registers};
  }
};
SearchSpace search_space(const backend::DeviceDescription& device);

}  // namespace yirage::search
