// `yirage run`: executes a kernel graph file on a backend and reports its outputs.
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/commands.h"
#include "tools/tensors.h"

namespace yirage::tools {
namespace {

struct RunOptions {
  std::string file;
  std::string backend = "auto";
  uint64_t seed = 0;
  std::string inputs_dir;
  std::string save_dir;
  bool no_cache = false;
};

void print_output(const std::string& name, const ir::HostTensor& tensor) {
  TensorSummary s = summarize(tensor);
  fmt::print("{}: {}\n", name, ir::format_type(tensor.type));
  fmt::print("  min {:.6g}  max {:.6g}  mean {:.6g}  nan {}  inf {}\n", s.min, s.max, s.mean,
             s.nan_count, s.inf_count);
  fmt::print("  first [{:.6g}]\n", fmt::join(s.first, ", "));
}

void run(const RunOptions& options) {
  ir::KernelGraph graph = ir::load_kernel_graph(options.file);
  backend::Backend& backend = select_backend(options.backend);
  std::vector<ir::HostTensor> inputs = options.inputs_dir.empty()
                                           ? random_inputs(graph, options.seed)
                                           : load_inputs(graph, options.inputs_dir);
  fmt::print("backend: {}\n", describe_backend(backend));
  if (options.inputs_dir.empty())
    fmt::print("inputs: random, seed {}\n", options.seed);
  else
    fmt::print("inputs: {}\n", options.inputs_dir);

  // A µGraph that `yirage optimize` chose for this program on this device runs in its place.
  std::optional<ir::KernelGraph> winner;
  if (!options.no_cache) winner = cached_winner_for(graph, backend);
  if (winner) fmt::print("using the cached µGraph from the tuning cache\n");
  std::vector<ir::HostTensor> outputs = backend::run_on(backend, winner ? *winner : graph, inputs);
  for (size_t i = 0; i < outputs.size(); ++i) print_output(graph.outputs()[i].name, outputs[i]);

  if (!options.save_dir.empty()) {
    save_outputs(graph, outputs, options.save_dir);
    fmt::print("saved outputs to {}\n", options.save_dir);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("run", "Run a kernel graph file on a backend");
  auto options = std::make_shared<RunOptions>();
  command->add_option("file", options->file, "Kernel graph JSON file")->required();
  command->add_option("--backend", options->backend, "Backend name, or auto")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Seed of the random inputs")->capture_default_str();
  command->add_option("--inputs", options->inputs_dir,
                      "Read input N from DIR/N.npy instead of making random inputs");
  command->add_option("--save", options->save_dir, "Write output N to DIR/N.npy");
  command->add_flag("--no-cache", options->no_cache,
                    "Run the graph as written even when the tuning cache holds a winner for it");
  command->callback([options] { run(*options); });
}

}  // namespace yirage::tools
