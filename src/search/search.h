// YiRage search: the superoptimizer that turns a kernel graph into faster, proven-equal µGraphs.
//
// superoptimize() partitions the graph's ops into fusion groups (kernel level), and for every
// group of two or more ops enumerates block graphs (block level): grids, imaps, fmaps, omaps and
// for-loop ranges come from a dim-correspondence analysis of the group, with extents filtered by
// the device description's `capabilities["search"]` (documented in backend/backend.h); block ops
// are enumerated in a canonical order, each prefix pruned unless its abstract expression can be
// part of the group's (abstract_expr.h documents the axioms). Complete candidates are ranked by a
// documented cost estimate (cost.cpp), proved equivalent by finite-field fingerprints
// (verify::check_equivalent), and the best is checked in floating point against the reference
// executor. The unfused input graph is always a valid candidate, so the result is never empty.
//
// Determinism: the enumeration order is fixed and work items are merged in item order, so a
// search that finishes within its budgets returns the same ranking for the same seed whatever
// the thread count. A budget that runs out cuts the search where the clock says, which may differ
// from run to run; `stats.budget_exhausted` says when that happened.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ir/ir.h"
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

struct SearchOptions {
  double budget_seconds = 60;   // wall-clock budget for the enumeration
  uint64_t max_states = 0;      // 0 = unlimited
  uint64_t seed = 0;            // same seed -> same result; also seeds the float check's inputs
  int threads = 0;              // 0 = hardware concurrency
  std::string checkpoint_path;  // empty = none; resumed from when the file exists
  verify::FingerprintOptions fingerprint;
  // Called from the searching threads, serialised, at most a few times a second.
  std::function<void(const SearchProgress&)> progress;
};

struct Candidate {
  ir::KernelGraph mugraph;  // the input graph's inputs and outputs, with fused nodes
  int kernels = 0;          // count_kernels(mugraph)
  double estimated_seconds = 0;
  verify::EquivalenceResult proof;  // against the input graph
};

struct SearchStats {
  uint64_t states = 0, pruned = 0, candidates = 0, verified = 0;
  double seconds = 0;
  bool budget_exhausted = false;
  bool resumed = false;  // work items were taken from the checkpoint
};

struct FloatCheck {
  bool passed = false;
  double max_error = 0;  // the largest |actual - expected| / (1 + |expected|) over outputs
  std::string summary;
};

struct SearchResult {
  // Best first; never empty: the unfused input graph is always a valid candidate.
  std::vector<Candidate> ranked;
  SearchStats stats;
  FloatCheck float_check;  // of ranked[0] against the reference executor on fresh inputs
  // Why the search could not do better, one line each: ops it cannot place in a fused kernel,
  // groups with no verified block graph, an exhausted budget. Empty when nothing to report.
  std::vector<std::string> notes;
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
  int64_t max_tile_bytes_in_loop = 0;
  int64_t max_tile_bytes_total = 0;
  int64_t max_grid_blocks = 0;
  int64_t parallel_units = 1;
  double bytes_per_second = 0;
  double flops_per_second = 0;
  double launch_seconds = 0;
};
SearchSpace search_space(const backend::DeviceDescription& device);

}  // namespace yirage::search
