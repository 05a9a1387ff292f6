// `yirage verify`: checks a µGraph a user wrote against the kernel graph it should compute.
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "search/user_mugraph.h"
#include "support/error.h"
#include "tools/commands.h"

namespace yirage::tools {
namespace {

struct VerifyOptions {
  std::string graph, mugraph;
  std::optional<uint64_t> seed;
  bool json = false;
};

void verify_files(const VerifyOptions& o) {
  const ir::KernelGraph graph = ir::load_kernel_graph(o.graph);
  const ir::KernelGraph mugraph = ir::load_kernel_graph(o.mugraph);
  search::MuGraphVerdict verdict;
  try {
    verdict = search::verify_mugraph(graph, mugraph, o.seed, o.seed.value_or(0));
  } catch (const Error& e) {
    fail("verify {} against {}: {}", o.mugraph, o.graph, e.what());
  }
  if (o.json)
    fmt::print("{}\n", verdict.to_json().dump());
  else
    fmt::print("graph: {}\nµGraph: {}\n{}", o.graph, o.mugraph, verdict.report());
  if (verdict.verified) return;
  // The reason once more, on stderr, for scripts that only look there; the exit status says no.
  fmt::print(stderr, "yirage: verify: {}\n", verdict.reason);
  throw CLI::RuntimeError(1);
}

}  // namespace

void add_verify_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "verify", "Check a µGraph against a kernel graph: fingerprint proof and float checks");
  auto options = std::make_shared<VerifyOptions>();
  command->add_option("graph", options->graph, "Kernel graph JSON file")->required();
  command
      ->add_option("mugraph", options->mugraph, "µGraph JSON file (a kernel graph with fused ops)")
      ->required();
  command->add_option("--seed", options->seed, "Seed for the proof and the float checks");
  command->add_flag("--json", options->json, "Print one JSON object instead of text");
  command->callback([options] { verify_files(*options); });
}

}  // namespace yirage::tools
