// `yirage suite`: the public workloads, listed, exported as graph files, or run. `suite run`
// tunes each workload with tune::optimize (or answers from the tuning cache) and reports the
// winner's steady-state time apart from the time tuning took; `--no-tune` runs each unfused graph
// once instead, to look at its outputs.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "search/search.h"
#include "suite/suite.h"
#include "support/error.h"
#include "tools/commands.h"
#include "tools/tensors.h"
#include "tune/tune.h"

namespace yirage::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct SuiteOptions {
  std::string dir;
  std::string backend = "auto";
  int bs = 1;
  std::string dtype = "f32";
  uint64_t seed = 0;
  std::vector<std::string> names;
  // Tuning (suite run without --no-tune).
  double search_seconds = 5;
  std::string cache;  // empty: tune::TuningCache::default_path()
  bool json = false;
  bool no_tune = false;
  bool force = false;
  bool verbose = false;
  bool profile_all = false;  // every search candidate, not the cost model's top-k
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ir::DType float_dtype(const std::string& name) {
  std::optional<ir::DType> dtype = ir::parse_dtype(name);
  if (!dtype || !ir::is_float(*dtype))
    fail("--dtype {}: the suite is built in f32, f16 or bf16", name);
  return *dtype;
}

void list() {
  for (const suite::WorkloadInfo& w : suite::workloads())
    fmt::print("{:<16} {:<9} {}\n", w.name, w.has_batch ? "batched" : "fixed", w.program);
}

void export_all(const SuiteOptions& options) {
  ir::DType dtype = float_dtype(options.dtype);
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) fail("{}: cannot create the directory: {}", options.dir, ec.message());
  for (const suite::WorkloadInfo& w : suite::workloads()) {
    std::string path = (std::filesystem::path(options.dir) / (w.name + ".json")).string();
    ir::save_kernel_graph(suite::build_workload(w.name, options.bs, dtype), path);
    fmt::print("wrote {}\n", path);
  }
}

void run_one(backend::Backend& backend, const std::string& name, const SuiteOptions& options,
             ir::DType dtype) {
  ir::KernelGraph graph = suite::build_workload(name, options.bs, dtype);
  std::vector<ir::HostTensor> inputs;
  for (const suite::WorkloadInfo& w : suite::workloads())
    if (w.name == name) inputs = suite::random_inputs(w, graph, options.seed);
  auto start = std::chrono::steady_clock::now();
  std::vector<ir::HostTensor> outputs = backend::run_on(backend, graph, inputs);
  std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  for (const ir::HostTensor& output : outputs) {
    TensorSummary s = summarize(output);
    fmt::print("{:<16} {:<18} mean {:>11.4g}  absmax {:>10.4g}  nan {:>4}  {:>10.1f} ms\n", name,
               ir::format_type(output.type), s.mean, s.abs_max, s.nan_count, elapsed.count());
  }
}

// One workload's progress on stderr: pieces appended to one line as each stage starts, so that a
// tuning run of several seconds shows where it is, on a terminal and through a pipe alike. With
// --verbose the tuner's log lines come between the pieces, each on a line of its own, and the
// workload's line starts again after them.
class ProgressLine {
 public:
  explicit ProgressLine(std::string prefix) : prefix_(std::move(prefix)) { add(""); }
  void add(std::string_view text) {
    write(open_ ? std::string(text) : fmt::format("{}{}", prefix_, text));
    open_ = true;
  }
  void log(std::string_view line) {
    write(fmt::format("{}  {}\n", open_ ? "\n" : "", line));
    open_ = false;
  }
  void finish(std::string_view text) {
    add(text);
    write("\n");
    open_ = false;
  }

 private:
  static void write(const std::string& text) {
    fmt::print(stderr, "{}", text);
    std::fflush(stderr);
  }
  std::string prefix_;
  bool open_ = false;
};

// "search #1 (fused, 1 kernel, estimated 0.00844 s)" -> "search #1 (fused, 1 kernel)": the
// estimate is the search's cost model, and beside measured times it would read as a measurement.
std::string short_label(std::string label) {
  const size_t at = label.find(", estimated ");
  const size_t close = at == std::string::npos ? at : label.find(')', at);
  if (close != std::string::npos) label.erase(at, close - at);
  return label;
}

struct TunedWorkload {
  tune::OptimizeResult tuned;
  double tune_seconds = 0;     // the optimize() call: search to store, or the cache lookup
  double compile_seconds = 0;  // compiling the cached winner again, on a cache hit
  double steady_seconds = 0;   // the winner's profiled median, measured in this run
  int kernels = 0;             // of the winner
};

TunedWorkload tune_workload(backend::Backend& backend, const ir::KernelGraph& graph,
                            const SuiteOptions& o, ProgressLine& progress) {
  tune::OptimizeOptions options;
  options.cache_path = o.cache;
  options.read_cache = !o.force;
  options.search.budget_seconds = o.search_seconds;
  options.profile.seed = o.seed;
  options.profile_all = o.profile_all;
  options.progress = [&](tune::TuneStage stage, int candidates) {
    progress.add(stage == tune::TuneStage::search
                     ? fmt::format(" searching (up to {:g} s)...", o.search_seconds)
                     : fmt::format(" {} {}...", tune::stage_name(stage), candidates));
  };
  if (o.verbose) options.log = [&](const std::string& line) { progress.log(line); };
  TunedWorkload w;
  Clock::time_point start = Clock::now();
  w.tuned = tune::optimize(graph, backend, options);
  w.tune_seconds = seconds_since(start);
  w.kernels = search::count_kernels(w.tuned.chosen);
  if (!w.tuned.cache_hit) {
    w.steady_seconds = w.tuned.entry.chosen_seconds;
    return w;
  }
  // A hit carries the median measured when the entry was made, perhaps under another load; the
  // winner is timed again so that the time reported comes from this run, like a peer's beside it.
  progress.add(" cache hit; compiling the winner...");
  start = Clock::now();
  std::unique_ptr<backend::Module> module = backend.compile(w.tuned.chosen);
  w.compile_seconds = seconds_since(start);
  progress.add(" profiling...");
  w.steady_seconds =
      tune::profile(backend, *module, w.tuned.chosen, options.profile).median_seconds;
  return w;
}

nlohmann::json workload_json(const std::string& name, const SuiteOptions& o,
                             backend::Backend& backend, const TunedWorkload& w) {
  const tune::CacheEntry& entry = w.tuned.entry;
  nlohmann::json candidates = nlohmann::json::array();
  for (const tune::CandidateRecord& c : entry.candidates)
    candidates.push_back({{"label", c.label}, {"status", c.status}, {"seconds", c.seconds}});
  const std::string& label = entry.winner().label;
  return {{"workload", name},
          {"bs", o.bs},
          {"dtype", o.dtype},
          {"backend", backend.name()},
          {"device", backend.device().name},
          {"winner", short_label(label)},
          {"label", label},
          {"kernels", w.kernels},
          {"cache_hit", w.tuned.cache_hit},
          {"tune_seconds", w.tune_seconds},
          {"compile_seconds", w.compile_seconds},
          {"steady_seconds", w.steady_seconds},
          {"tuned_seconds", entry.chosen_seconds},
          {"entry", entry.key.id()},
          {"candidates", candidates}};
}

std::string format_micros(double seconds) {
  return fmt::format("{:.1f} µs", seconds * 1e6);
}

void tune_suite(backend::Backend& backend, const std::vector<std::string>& names,
                const SuiteOptions& o, ir::DType dtype) {
  const std::string cache =
      (o.cache.empty() ? tune::TuningCache::default_path() : std::filesystem::path(o.cache))
          .string();
  if (!o.json) {
    fmt::print("backend: {}\n", describe_backend(backend));
    fmt::print("bs {}, dtype {}; search up to {:g} s per workload; tuning cache {}\n", o.bs,
               o.dtype, o.search_seconds, cache);
    fmt::print("{:<16} {:<38} {:>7} {:>11} {:>14}\n", "workload", "winner", "kernels", "tuning",
               "steady state");
  }
  double total_tuning = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    ProgressLine progress(fmt::format("[{}/{}] {}:", i + 1, names.size(), names[i]));
    const TunedWorkload w =
        tune_workload(backend, suite::build_workload(names[i], o.bs, dtype), o, progress);
    const std::string winner = short_label(w.tuned.entry.winner().label);
    total_tuning += w.tune_seconds + w.compile_seconds;
    progress.finish(fmt::format(
        " {} {}, {}", winner, format_micros(w.steady_seconds),
        w.tuned.cache_hit ? "from the cache" : fmt::format("tuned in {:.1f} s", w.tune_seconds)));
    if (o.json)
      fmt::print("{}\n", workload_json(names[i], o, backend, w).dump());
    else
      fmt::print(
          "{:<16} {:<38} {:>7} {:>11} {:>14}\n", names[i], winner, w.kernels,
          w.tuned.cache_hit ? std::string("cache hit") : fmt::format("{:.2f} s", w.tune_seconds),
          format_micros(w.steady_seconds));
    std::fflush(stdout);  // a reader of the pipe sees each workload as it finishes
  }
  if (!o.json)
    fmt::print(
        "tuning and compiling took {:.1f} s; steady state is the profiled median of the "
        "winner in this run\n",
        total_tuning);
}

void run_suite(const SuiteOptions& options) {
  ir::DType dtype = float_dtype(options.dtype);
  if (!(options.search_seconds > 0))
    fail("suite run: --search-seconds must be a positive number of seconds, got {}",
         options.search_seconds);
  if (options.no_tune && (options.json || options.force || !options.cache.empty()))
    fail("suite run: --json, --force and --cache tune; they do not go with --no-tune");
  std::vector<std::string> names = options.names;
  if (names.empty())
    for (const suite::WorkloadInfo& w : suite::workloads()) names.push_back(w.name);
  // Bad names fail here, before any workload has run.
  for (const std::string& name : names) suite::build_workload(name, options.bs, dtype);

  backend::Backend& backend = select_backend(options.backend);
  if (!options.no_tune) return tune_suite(backend, names, options, dtype);
  fmt::print("backend: {}\n", describe_backend(backend));
  fmt::print("bs {}, dtype {}, random inputs with seed {}; ms is the whole run_on call\n",
             options.bs, options.dtype, options.seed);
  for (const std::string& name : names) run_one(backend, name, options, dtype);
}

}  // namespace

void add_suite_command(CLI::App& app) {
  CLI::App* suite = app.add_subcommand("suite", "The public workload suite");
  suite->require_subcommand(1);
  auto options = std::make_shared<SuiteOptions>();

  suite->add_subcommand("list", "List the workloads and their programs")->callback(list);

  CLI::App* export_command =
      suite->add_subcommand("export", "Write every workload as DIR/<name>.json");
  export_command->add_option("dir", options->dir, "Output directory")->required();
  export_command->add_option("--bs", options->bs, "Batch scale")->capture_default_str();
  export_command->add_option("--dtype", options->dtype, "f32, f16 or bf16")->capture_default_str();
  export_command->callback([options] { export_all(*options); });

  CLI::App* run_command = suite->add_subcommand(
      "run", "Tune each workload (or take its winner from the tuning cache) and time it");
  run_command->add_option("workloads", options->names, "Workloads to run (default: all)");
  run_command->add_option("--backend", options->backend, "Backend name, or auto")
      ->capture_default_str();
  run_command->add_option("--bs", options->bs, "Batch scale")->capture_default_str();
  run_command->add_option("--dtype", options->dtype, "f32, f16 or bf16")->capture_default_str();
  run_command->add_option("--seed", options->seed, "Seed of the random inputs")
      ->capture_default_str();
  run_command
      ->add_option("--search-seconds", options->search_seconds,
                   "Search budget per workload, in seconds")
      ->capture_default_str();
  run_command->add_option("--cache", options->cache,
                          "Tuning database (default $YIRAGE_CACHE_DIR/tuning.sqlite, else the XDG "
                          "cache dir)");
  run_command->add_flag("--json", options->json,
                        "Print one JSON object per workload instead of the table");
  run_command->add_flag("--force", options->force, "Search and profile again despite a cache hit");
  run_command->add_flag("--verbose", options->verbose, "Print the tuner's log on stderr");
  run_command->add_flag("--profile-all", options->profile_all,
                        "Compile and profile every search candidate, not only the cost model's "
                        "top-k");
  run_command->add_flag("--no-tune", options->no_tune,
                        "Run each unfused graph once and print its outputs' summaries");
  run_command->callback([options] { run_suite(*options); });
}

}  // namespace yirage::tools
