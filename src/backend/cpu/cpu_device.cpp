// Describes the host CPU. Linux only: every fact comes from /proc, sysfs or the scheduler, and a
// file that is missing (containers, other kernels) leaves its fact unknown instead of failing.
#include "backend/cpu/cpu_device.h"

#include <sched.h>
#include <sys/utsname.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/fingerprint.h"

namespace yirage::backend::cpu {
namespace {

// x86 and Arm flags that change which kernels can be generated; the rest of /proc/cpuinfo's
// list (bug workarounds, virtualisation features, ...) would only make fingerprints unstable.
// Arm's "asimddp" is the dot-product extension (dotprod).
constexpr std::string_view kRelevantIsa[] = {
    "sse4_2",   "avx",      "avx2",     "fma",         "f16c",        "avx512f",     "avx512bw",
    "avx512vl", "avx512dq", "avx512cd", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
    "amx_tile", "amx_bf16", "amx_int8", "asimd",       "fp16",        "asimdhp",     "bf16",
    "sve",      "sve2",     "i8mm",     "asimddp"};

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

bool has_flag(const CpuFacts& facts, std::string_view flag) {
  return std::find(facts.isa.begin(), facts.isa.end(), flag) != facts.isa.end();
}

std::vector<std::string> relevant_flags(std::string_view list) {
  std::vector<std::string> flags;
  std::istringstream words{std::string(list)};
  for (std::string word; words >> word;) {
    bool relevant =
        std::find(std::begin(kRelevantIsa), std::end(kRelevantIsa), word) != std::end(kRelevantIsa);
    if (relevant) flags.push_back(word);
  }
  std::sort(flags.begin(), flags.end());
  flags.erase(std::unique(flags.begin(), flags.end()), flags.end());
  return flags;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return int(std::thread::hardware_concurrency());  // 0 when unknown
}

void read_caches(CpuFacts& facts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator dir("/sys/devices/system/cpu/cpu0/cache", ec);
  if (ec) return;
  for (const fs::directory_entry& entry : dir) {
    if (!entry.path().filename().string().starts_with("index")) continue;
    std::string level(trim(read_file(entry.path() / "level")));
    std::string type(trim(read_file(entry.path() / "type")));
    std::optional<int64_t> size = parse_cache_size(trim(read_file(entry.path() / "size")));
    if (level == "1" && type == "Data") facts.l1d_bytes = size;
    if (level == "2" && type != "Instruction") facts.l2_bytes = size;
    if (level == "3" && type != "Instruction") facts.l3_bytes = size;
  }
}

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

void parse_cpuinfo(std::string_view text, CpuFacts& facts) {
  // The first processor's block is enough: Linux lists the same model and flags for each core
  // of the hybrid parts it supports.
  std::string model_name, implementer, part, hardware, flags;
  auto keep_first = [](std::string& field, std::string_view value) {
    if (field.empty()) field = std::string(value);
  };
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view key = trim(std::string_view(line).substr(0, colon));
    std::string_view value = trim(std::string_view(line).substr(colon + 1));
    if (key == "model name") keep_first(model_name, value);
    if (key == "CPU implementer") keep_first(implementer, value);
    if (key == "CPU part") keep_first(part, value);
    if (key == "Hardware") keep_first(hardware, value);
    if (key == "flags" || key == "Features") keep_first(flags, value);
  }
  if (!model_name.empty())
    facts.model = model_name;
  else if (!implementer.empty() && !part.empty())
    facts.model = fmt::format("CPU implementer {} part {}", implementer, part);
  else if (!hardware.empty())
    facts.model = hardware;
  else
    facts.model = facts.arch;
  facts.isa = relevant_flags(flags);
}

std::optional<int64_t> parse_cache_size(std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || value < 0) return std::nullopt;
  std::string_view unit(end, size_t(text.data() + text.size() - end));
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  return std::nullopt;
}

std::optional<int> vector_bits(const CpuFacts& facts) {
  if (has_flag(facts, "avx512f")) return 512;
  if (has_flag(facts, "avx")) return 256;
  // SSE2 and NEON are part of the base x86-64 and AArch64 ISAs. SVE may be wider than 128 bits,
  // but its length is not in the flags, and 128 is what it promises.
  if (has_flag(facts, "sse4_2") || has_flag(facts, "asimd") || facts.arch == "x86_64" ||
      facts.arch == "aarch64")
    return 128;
  return std::nullopt;
}

// The search space of backend.h: a block is a task on one core, whose loop-body tiles should stay
// in half of its L2 (the other half holds the streamed operands) and all of its tiles in L2. The
// rates are rough per-core figures, used only to rank candidates until profiles exist: one FMA
// pipe pair at 2.5 GHz on the vector width, and 10 GB/s of memory bandwidth per core.
namespace {
nlohmann::json search_space(const CpuFacts& facts) {
  const int64_t cores = std::max<int64_t>(facts.cores, 1);
  const int64_t l2 = facts.l2_bytes.value_or(int64_t(1) << 20);
  const double lanes = double(vector_bits(facts).value_or(128)) / 32.0;
  return {
      {"max_tile_bytes_in_loop", l2 / 2},
      {"max_tile_bytes_total", l2},
      {"max_grid_blocks", cores * 4096},
      {"parallel_units", cores},
      {"bytes_per_second", 10e9 * double(cores)},
      {"flops_per_second", 2.5e9 * 2 * 2 * lanes * double(cores)},
      {"launch_seconds", 2e-6},
  };
}
}  // namespace

DeviceDescription describe_cpu(const CpuFacts& facts) {
  DeviceDescription device;
  device.name = facts.model;
  device.fingerprint = fingerprint_of(
      {facts.model, fmt::format("{}", fmt::join(facts.isa, ",")), std::to_string(facts.cores)});
  device.capabilities = {
      {"model", facts.model},
      {"arch", facts.arch},
      {"isa", facts.isa},
      {"cores", facts.cores > 0 ? nlohmann::json(facts.cores) : nlohmann::json(nullptr)},
      {"vector_bits", or_null(vector_bits(facts))},
      {"l1d_bytes", or_null(facts.l1d_bytes)},
      {"l2_bytes", or_null(facts.l2_bytes)},
      {"l3_bytes", or_null(facts.l3_bytes)},
      {"search", search_space(facts)},
  };
  return device;
}

CpuFacts read_host_cpu() {
  CpuFacts facts;
  utsname names{};
  facts.arch = uname(&names) == 0 ? names.machine : "unknown";
  parse_cpuinfo(read_file("/proc/cpuinfo"), facts);
  facts.cores = usable_cores();
  read_caches(facts);
  return facts;
}

}  // namespace yirage::backend::cpu
