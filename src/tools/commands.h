// The `yirage` subcommands; each file adds one to the app and runs it from its callback.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "search/search.h"

namespace yirage::tools {

void add_backends_command(CLI::App& app);
void add_graph_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_suite_command(CLI::App& app);
void add_optimize_command(CLI::App& app);
void add_generate_command(CLI::App& app);   // the LLM engine (cmd_generate.cpp)
void add_chat_command(CLI::App& app);       // cmd_chat.cpp
void add_serve_command(CLI::App& app);      // the OpenAI-compatible server (cmd_serve.cpp)
void add_cache_command(CLI::App& app);      // the tuning cache (cmd_cache.cpp)
void add_verify_command(CLI::App& app);     // a user's µGraph against a graph (cmd_verify.cpp)
void add_calibrate_command(CLI::App& app);  // the cost model's rates per device (cmd_calibrate.cpp)

// Whether the tuning cache at its default path holds a calibration of `backend`'s device, and
// when it was made; never creates the cache (cmd_backends.cpp).
std::optional<std::string> calibrated_on(const backend::Backend& backend);

// The profiled `yirage optimize` (cmd_cache.cpp): tune::optimize on a backend that can run,
// which searches, compiles, profiles and caches, or answers from the cache.
struct TunedOptimizeOptions {
  std::string file, backend, cache, out;
  search::SearchOptions search;  // as `yirage optimize` without tuning would search
  uint64_t profile_seed = 0;     // the profiler's and the float check's inputs
  bool force = false;            // search and profile even on a cache hit
  bool json = false;
  bool verbose = false;      // print each search candidate's predicted phases
  std::optional<int> top_k;  // search candidates profiled; unset: tune::OptimizeOptions's default
  bool profile_all = false;  // profile every search candidate
};
void tuned_optimize(const TunedOptimizeOptions& options);

// The search's ranked candidates with their predicted phases (cost/cost_model.h), for --json:
// [{"rank", "kernels", "input_graph", "form" (search::Candidate::form), "estimated_seconds",
// "predicted": {"launch", "ramp_up", "steady", "ramp_down", "collective", "overlap", "kernels",
// "total"}}, ...]; "input_graph" marks the unfused graph itself, which the tuner labels "unfused"
// (cmd_optimize.cpp).
nlohmann::json ranked_json(const search::SearchResult& result, const ir::KernelGraph& graph,
                           bool with_mugraphs);
// For --verbose: the rates the model ranked by, then one line per candidate with its phases, the
// unfused graph itself marked as such.
void print_predictions(const search::SearchResult& result, const ir::KernelGraph& graph);
// `yirage optimize --ray ADDRESS` (cmd_optimize_ray.cpp): tunes options.file on the Ray cluster at
// `address` through the Python package (`python3 -m yirage.ray_cli tune`, a subprocess: the CLI
// embeds no Python), which merges the winner's entry into options.cache (resolved to the default
// when empty). tuned_optimize with the same options then finds it as a cache hit.
void tune_on_ray(const std::string& address, const TunedOptimizeOptions& options);

// The winner the tuning cache holds for `graph` on `backend`'s device, if any; none for a backend
// not worth tuning (DeviceDescription::tunable), whose cache is never opened (cmd_cache.cpp).
std::optional<ir::KernelGraph> cached_winner_for(const ir::KernelGraph& graph,
                                                 backend::Backend& backend);

// The backend for a --backend value: "auto" is the registry's first available backend. Throws
// for an unknown or unavailable backend, never substituting another.
backend::Backend& select_backend(const std::string& name);

// "reference (reference (host CPU), fingerprint 0123456789abcdef)"
std::string describe_backend(backend::Backend& backend);

}  // namespace yirage::tools
