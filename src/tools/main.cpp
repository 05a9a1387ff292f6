// The `yirage` command line.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "support/version.h"
#include "tools/commands.h"
#include "tune/tune.h"

namespace {

// Error messages are one line by contract; this keeps them so even if some library's is not.
void print_error(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  fmt::print(stderr, "yirage: error: {}\n", message);
}

}  // namespace

int main(int argc, char** argv) {
  // `yirage --yirage-tune-worker <request>` checks and profiles candidates for a tuning caller
  // (tune.h); any other run registers this binary as the worker of its own tuning.
  if (std::optional<int> code = yirage::tune::serve_as_worker_if_asked(argc, argv)) return *code;
  CLI::App app{"YiRage: superoptimizer and inference engine for LLM tensor programs", "yirage"};
  app.set_version_flag("--version", fmt::format("yirage {}", yirage::kVersion));
  app.require_subcommand(1);
  yirage::tools::add_backends_command(app);
  yirage::tools::add_graph_command(app);
  yirage::tools::add_run_command(app);
  yirage::tools::add_suite_command(app);
  yirage::tools::add_optimize_command(app);
  yirage::tools::add_generate_command(app);
  yirage::tools::add_chat_command(app);
  yirage::tools::add_serve_command(app);
  yirage::tools::add_cache_command(app);
  yirage::tools::add_verify_command(app);
  yirage::tools::add_calibrate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  } catch (...) {
    print_error("unexpected failure with no message");
    return 1;
  }
  return 0;
}
