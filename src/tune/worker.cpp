// Candidate isolation: each candidate's check and profile run in a worker process that the caller
// can lose.
//
// Why a process started by posix_spawn + exec of the caller's own executable, and not fork():
// the caller has live threads when it tunes (the cpu backend's OpenMP team and OpenBLAS's
// workers from earlier launches, the compile threads, a server's or Python's own), and a forked
// child may then only do async-signal-safe work until it execs. Compiling, dlopen and running
// kernels are far from that: libgomp's team does not exist in a forked child and its next
// parallel region hangs, and a mutex another thread held at the fork stays locked forever. CUDA
// is stricter still: a child forked after cuInit cannot use CUDA at all. A fresh process creates
// its own backend, threads and device context, and a device fault (an illegal address poisons a
// CUDA context for good) dies with it. A fork-server forked early, before any thread, would
// avoid the exec, but a library cannot choose when its caller's first thread starts.
//
// Protocol: the caller writes the request (graphs, backend, options, the candidates to check and
// those already checked that wait to be profiled) to a file and starts
// `<command...> <request file>` with fd 3 a pipe back. The worker checks, then profiles, writing
// one JSON line per event: {"start": i} before each candidate's step, {"reference": i} when
// candidate i became the graph the others are checked against, {"checked": i, ...} after a
// check, {"profiling": [i, ...]} as the profiles begin, {"profiled": i, ...} after one, and
// {"error": why} when it cannot work at all. The caller knows from the last "start" which
// candidate was running when a worker died or hung.
#include "tune/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/error.h"
#include "support/source_hash.h"
#include "support/version.h"

extern char** environ;

namespace yirage::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string engine_version() {
  return fmt::format("{}+{}", kVersion, kSourceHash);
}

std::mutex& command_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& registered_command() {
  static std::vector<std::string> command;
  return command;
}

// ---- the request and the events, as JSON ----

json profile_options_json(const ProfileOptions& o) {
  return {{"warmup", o.warmup},
          {"min_repetitions", o.min_repetitions},
          {"max_repetitions", o.max_repetitions},
          {"min_seconds", o.min_seconds},
          {"rotate_inputs", o.rotate_inputs},
          {"max_input_sets", o.max_input_sets},
          {"max_rotation_bytes", o.max_rotation_bytes},
          {"seed", o.seed},
          {"launches_per_repetition", o.launches_per_repetition}};
}

ProfileOptions profile_options_from(const json& j) {
  ProfileOptions o;
  o.warmup = j.at("warmup").get<int>();
  o.min_repetitions = j.at("min_repetitions").get<int>();
  o.max_repetitions = j.at("max_repetitions").get<int>();
  o.min_seconds = j.at("min_seconds").get<double>();
  o.rotate_inputs = j.at("rotate_inputs").get<bool>();
  o.max_input_sets = j.at("max_input_sets").get<int>();
  o.max_rotation_bytes = j.at("max_rotation_bytes").get<int64_t>();
  o.seed = j.at("seed").get<uint64_t>();
  o.launches_per_repetition = j.at("launches_per_repetition").get<int>();
  return o;
}

json profile_json(const Profile& p) {
  return {{"median", p.median_seconds}, {"min", p.min_seconds},
          {"mean", p.mean_seconds},     {"repetitions", p.repetitions},
          {"input_sets", p.input_sets}, {"launches", p.launches_per_repetition}};
}

Profile profile_from(const json& p) {
  return {p.at("median").get<double>(),  p.at("min").get<double>(),
          p.at("mean").get<double>(),    p.at("repetitions").get<int>(),
          p.at("input_sets").get<int>(), p.at("launches").get<int>()};
}

// ---- the worker's side ----

void emit(int fd, const json& event) {
  const std::string line = event.dump() + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(3);  // the caller is gone: nobody to report to
    done += size_t(n);
  }
}

ir::KernelGraph candidate_graph(const json& request, size_t i) {
  return ir::parse_kernel_graph(request.at("candidates").at(std::to_string(i)).dump());
}

// Checks the candidates of request["check"]; returns those that passed.
std::vector<size_t> serve_checks(const json& request, Evaluator& evaluator, int out) {
  std::vector<size_t> passed;
  const json& reference = request.at("reference");
  for (const json& task : request.at("check")) {
    const size_t i = task.get<size_t>();
    emit(out, {{"start", i}});
    Evaluation e;
    try {
      if (!evaluator.has_reference() && reference.is_number())
        evaluator.set_reference(candidate_graph(request, reference.get<size_t>()));
      const bool had_reference = evaluator.has_reference();
      e = evaluator.check(candidate_graph(request, i));
      if (!had_reference && evaluator.has_reference()) emit(out, {{"reference", i}});
    } catch (const std::exception& ex) {
      e = {"run_error", ex.what(), std::nullopt};
    }
    emit(out, {{"checked", i}, {"status", e.status}, {"message", e.message}});
    if (e.status == "ok") passed.push_back(i);
  }
  return passed;
}

void serve(const json& request, int out) {
  if (request.at("engine").get<std::string>() != engine_version())
    fail("the worker is another build ({}) than the caller ({})", engine_version(),
         request.at("engine").get<std::string>());
  const std::string name = request.at("backend").get<std::string>();
  std::unique_ptr<backend::Backend> backend = backend::create_backend(
      name,
      {.threads = request.at("threads").get<int>(), .device = request.at("device").get<int>()});
  if (backend->codegen_settings() != request.at("codegen").get<std::string>())
    fail("the worker's backend '{}' has other settings ({}) than the caller's ({})", name,
         backend->codegen_settings(), request.at("codegen").get<std::string>());
  Evaluator evaluator(*backend, ir::parse_kernel_graph(request.at("original").dump()),
                      profile_options_from(request.at("profile")));
  std::vector<size_t> to_profile = request.at("profile_only").get<std::vector<size_t>>();
  for (size_t i : serve_checks(request, evaluator, out)) to_profile.push_back(i);
  emit(out, {{"profiling", to_profile}});
  for (size_t i : to_profile) {
    emit(out, {{"start", i}});
    try {
      const ir::KernelGraph graph = candidate_graph(request, i);
      std::unique_ptr<backend::Module> module = backend->compile(graph);
      emit(out, {{"profiled", i}, {"profile", profile_json(evaluator.profile(graph, *module))}});
    } catch (const std::exception& ex) {
      emit(out, {{"profiled", i}, {"status", "run_error"}, {"message", ex.what()}});
    }
  }
}

int worker_main(const char* request_path) {
  constexpr int kOut = 3;  // the pipe the caller reads (see the protocol above)
  try {
    std::ifstream in(request_path);
    if (!in) fail("cannot read the request {}", request_path);
    serve(json::parse(in), kOut);
    return 0;
  } catch (const std::exception& e) {
    emit(kOut, {{"error", e.what()}});
    return 2;
  }
}

// ---- the caller's side ----

// "killed by SIGSEGV (Segmentation fault)", "exited with status 2"
std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return fmt::format("killed by SIG{} ({})", abbrev ? abbrev : std::to_string(sig),
                       strsignal(sig));
  }
  return fmt::format("exited with status {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

// A running worker: killed with its process group (a compiler it started goes too) and reaped
// when it goes out of scope.
class Worker {
 public:
  Worker(const std::vector<std::string>& command, const fs::path& request) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) fail("tuning worker: pipe: {}", std::strerror(errno));
    read_fd_ = fds[0];
    // Above 3, so that the dup2 onto 3 below is never a no-op that keeps O_CLOEXEC.
    const int write_fd = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
    ::close(fds[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);  // stray prints must not reach our stdout
    posix_spawn_file_actions_adddup2(&actions, write_fd, 3);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);  // a crash must kill it, whatever we ignore
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    std::vector<std::string> argv = command;
    argv.push_back(request.string());
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int err = posix_spawn(&pid_, args[0], &actions, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(write_fd);
    if (err != 0) {
      ::close(read_fd_);
      fail("tuning worker: cannot start '{}': {}", argv[0], std::strerror(err));
    }
  }
  ~Worker() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      wait();
    }
    ::close(read_fd_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The next line, or nullopt at end of file (the worker is gone) or when `deadline` passes.
  std::optional<std::string> next_line(Clock::time_point deadline, bool& timed_out) {
    timed_out = false;
    while (true) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        return std::nullopt;
      }
      pollfd p{read_fd_, POLLIN, 0};
      const int ready = poll(&p, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;  // the deadline check above ends it
      char chunk[4096];
      const ssize_t n = ::read(read_fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, size_t(n));
    }
  }

  // Kills the worker (if it still runs) and returns how it ended.
  std::string end() {
    kill(-pid_, SIGKILL);
    return describe_exit(wait());
  }
  // Waits for the worker, which has closed its end, and returns how it ended.
  std::string finish() { return describe_exit(wait()); }

 private:
  int wait() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::string buffer_;
};

// A private folder for request files, removed with what it holds.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "yirage-tune-XXXXXX").string();
    if (!mkdtemp(pattern.data())) fail("tuning worker: mkdtemp: {}", std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

std::optional<int> serve_as_worker_if_asked(int argc, char** argv) {
  if (argc == 3 && argv[1] == kWorkerFlag) return worker_main(argv[2]);
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) set_worker_command({self.string(), std::string(kWorkerFlag)});
  return std::nullopt;
}

void set_worker_command(std::vector<std::string> argv) {
  std::lock_guard lock(command_mutex());
  registered_command() = std::move(argv);
}

std::vector<std::string> worker_command() {
  std::lock_guard lock(command_mutex());
  return registered_command();
}

namespace {

// What the caller knows of the work so far, across the workers it took.
struct Progress {
  std::vector<size_t> to_check;    // in order
  std::vector<size_t> to_profile;  // passed the check, not yet timed
  std::optional<size_t> reference;
  std::map<size_t, Evaluation> results;
  bool profiling_reported = false;
};

// Applies one event of a worker; returns the candidate it starts, if it starts one.
std::optional<size_t> apply(const json& event, Progress& p,
                            const std::function<void(size_t)>& on_profiling) {
  if (event.contains("start")) return event["start"].get<size_t>();
  if (event.contains("reference")) {
    p.reference = event["reference"].get<size_t>();
  } else if (event.contains("checked")) {
    const size_t i = event["checked"].get<size_t>();
    p.results[i] = {event.at("status").get<std::string>(), event.at("message").get<std::string>(),
                    std::nullopt};
    std::erase(p.to_check, i);
    if (p.results[i].status == "ok") p.to_profile.push_back(i);
  } else if (event.contains("profiling")) {
    if (!p.profiling_reported && on_profiling) on_profiling(p.to_profile.size());
    p.profiling_reported = true;
  } else if (event.contains("profiled")) {
    const size_t i = event["profiled"].get<size_t>();
    if (event.contains("profile"))
      p.results[i].profile = profile_from(event["profile"]);
    else
      p.results[i] = {event.at("status").get<std::string>(), event.at("message").get<std::string>(),
                      std::nullopt};
    std::erase(p.to_profile, i);
  }
  return std::nullopt;
}

}  // namespace

std::map<size_t, Evaluation> evaluate_in_workers(const std::vector<std::string>& command,
                                                 backend::Backend& backend,
                                                 const ir::KernelGraph& original,
                                                 const std::vector<Candidate>& candidates,
                                                 const std::vector<size_t>& indices,
                                                 const OptimizeOptions& options,
                                                 const std::function<void(size_t)>& on_profiling) {
  json request = {{"engine", engine_version()},
                  {"backend", std::string(backend.name())},
                  {"threads", backend.options().threads},
                  {"device", backend.options().device},
                  {"codegen", backend.codegen_settings()},
                  {"original", ir::to_json(original)},
                  {"profile", profile_options_json(options.profile)},
                  {"candidates", json::object()}};
  for (size_t i : indices)
    request["candidates"][std::to_string(i)] = ir::to_json(candidates[i].graph);
  const auto limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.candidate_seconds_limit));
  const TempDir dir;
  Progress p;
  p.to_check = indices;
  for (int round = 0; !p.to_check.empty() || !p.to_profile.empty(); ++round) {
    request["check"] = p.to_check;
    request["profile_only"] = p.to_profile;
    request["reference"] = p.reference ? json(*p.reference) : json(nullptr);
    const fs::path file = dir.path() / fmt::format("request-{}.json", round);
    std::ofstream(file) << request.dump();
    Worker worker(command, file);
    const size_t before = p.to_check.size() + p.to_profile.size();
    std::optional<size_t> running;
    std::string error;
    bool timed_out = false;
    auto deadline = Clock::now() + limit;
    while (std::optional<std::string> line = worker.next_line(deadline, timed_out)) {
      const json event = json::parse(*line, nullptr, false);
      if (!event.is_object()) continue;
      if (event.contains("error")) error = event["error"].get<std::string>();
      if (std::optional<size_t> started = apply(event, p, on_profiling)) {
        running = started;
        deadline = Clock::now() + limit;
      } else if (event.contains("checked") || event.contains("profiled")) {
        running.reset();
      }
    }
    const std::string how = timed_out ? worker.end() : worker.finish();
    const size_t left = p.to_check.size() + p.to_profile.size();
    if (!running) {
      // Gone between candidates: nothing to blame on one of them. A worker that finished none
      // would fail again, so the rest fail with its reason; one that did gets a successor.
      if (left == 0) break;
      if (left < before) continue;
      const std::string why = !error.empty() ? error
                              : timed_out
                                  ? fmt::format("it did not start within {:g} s and was killed",
                                                options.candidate_seconds_limit)
                                  : how;
      for (size_t i : p.to_check)
        p.results[i] = {"run_error", fmt::format("tuning worker failed: {}", why), std::nullopt};
      for (size_t i : p.to_profile)
        p.results[i] = {"run_error", fmt::format("tuning worker failed: {}", why), std::nullopt};
      break;
    }
    const char* step =
        std::find(p.to_profile.begin(), p.to_profile.end(), *running) != p.to_profile.end()
            ? "profiling"
            : "checking";
    p.results[*running] =
        timed_out
            ? Evaluation{"timed_out",
                         fmt::format("timed out after {:g} s {} it in a worker process, "
                                     "which was killed",
                                     options.candidate_seconds_limit, step),
                         std::nullopt}
            : Evaluation{"crashed", fmt::format("its worker process was {} while {} it", how, step),
                         std::nullopt};
    std::erase(p.to_check, *running);
    std::erase(p.to_profile, *running);
  }
  return p.results;
}

}  // namespace yirage::tune
