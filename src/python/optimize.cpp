// KernelGraph.superoptimize and yirage.OptimizedGraph: search, tune, compile, then run on arrays.
//
// superoptimize runs the tuning pipeline (tune::optimize) on the chosen backend, or for "auto" on
// every available tunable backend, keeping the fastest (tune::optimize_on_fastest_backend): a cache
// hit returns the stored winner; otherwise the search (search::superoptimize, with the backend's
// device description and the caller's options) proposes proven-equivalent µGraphs, the tuner
// compiles, checks and profiles them with the unfused graph, and stores the fastest. The winner
// is compiled once more for the returned object. All of it runs on a worker thread while the
// calling thread, without the GIL, prints progress and checks for signals, so other Python
// threads keep running and Ctrl-C stops the work (run_interruptibly says how). Calls release the
// GIL around the launch.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "python/arrays.h"
#include "python/bindings.h"
#include "search/search.h"
#include "support/error.h"
#include "tune/tune.h"

namespace yirage::python {
namespace {

using namespace nb::literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What a superoptimize call found and what it runs.
struct Optimized {
  ir::KernelGraph graph;    // the program as the user wrote it
  ir::KernelGraph mugraph;  // the µGraph that runs
  std::string backend_name;
  backend::Backend* backend = nullptr;  // registry backends live for the whole process
  bool host_memory = true;
  std::unique_ptr<backend::Module> module;
  // Modules may keep scratch memory (the cpu backend's workspace), so calls from several Python
  // threads take turns at the launch.
  std::mutex launch_mutex;
  nb::dict report;
  nb::dict last_run;
};

void apply_config(tune::OptimizeOptions& settings, nb::handle config) {
  if (config.is_none()) return;
  if (!nb::isinstance<nb::dict>(config))
    fail("superoptimize: config must be a dict of options or None, got {}",
         nb::cast<std::string>(nb::inst_name(config)));
  for (auto [key_object, value] : nb::borrow<nb::dict>(config)) {
    std::string key = nb::cast<std::string>(nb::str(key_object));
    if (key == "threads") {
      settings.search.threads = nb::cast<int>(value);
    } else if (key == "seed") {
      settings.search.seed = nb::cast<uint64_t>(value);
    } else if (key == "max_states") {
      settings.search.max_states = nb::cast<uint64_t>(value);
    } else if (key == "checkpoint") {
      settings.search.checkpoint_path = nb::cast<std::string>(value);
    } else if (key == "target_bound") {
      settings.search.fingerprint.target_bound = nb::cast<double>(value);
    } else if (key == "cache") {
      settings.cache_path = nb::cast<std::string>(value);
    } else if (key == "read_cache") {
      settings.read_cache = nb::cast<bool>(value);
    } else if (key == "max_candidates") {
      settings.max_candidates = nb::cast<int>(value);
    } else if (key == "profile_all") {
      settings.profile_all = nb::cast<bool>(value);
    } else if (key == "profile_seconds") {
      settings.profile.min_seconds = nb::cast<double>(value);
    } else {
      fail(
          "superoptimize: unknown config key '{}' (known: threads, seed, max_states, checkpoint, "
          "target_bound, cache, read_cache, max_candidates, profile_all, profile_seconds)",
          key);
    }
  }
}

// Lines for stderr, made on the pipeline's threads and printed by the calling thread.
class Printer {
 public:
  void add(std::string line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(lines_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

void write_stderr(const std::string& text) {
  nb::module_::import_("sys").attr("stderr").attr("write")(text);
}

// Runs `work` on a worker thread; the calling thread (which holds the GIL on entry) waits
// without it, prints what the work logged, and checks for signals (Python runs signal handlers
// on the main thread only).
//
// Ctrl-C: the calling thread polls PyErr_CheckSignals with the GIL held (Python runs signal
// handlers on the main thread only) and sets `interrupted`; the search's should_stop hook reads
// it, so a running search stops at its next poll, and `work` stops at its next step (throwing
// Interrupted). The KeyboardInterrupt is raised once the worker has returned: abandoning it
// instead would leave it running through interpreter shutdown.
struct Interrupted {};

void run_interruptibly(const std::function<void(const std::atomic<bool>& interrupted)>& work,
                       Printer& printer) {
  std::mutex mutex;
  std::condition_variable wake;
  bool done = false;
  std::atomic<bool> interrupted{false};
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      work(interrupted);
    } catch (const Interrupted&) {
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex);
    done = true;
    wake.notify_all();
  });

  std::optional<nb::python_error> interrupt;
  auto poll = [&] {
    nb::gil_scoped_acquire acquire;
    for (const std::string& line : printer.take()) write_stderr(line + "\n");
    if (!interrupt && PyErr_CheckSignals() != 0) {
      interrupt.emplace();  // takes the pending KeyboardInterrupt
      interrupted = true;
      write_stderr("yirage: interrupted; stopping the search\n");
    }
  };
  {
    nb::gil_scoped_release release;
    std::unique_lock lock(mutex);
    while (!done) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      lock.unlock();
      poll();
      lock.lock();
    }
  }
  worker.join();
  for (const std::string& line : printer.take()) write_stderr(line + "\n");
  if (interrupt) throw *interrupt;
  if (error) std::rethrow_exception(error);
}

nb::dict float_check_dict(const search::FloatCheck& check) {
  nb::dict d;
  d["passed"] = check.passed;
  d["max_error"] = check.max_error;
  d["tolerance"] = check.tolerance;
  d["summary"] = check.summary;
  return d;
}

// What superoptimize found and what runs, for OptimizedGraph.report().
nb::dict report_of(const ir::KernelGraph& graph, const tune::OptimizeResult& tuned,
                   const backend::Backend& backend, const std::string& backend_name,
                   double compile_seconds) {
  const tune::CacheEntry& entry = tuned.entry;
  nb::dict r;
  r["backend"] = backend_name;
  r["device"] = backend.device().name;
  r["kernels"] = search::count_kernels(tuned.chosen);
  r["unfused_kernels"] = search::count_kernels(graph);
  r["verified"] = tuned.proof.equivalent && tuned.proof.bound_met;
  r["proof"] = tuned.proof.summary();
  r["false_accept_bound"] = tuned.proof.false_accept_bound;
  r["chosen"] = entry.winner().label;
  r["measured_seconds"] = entry.chosen_seconds;
  nb::list measured;
  for (const tune::CandidateRecord& c : entry.candidates) {
    nb::dict d;
    d["label"] = c.label;
    d["status"] = c.status;
    d["seconds"] = c.seconds;
    d["message"] = c.message;
    measured.append(d);
  }
  r["candidates_measured"] = measured;
  r["cache_hit"] = tuned.cache_hit;
  r["cache_entry"] = entry.key.id();
  r["search_seconds"] = tuned.search_seconds;
  r["compile_seconds"] = compile_seconds;
  const search::SearchStats stats = tuned.search ? tuned.search->stats : search::SearchStats{};
  r["states"] = stats.states;
  r["pruned"] = stats.pruned;
  r["candidates"] = stats.candidates;
  r["verified_candidates"] = stats.verified;
  r["budget_exhausted"] = stats.budget_exhausted;
  r["memory_bound_hit"] = stats.memory_bound_hit;
  r["backend_rejected"] = stats.backend_rejected;
  r["resumed"] = stats.resumed;
  // The search's float check is of its best-ranked candidate.
  if (tuned.search && entry.winner().label.starts_with("search #0 "))
    r["float_check"] = float_check_dict(tuned.search->float_check);
  nb::list notes;
  if (tuned.search)
    for (const std::string& note : tuned.search->notes) notes.append(note);
  r["notes"] = notes;
  return r;
}

std::unique_ptr<Optimized> superoptimize(const Graph& g, const std::string& backend_choice,
                                         nb::handle config, std::optional<double> budget,
                                         bool verbose) {
  auto opt = std::make_unique<Optimized>();
  opt->graph = *g.graph;
  if (opt->graph.outputs().empty())
    fail("superoptimize: the graph has no outputs; mark at least one with mark_output");
  tune::OptimizeOptions settings;
  if (budget) {
    if (!(*budget > 0)) fail("superoptimize: budget must be a positive number of seconds");
    settings.search.budget_seconds = *budget;
  }
  apply_config(settings, config);

  Printer printer;
  if (verbose) {
    settings.search.progress = [&printer](const search::SearchProgress& p) {
      printer.add(fmt::format(
          "search: {:.1f} s, {} states ({:.0f}/s), {} pruned, {} candidates, {} verified",
          p.seconds, p.states, p.states_per_second, p.pruned, p.candidates, p.verified));
    };
    settings.log = [&printer](const std::string& line) { printer.add("tune: " + line); };
  }
  const std::atomic<bool>* interrupted = nullptr;
  settings.search.should_stop = [&interrupted] { return interrupted && *interrupted; };
  // A search stopped by Ctrl-C skips compiling and profiling its candidates.
  settings.progress = [&interrupted](tune::TuneStage stage, int) {
    if (stage != tune::TuneStage::search && interrupted && *interrupted) throw Interrupted{};
  };

  tune::OptimizeResult tuned;
  // "auto": each backend's best measured time and its host transfers a call
  std::vector<std::pair<std::string, double>> backend_seconds, transfer_seconds;
  Clock::time_point compile_seconds_start;
  run_interruptibly(
      [&](const std::atomic<bool>& flag) {
        interrupted = &flag;
        // Backends probe the machine when first asked (the cpu backend builds a module), so even
        // choosing one happens here, without the GIL.
        if (backend_choice == "auto") {
          // Tuned on every backend that can be tuned here; the fastest one runs it.
          tune::FastestBackendResult fastest =
              tune::optimize_on_fastest_backend(opt->graph, settings);
          for (const tune::BackendTuning& b : fastest.backends) {
            backend_seconds.emplace_back(b.backend,
                                         b.result ? b.result->entry.chosen_seconds : -1.0);
            transfer_seconds.emplace_back(b.backend, b.result ? b.transfer_seconds : -1.0);
          }
          opt->backend_name = fastest.winner().backend;
          tuned = std::move(*fastest.backends[fastest.chosen].result);
        } else {
          opt->backend_name = backend_choice;
        }
        opt->backend = &backend::get_backend(opt->backend_name);
        opt->host_memory = backend_uses_host_memory(*opt->backend);
        if (backend_choice != "auto") tuned = tune::optimize(opt->graph, *opt->backend, settings);
        if (flag) throw Interrupted{};
        compile_seconds_start = Clock::now();
        opt->module = opt->backend->compile(tuned.chosen);
      },
      printer);
  opt->mugraph = tuned.chosen;
  opt->report = report_of(opt->graph, tuned, *opt->backend, opt->backend_name,
                          seconds_since(compile_seconds_start));
  // Each backend's best measured time and its host transfers a call (-1 where tuning failed on
  // it), when "auto" chose: it chose the least sum.
  auto per_backend = [](const std::vector<std::pair<std::string, double>>& values) {
    nb::dict d;
    for (const auto& [name, seconds] : values) d[name.c_str()] = seconds;
    return d;
  };
  opt->report["backend_seconds"] = per_backend(backend_seconds);
  opt->report["backend_transfer_seconds"] = per_backend(transfer_seconds);
  return opt;
}

nb::list call(Optimized& opt, nb::handle inputs_object) {
  if (!nb::isinstance<nb::sequence>(inputs_object) || nb::isinstance<nb::str>(inputs_object))
    fail("inputs must be a list of arrays, one per graph input");
  nb::sequence inputs = nb::borrow<nb::sequence>(inputs_object);
  std::vector<ir::TensorRef> input_refs = opt.graph.inputs();
  size_t given = nb::len(inputs);
  if (given != input_refs.size())
    fail("{} inputs given, the graph takes {}", given, input_refs.size());

  std::vector<BoundInput> bound_inputs;
  std::vector<backend::Buffer*> input_buffers;
  for (size_t i = 0; i < given; ++i) {
    ir::TensorRef ref = input_refs[i];
    bound_inputs.push_back(bind_input(inputs[i], opt.graph.type(ref), opt.graph.node(ref.node).name,
                                      *opt.backend, opt.host_memory));
    input_buffers.push_back(bound_inputs.back().buffer.get());
  }
  std::vector<BoundOutput> bound_outputs;
  std::vector<backend::Buffer*> output_buffers;
  for (const ir::GraphOutput& output : opt.graph.outputs()) {
    bound_outputs.push_back(
        bind_output(opt.graph.type(output.tensor), output.name, *opt.backend, opt.host_memory));
    output_buffers.push_back(bound_outputs.back().buffer.get());
  }

  // What the module was given, recorded for callers (and tests) that check for copies.
  nb::list input_addresses, inputs_copied, output_addresses;
  for (size_t i = 0; i < given; ++i) {
    input_addresses.append(reinterpret_cast<uintptr_t>(input_buffers[i]->host_address()));
    inputs_copied.append(bound_inputs[i].copied());
  }
  for (backend::Buffer* buffer : output_buffers)
    output_addresses.append(reinterpret_cast<uintptr_t>(buffer->host_address()));

  double seconds = 0;
  {
    nb::gil_scoped_release release;
    std::lock_guard lock(opt.launch_mutex);
    Clock::time_point start = Clock::now();
    opt.module->launch(input_buffers, output_buffers);
    opt.backend->synchronize();
    for (BoundOutput& output : bound_outputs) finish_output(output);
    seconds = seconds_since(start);
  }

  nb::list results;
  for (BoundOutput& output : bound_outputs) results.append(to_numpy(output));
  nb::dict run;
  run["seconds"] = seconds;
  run["input_addresses"] = input_addresses;
  run["inputs_copied"] = inputs_copied;
  run["output_addresses"] = output_addresses;
  opt.last_run = run;
  return results;
}

}  // namespace

void bind_optimize(nb::module_& m, nb::class_<Graph>& graph_class) {
  nb::class_<Optimized> optimized(
      m, "OptimizedGraph",
      "The result of KernelGraph.superoptimize: the best verified µGraph, compiled for one\n"
      "backend. Call it with the inputs to get the outputs.");
  optimized.def("__call__", &call, "inputs"_a,
                "Runs the optimized program. inputs: one array per graph input, in order (NumPy\n"
                "arrays, ml_dtypes.bfloat16 arrays, or any DLPack producer on the host), each of\n"
                "exactly the input's shape and dtype. Returns a list of NumPy arrays, one per\n"
                "marked output. Host arrays in row-major layout are read in place, and outputs\n"
                "own memory the backend wrote, so neither is copied; last_run() tells.");
  optimized.def(
      "report", [](const Optimized& o) { return o.report.attr("copy")(); },
      "What the search found and what runs: backend, kernels, verified, search_seconds,\n"
      "states, cache_hit, and more (see the README's Python section).");
  optimized.def(
      "last_run", [](const Optimized& o) { return o.last_run.attr("copy")(); },
      "Facts of the latest call: seconds, the host addresses of the buffers the module read\n"
      "and wrote, and which inputs had to be copied.");
  optimized.def_prop_ro(
      "mugraph",
      [](const Optimized& o) { return Graph{std::make_shared<ir::KernelGraph>(o.mugraph)}; },
      "The µGraph that runs, as a KernelGraph (fused kernels included).");
  optimized.def_prop_ro(
      "backend", [](const Optimized& o) { return o.backend_name; }, "The backend it runs on.");
  optimized.def("__repr__", [](const Optimized& o) {
    return fmt::format("<yirage.OptimizedGraph on '{}': {} kernel(s)>", o.backend_name,
                       search::count_kernels(o.mugraph));
  });

  graph_class.def(
      "superoptimize",
      [](const Graph& g, const std::string& backend, nb::handle config,
         std::optional<double> budget,
         bool verbose) { return superoptimize(g, backend, config, budget, verbose); },
      "backend"_a = "auto", "config"_a = nb::none(), "budget"_a = nb::none(), "verbose"_a = false,
      "Searches for fused µGraphs equivalent to this graph, proves them equal, measures them\n"
      "and the unfused graph on the backend, caches the fastest (keyed by the graph and the\n"
      "device), and compiles it. Returns a callable OptimizedGraph.\n\n"
      "backend: a name from get_available_backends(), or 'auto': tune on every available\n"
      "  backend worth tuning and run on the one whose winner measured fastest\n"
      "  (report()['backend_seconds'] holds each one's best time).\n"
      "  An unavailable backend is an error, never a silent fallback.\n"
      "config: None or a dict: threads, seed, max_states, checkpoint (a file the search\n"
      "  resumes from), target_bound (false-accept bound of the proofs), cache (the tuning\n"
      "  cache file; default $YIRAGE_CACHE_DIR/tuning.sqlite or ~/.cache/yirage), read_cache\n"
      "  (False: search and measure again), max_candidates (the cost model's top-k search\n"
      "  candidates compiled and profiled besides the unfused graph; default 2), profile_all\n"
      "  (True: profile every candidate), profile_seconds.\n"
      "budget: seconds the search may take (default: the search's own, 60).\n"
      "verbose: print progress to stderr.\n"
      "The GIL is released while searching and compiling. Ctrl-C stops the search and\n"
      "raises KeyboardInterrupt.");
}

}  // namespace yirage::python
