// `yirage suite`: the public workloads, listed, exported as graph files, or run.
#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "suite/suite.h"
#include "support/error.h"
#include "tools/commands.h"
#include "tools/tensors.h"

namespace yirage::tools {
namespace {

struct SuiteOptions {
  std::string dir;
  std::string backend = "auto";
  int bs = 1;
  std::string dtype = "f32";
  uint64_t seed = 0;
  std::vector<std::string> names;
};

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

void run_suite(const SuiteOptions& options) {
  ir::DType dtype = float_dtype(options.dtype);
  std::vector<std::string> names = options.names;
  if (names.empty())
    for (const suite::WorkloadInfo& w : suite::workloads()) names.push_back(w.name);
  // Bad names fail here, before any workload has run.
  for (const std::string& name : names) suite::build_workload(name, options.bs, dtype);

  backend::Backend& backend = select_backend(options.backend);
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

  CLI::App* run_command =
      suite->add_subcommand("run", "Run workloads on a backend with random inputs");
  run_command->add_option("workloads", options->names, "Workloads to run (default: all)");
  run_command->add_option("--backend", options->backend, "Backend name, or auto")
      ->capture_default_str();
  run_command->add_option("--bs", options->bs, "Batch scale")->capture_default_str();
  run_command->add_option("--dtype", options->dtype, "f32, f16 or bf16")->capture_default_str();
  run_command->add_option("--seed", options->seed, "Seed of the random inputs")
      ->capture_default_str();
  run_command->callback([options] { run_suite(*options); });
}

}  // namespace yirage::tools
