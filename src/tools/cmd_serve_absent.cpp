// `yirage serve` in a build configured with -DYIRAGE_SERVER=OFF: the command still exists, so that
// a user who asks for it learns why it cannot run instead of reading "unknown command".
#include "support/error.h"
#include "tools/commands.h"

namespace yirage::tools {

void add_serve_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over HTTP (not in this build)");
  cmd->allow_extras();
  cmd->callback([] {
    fail(
        "serve: this build has no HTTP server (configured with -DYIRAGE_SERVER=OFF; "
        "install libcpp-httplib-dev and reconfigure with -DYIRAGE_SERVER=ON)");
  });
}

}  // namespace yirage::tools
