// bench/gpu.sh's driver: the public suite at fp16 through YiRage's own pipeline on a GPU backend
// (cuda, or with --backend triton the triton backend). For each workload (bs 1 and 8 where it
// has a batch) it calls tune::optimize, which
// searches, compiles the search's candidates and the unfused graph (whose kernel-level matmuls
// are cuBLAS calls where cuBLAS loaded), checks them, profiles them on the GPU and caches the
// fastest. It then checks the chosen µGraph against the reference executor on fresh random inputs
// (outputs poisoned first) and times it with the backend's clock (Backend::time: CUDA events over
// CUDA-graph replays), and prints one
// JSON object per line naming the winner and every candidate's tuned time. Nothing here picks a
// µGraph by hand: what is timed is what the tuner chose.
//
// With --compile-only (for CI, where there is no GPU) it runs the same search under an H200's
// description and lowers and compiles every candidate the tuner would compile, printing what it
// compiled, so that the GPU run cannot fail on code that CI never built.
//
//   yirage_cuda_bench [--backend cuda|triton] [--workloads a,b,...] [--bs 1,8] [--cache PATH]
//                     [--search-seconds S] [--compile-only] [--no-check]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/driver.h"
#include "h200_description.h"
#include "search/search.h"
#include "suite/suite.h"
#include "support/error.h"
#include "tune/tune.h"
#include "verify/verify.h"

namespace yirage {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

struct Options {
  std::string backend = "cuda";  // the registry's name of the backend that tunes and runs
  std::vector<std::string> workloads;
  std::vector<int> batch_sizes{1, 8};
  std::string cache_path;  // empty: the user's tuning cache
  double search_seconds = 30;
  bool compile_only = false;
  bool check = true;  // the winner against the reference executor before it is timed
};

Options parse(int argc, char** argv) {
  Options o;
  for (const suite::WorkloadInfo& w : suite::workloads()) o.workloads.push_back(w.name);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--compile-only") {
      o.compile_only = true;
      continue;
    }
    if (flag == "--no-check") {
      o.check = false;
      continue;
    }
    if (i + 1 >= argc) fail("yirage_cuda_bench: {} needs a value", flag);
    const std::string value = argv[++i];
    if (flag == "--backend") {
      o.backend = value;
    } else if (flag == "--workloads") {
      o.workloads = split_list(value);
    } else if (flag == "--bs") {
      o.batch_sizes.clear();
      for (const std::string& b : split_list(value)) o.batch_sizes.push_back(std::stoi(b));
    } else if (flag == "--cache") {
      o.cache_path = value;
    } else if (flag == "--search-seconds") {
      o.search_seconds = std::stod(value);
    } else {
      fail("yirage_cuda_bench: unknown flag '{}'", flag);
    }
  }
  if (o.compile_only && o.backend != "cuda")
    fail("yirage_cuda_bench: --compile-only lowers for the cuda backend only, not '{}'", o.backend);
  return o;
}

struct Check {
  double rel_l2 = 0, max_abs = 0;
  int64_t not_finite = 0;
};

Check compare(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  Check c;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double a = actual.get(i), e = expected.get(i);
    if (!std::isfinite(a)) {
      ++c.not_finite;
      continue;
    }
    diff += (a - e) * (a - e);
    norm += e * e;
    c.max_abs = std::max(c.max_abs, std::fabs(a - e));
  }
  c.rel_l2 = std::sqrt(diff / std::max(norm, 1e-30));
  return c;
}

nlohmann::json candidates_of(const tune::CacheEntry& entry) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < entry.candidates.size(); ++i) {
    const tune::CandidateRecord& c = entry.candidates[i];
    nlohmann::json row = {
        {"label", c.label}, {"status", c.status}, {"chosen", int(i) == entry.chosen}};
    if (c.seconds >= 0) row["tuned_us"] = c.seconds * 1e6;
    if (!c.message.empty()) row["message"] = c.message.substr(0, 300);
    list.push_back(row);
  }
  return list;
}

// The winner against the reference executor on fresh inputs, then timed by the backend's clock.
// With `check` false (a later round's cache hit, checked in the first) it only times.
void check_and_time(backend::Backend& gpu, const suite::WorkloadInfo& w,
                    const ir::KernelGraph& graph, const ir::KernelGraph& chosen, bool check,
                    nlohmann::json& row) {
  const uint64_t seed = std::random_device{}();
  const std::vector<ir::HostTensor> inputs = suite::random_inputs(w, graph, seed);
  std::vector<ir::HostTensor> expected;
  for (const ir::GraphOutput& o : graph.outputs()) expected.emplace_back(graph.type(o.tensor));
  row["seed"] = seed;
  row["checked"] = check;
  if (check) {
    expected = verify::run_reference(graph, inputs);
    const std::vector<ir::HostTensor> actual = backend::run_on(gpu, chosen, inputs);
    const Check c = compare(actual.at(0), expected.at(0));
    row["rel_l2"] = c.rel_l2;
    row["max_abs_err"] = c.max_abs;
    row["not_finite"] = c.not_finite;
    row["correct"] = c.not_finite == 0 && c.rel_l2 <= 1e-2;
  }
  int64_t bytes = 0;
  for (const ir::HostTensor& t : inputs) bytes += int64_t(t.bytes.size());
  for (const ir::HostTensor& t : expected) bytes += int64_t(t.bytes.size());
  row["bytes"] = bytes;

  std::unique_ptr<backend::Module> module = gpu.compile(chosen);
  row["kernels"] = module->kernel_count();
  std::vector<std::unique_ptr<backend::Buffer>> owned;
  std::vector<backend::Buffer*> in, out;
  for (const ir::HostTensor& t : inputs) {
    owned.push_back(gpu.allocate(t.bytes.size()));
    owned.back()->write(t.bytes);
    in.push_back(owned.back().get());
  }
  for (const ir::HostTensor& t : expected) {
    owned.push_back(gpu.allocate(t.bytes.size()));
    out.push_back(owned.back().get());
  }
  // One input set: the fixed-input figure the benchmark has always printed; 20 warm-up
  // launches, then 7 samples of 100 CUDA-graph replays each, timed by CUDA events.
  const backend::LaunchBuffers buffers{in, out};
  const backend::TimingPlan plan{.warmup = 20, .repetitions = 7, .launches_per_repetition = 100};
  std::vector<double> times = gpu.time(*module, {&buffers, 1}, plan).seconds_per_launch;
  std::sort(times.begin(), times.end());
  row["median_us"] = times[times.size() / 2] * 1e6;
  row["min_us"] = times.front() * 1e6;
}

nlohmann::json tuned_row(backend::Backend& gpu, const Options& o, const suite::WorkloadInfo& w,
                         int bs) {
  const ir::KernelGraph graph = suite::build_workload(w.name, bs, ir::DType::f16);
  nlohmann::json row = {{"workload", w.name}, {"bs", bs}, {"backend", o.backend}};
  tune::OptimizeOptions options;
  options.cache_path = o.cache_path;
  options.search.budget_seconds = o.search_seconds;
  // Every candidate measured, not the cost model's top-k alone: bench/cost_model.py compares the
  // model with each one's time.
  options.profile_all = true;
  options.log = [&](const std::string& line) {
    std::fprintf(stderr, "[%s bs%d] %s\n", w.name.c_str(), bs, line.c_str());
  };
  const auto start = std::chrono::steady_clock::now();
  const tune::OptimizeResult result = tune::optimize(graph, gpu, options);
  row["tune_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row["cache_hit"] = result.cache_hit;
  row["winner"] = result.entry.winner().label;
  row["tuned_winner_us"] = result.entry.chosen_seconds * 1e6;
  row["candidates"] = candidates_of(result.entry);
  check_and_time(gpu, w, graph, result.chosen, o.check, row);
  return row;
}

using yirage::testing::h200_description;

// The search's candidates and the unfused graph, lowered as the backend would on an H200 and
// compiled with NVRTC; one row per candidate. Returns how many failed.
int compile_only(const Options& o, const suite::WorkloadInfo& w, int bs) {
  const ir::KernelGraph graph = suite::build_workload(w.name, bs, ir::DType::f16);
  const backend::cuda::CodegenOptions options =
      backend::cuda::default_codegen_options(h200_description(), true, true);
  search::SearchOptions so;
  so.budget_seconds = o.search_seconds;
  // As the backend's tuner searches: the lowering's own check of each body.
  so.reject_body = [&options](const ir::BlockGraph& body) {
    return backend::cuda::reject_body(body, options);
  };
  const search::SearchResult found = search::superoptimize(graph, h200_description(), so);
  // Every ranked candidate, as the tuner compiles them under --profile-all (its default top-k
  // compiles fewer), so that every µGraph the search may return is lowered here.
  std::vector<std::pair<std::string, ir::KernelGraph>> candidates{{"unfused", graph}};
  for (size_t i = 0; i < found.ranked.size(); ++i)
    candidates.emplace_back(fmt::format("search #{}", i), found.ranked[i].mugraph);
  int failures = 0;
  for (const auto& [label, candidate] : candidates) {
    nlohmann::json row = {{"workload", w.name}, {"bs", bs}, {"candidate", label}};
    try {
      const backend::cuda::Program program = backend::cuda::lower(candidate, options);
      int compiled = 0;
      for (const backend::cuda::KernelLaunch& k : program.kernels) {
        if (k.gemm) continue;  // a cuBLAS call: nothing to compile
        backend::cuda::compile_cuda(k.source, k.arch_specific ? "sm_90a" : "sm_90", k.name);
        ++compiled;
      }
      row["kernels_compiled"] = compiled;
      row["steps"] = program.kernels.size();
      row["ok"] = true;
    } catch (const std::exception& e) {
      row["ok"] = false;
      row["error"] = e.what();
      ++failures;
    }
    std::cout << row.dump() << std::endl;
  }
  return failures;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  backend::Backend* gpu = o.compile_only ? nullptr : &backend::get_backend(o.backend);
  int failures = 0;
  for (const suite::WorkloadInfo& w : suite::workloads()) {
    if (std::find(o.workloads.begin(), o.workloads.end(), w.name) == o.workloads.end()) continue;
    for (int bs : o.batch_sizes) {
      if (!w.has_batch && bs != 1) continue;
      if (o.compile_only) {
        failures += compile_only(o, w, bs);
        continue;
      }
      nlohmann::json row;
      try {
        row = tuned_row(*gpu, o, w, bs);
      } catch (const std::exception& e) {
        row = {{"workload", w.name},
               {"bs", bs},
               {"backend", o.backend},
               {"correct", false},
               {"error", e.what()}};
        ++failures;
      }
      std::cout << row.dump() << std::endl;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace yirage

int main(int argc, char** argv) {
  try {
    return yirage::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "yirage_cuda_bench: %s\n", e.what());
    return 1;
  }
}
