// The JIT: spawns the system compiler with a timeout and keeps what it builds.
#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/fingerprint.h"
#include "support/error.h"
#include "support/warn.h"

extern char** environ;

namespace yirage::backend::cpu {
namespace {

namespace fs = std::filesystem;

std::string env_or(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

bool has_isa(const nlohmann::json& isa, std::string_view flag) {
  if (!isa.is_array()) return false;
  return std::any_of(isa.begin(), isa.end(), [&](const nlohmann::json& f) {
    return f.is_string() && f.get<std::string>() == flag;
  });
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ProcessResult {
  int status = -1;  // exit code; -1 when killed or not started
  bool timed_out = false;
};

// Runs argv with stdout and stderr going to `log`, killing it after `timeout_seconds`.
ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& log,
                          double timeout_seconds) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ProcessResult result;
  if (err != 0) {
    std::ofstream(log) << fmt::format("cannot run '{}': {}\n", argv[0], std::strerror(err));
    return result;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int wstatus = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return result;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      result.timed_out = true;
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(wstatus)) result.status = WEXITSTATUS(wstatus);
  return result;
}

// The compiler's first --version line, once per compiler.
std::string compiler_version(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> versions;
  std::lock_guard lock(mutex);
  if (auto it = versions.find(compiler); it != versions.end()) return it->second;
  const fs::path log = fs::temp_directory_path() /
                       fmt::format("yirage-cxx-version-{}-{}.txt", getpid(), versions.size());
  ProcessResult r = run_process({compiler, "--version"}, log, 30);
  std::string text = read_text(log);
  std::error_code ec;
  fs::remove(log, ec);
  if (r.status != 0)
    fail("cpu backend: the C++ compiler '{}' does not run ({}); install g++ or set YIRAGE_CXX",
         compiler, text.empty() ? "no output" : text.substr(0, text.find('\n')));
  std::string first = text.substr(0, text.find('\n'));
  versions[compiler] = first;
  return first;
}

// A compiler message as one line: its first few lines joined.
std::string summarize_log(const std::string& log) {
  std::istringstream lines(log);
  std::vector<std::string> kept;
  for (std::string line; std::getline(lines, line) && kept.size() < 4;)
    if (!line.empty()) kept.push_back(line);
  return fmt::format("{}", fmt::join(kept, " | "));
}

}  // namespace

Toolchain make_toolchain(const DeviceDescription& device) {
  Toolchain tc;
  tc.compiler = env_or("YIRAGE_CXX", "c++");
  tc.version = compiler_version(tc.compiler);
  const nlohmann::json& caps = device.capabilities;
  const nlohmann::json isa = caps.value("isa", nlohmann::json::array());
  const std::string arch = caps.value("arch", std::string());
  tc.flags = {"-std=c++17",         "-O3",      "-shared", "-fPIC", "-fopenmp", "-fno-math-errno",
              "-ffp-contract=fast", "-fno-plt", "-w"};
  if (arch == "x86_64" && has_isa(isa, "avx512f") && has_isa(isa, "avx512bw") &&
      has_isa(isa, "avx512vl") && has_isa(isa, "avx512dq")) {
    tc.flags.insert(tc.flags.end(), {"-march=x86-64-v4", "-mtune=generic"});
    // vpdpbusd for the u8 × s8 block dots of a quant_matmul.
    if (has_isa(isa, "avx512_vnni")) tc.flags.push_back("-mavx512vnni");
    tc.vector_bytes = 64;
    tc.isa_summary = "avx512";
  } else if (arch == "x86_64" && has_isa(isa, "avx2") && has_isa(isa, "fma")) {
    tc.flags.insert(tc.flags.end(), {"-march=x86-64-v3", "-mtune=generic"});
    if (!has_isa(isa, "f16c")) tc.flags.push_back("-mno-f16c");
    tc.vector_bytes = 32;
    tc.isa_summary = "avx2";
  } else if (arch == "aarch64") {
    tc.flags.push_back(has_isa(isa, "fp16") ? "-march=armv8.2-a+fp16" : "-march=armv8-a");
    tc.vector_bytes = 16;
    tc.isa_summary = "neon";
  } else {
    tc.vector_bytes = 16;  // generic vectors: SIMD where the base ISA has it, else scalar code
    tc.isa_summary = "generic";
  }
  tc.flags.push_back(fmt::format("-DYR_VBYTES={}", tc.vector_bytes));
  return tc;
}

fs::path kernel_cache_dir() {
  if (const char* dir = std::getenv("YIRAGE_CACHE_DIR"); dir && *dir)
    return fs::path(dir) / "kernels";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "yirage" / "kernels";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "yirage" / "kernels";
  return fs::temp_directory_path() / "yirage-cache" / "kernels";
}

namespace {

// Throws unless `path` is a 64-bit ELF file that holds every byte its program headers load: the
// dynamic loader maps segments without checking, and touching a page past the end of a
// truncated object raises SIGBUS in the caller instead of an error.
void check_elf_extent(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr header{};
  const auto size = fs::file_size(path);
  if (!in.read(reinterpret_cast<char*>(&header), sizeof header) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64)
    fail("cpu backend: cannot load '{}': not a 64-bit ELF object", path.string());
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(std::streamoff(header.e_phoff + uint64_t(i) * header.e_phentsize));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph))
      fail("cpu backend: cannot load '{}': its program headers end past its {} bytes",
           path.string(), size);
    if (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size)
      fail("cpu backend: cannot load '{}': a segment ends at byte {}, past its {} bytes",
           path.string(), ph.p_offset + ph.p_filesz, size);
  }
}

}  // namespace

SharedObject::SharedObject(const fs::path& path) : path_(path) {
  check_elf_extent(path);
  // RTLD_NODELETE: a module pulls in the OpenMP runtime, whose worker threads outlive the
  // module; unmapping the last module that holds the runtime would pull the code out from under
  // those threads.
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle_) {
    const char* why = dlerror();
    fail("cpu backend: cannot load '{}': {}", path.string(), why ? why : "unknown error");
  }
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
}

void* SharedObject::symbol(const char* name) const {
  void* address = dlsym(handle_, name);
  if (!address) fail("cpu backend: '{}' has no symbol '{}'", path_.string(), name);
  return address;
}

CompiledObject compile_and_load(const std::string& source, const Toolchain& tc,
                                double timeout_seconds) {
  const std::string flags = fmt::format("{}", fmt::join(tc.flags, " "));
  // Two differently seeded 64-bit hashes make accidental collisions negligible.
  const std::string key = fingerprint_of({source, tc.compiler, tc.version, flags}) +
                          fingerprint_of({"yirage-cpu-object", flags, tc.version, source});
  const fs::path dir = kernel_cache_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cpu backend: cannot create the kernel cache '{}': {}", dir.string(), ec.message());
  const fs::path object = dir / (key + ".so");

  CompiledObject result;
  if (fs::exists(object)) {
    try {
      result.cache_hit = true;
      result.object = std::make_shared<SharedObject>(object);
      return result;
    } catch (const Error& e) {
      // A damaged object (truncated by a full disk, overwritten) is never trusted: build it
      // again. The rename below replaces it atomically for every process.
      warn(fmt::format("{}; compiling it again", e.what()));
      result.cache_hit = false;
    }
  }

  static std::atomic<uint64_t> counter{0};
  const std::string unique = fmt::format("{}.{}.{}", key, getpid(), counter++);
  const fs::path src = dir / (unique + ".cpp");
  const fs::path tmp = dir / (unique + ".so.tmp");
  const fs::path log = dir / (key + ".log");
  {
    std::ofstream out(src);
    out << source;
    if (!out) fail("cpu backend: cannot write '{}'", src.string());
  }
  std::vector<std::string> argv{tc.compiler};
  argv.insert(argv.end(), tc.flags.begin(), tc.flags.end());
  argv.insert(argv.end(), {"-o", tmp.string(), src.string()});
  const auto start = std::chrono::steady_clock::now();
  const fs::path unique_log = dir / (unique + ".log");
  ProcessResult r = run_process(argv, unique_log, timeout_seconds);
  result.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.timed_out || r.status != 0) {
    fs::rename(unique_log, log, ec);
    fs::remove(tmp, ec);
    // The source stays next to the log, so that the failure can be reproduced.
    fs::rename(src, dir / (key + ".cpp"), ec);
    if (r.timed_out)
      fail(
          "cpu backend: compiling the generated source timed out after {:.0f} s and was killed "
          "(log {})",
          timeout_seconds, log.string());
    fail("cpu backend: the compiler rejected the generated source: {} (full log {})",
         summarize_log(read_text(log)), log.string());
  }
  fs::remove(unique_log, ec);
  fs::rename(src, dir / (key + ".cpp"), ec);
  fs::rename(tmp, object, ec);  // atomic: a racing process renames an identical file
  if (ec)
    fail("cpu backend: cannot move the compiled object into '{}': {}", object.string(),
         ec.message());
  result.object = std::make_shared<SharedObject>(object);
  return result;
}

}  // namespace yirage::backend::cpu
