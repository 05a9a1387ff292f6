// `yirage optimize --ray ADDRESS`: the graph is tuned in a Ray task on the cluster, by the Python
// package's `python3 -m yirage.ray_cli tune` (yirage.ray.tune_graphs), run as a subprocess: the
// CLI embeds no Python, and Ray's client exists only in Python. The subprocess merges the winner's
// cache entry into our tuning cache; cmd_optimize.cpp then runs tuned_optimize as without --ray,
// which finds it as a cache hit and prints the usual report.
//
// The interpreter: $YIRAGE_RAY_PYTHON, else the python3 beside this executable (a virtual
// environment's bin/, where pip installs `yirage`), else python3 on PATH. In a build folder, whose
// python/ holds the package built with this executable (-DYIRAGE_PYTHON=ON), that folder goes
// first on PYTHONPATH.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/error.h"
#include "tools/commands.h"
#include "tune/tune.h"

extern char** environ;

namespace yirage::tools {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInstall = "pip install \"yirage[ray]\"";

fs::path executable_dir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path();
}

std::string python_interpreter(const fs::path& here) {
  if (const char* chosen = std::getenv("YIRAGE_RAY_PYTHON"); chosen && *chosen) return chosen;
  if (!here.empty()) {
    const fs::path beside = here / "python3";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "python3";
}

// The environment of the subprocess: ours, with a build folder's python/ first on PYTHONPATH.
std::vector<std::string> child_environment(const fs::path& here) {
  std::vector<std::string> env;
  const fs::path package = here / "python";
  const bool build_tree = !here.empty() && fs::exists(package / "yirage" / "__init__.py");
  std::string pythonpath = build_tree ? package.string() : "";
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) == 0) {
      if (!build_tree) return {};  // unchanged: the caller's environment as it is
      pythonpath += ":" + std::string(*e + 11);
    } else {
      env.emplace_back(*e);
    }
  }
  if (!build_tree) return {};
  env.push_back("PYTHONPATH=" + pythonpath);
  return env;
}

// Runs argv with stdout sent to stderr (stdout is the report's, --json's included); returns the
// exit status, or 127 when the program could not be started.
int run_python(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(),
                               env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return 127;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("optimize --ray: waitpid: {}", std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

void tune_on_ray(const std::string& address, const TunedOptimizeOptions& o) {
  const fs::path here = executable_dir();
  const std::string python = python_interpreter(here);
  const fs::path cache = o.cache.empty() ? tune::TuningCache::default_path() : fs::path(o.cache);
  // The subprocess writes its outcome here: {"node": ..., "pid": ...} or {"error": "one line"}.
  char result_template[] = "/tmp/yirage-ray-XXXXXX";
  const int fd = mkstemp(result_template);
  if (fd < 0) fail("optimize --ray: cannot create a temporary file: {}", std::strerror(errno));
  close(fd);
  const std::string result_path = result_template;
  std::vector<std::string> argv = {python,           "-m",
                                   "yirage.ray_cli", "tune",
                                   "--address",      address,
                                   "--backend",      o.backend,
                                   "--budget",       fmt::format("{}", o.search.budget_seconds),
                                   "--seed",         std::to_string(o.search.seed),
                                   "--cache",        cache.string(),
                                   "--result",       result_path};
  if (o.search.threads > 0)
    argv.insert(argv.end(), {"--threads", std::to_string(o.search.threads)});
  if (o.search.max_states > 0)
    argv.insert(argv.end(), {"--max-states", std::to_string(o.search.max_states)});
  if (o.top_k) argv.insert(argv.end(), {"--top-k", std::to_string(*o.top_k)});
  if (o.profile_all) argv.push_back("--profile-all");
  argv.push_back(o.file);
  const int status = run_python(argv, child_environment(here));
  std::ifstream in(result_path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(result_path);
  nlohmann::json result = nlohmann::json::parse(text.str(), nullptr, false);
  if (result.is_object() && result.contains("error"))
    fail("{}", result["error"].get<std::string>());  // "optimize --ray: ..."
  if (status == 127 && text.str().empty())
    fail(
        "optimize --ray: cannot run {} (Python 3 with the yirage package and Ray: {}, or set "
        "YIRAGE_RAY_PYTHON)",
        python, kInstall);
  if (status != 0 || !result.is_object())
    fail(
        "optimize --ray: `{} -m yirage.ray_cli` failed (exit {}); it needs the yirage Python "
        "package with Ray: {}",
        python, status, kInstall);
  fmt::print(stderr, "ray: tuned on node {} (pid {}), entry merged into {}\n",
             result.value("node", "?"), result.value("pid", 0), cache.string());
}

}  // namespace yirage::tools
