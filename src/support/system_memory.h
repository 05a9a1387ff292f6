// The host's memory, as the kernel and the process's cgroup state it: what a graph or a model is
// checked against before it is allowed to allocate, so that a request too large for the machine
// is an error with the numbers rather than the OOM killer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace yirage {

namespace system_memory_detail {

// "<Key>:   <n> kB" of /proc/meminfo, in bytes.
inline std::optional<uint64_t> meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

// A number in a cgroup v2 file ("max" and missing files: no limit).
inline std::optional<uint64_t> cgroup_value(const char* file) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + file);
  uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

}  // namespace system_memory_detail

// Physical memory this process may use: MemTotal, or the cgroup's memory.max when lower.
inline std::optional<uint64_t> physical_memory_bytes() {
  std::optional<uint64_t> total = system_memory_detail::meminfo("MemTotal");
  if (std::optional<uint64_t> limit = system_memory_detail::cgroup_value("memory.max"))
    total = total ? std::min(*total, *limit) : *limit;
  return total;
}

// Memory available for new allocations without swapping: MemAvailable, or what the cgroup's
// memory.max leaves above memory.current when that is less.
inline std::optional<uint64_t> available_memory_bytes() {
  std::optional<uint64_t> available = system_memory_detail::meminfo("MemAvailable");
  const std::optional<uint64_t> limit = system_memory_detail::cgroup_value("memory.max");
  const std::optional<uint64_t> used = system_memory_detail::cgroup_value("memory.current");
  if (limit && used) {
    const uint64_t left = *limit > *used ? *limit - *used : 0;
    available = available ? std::min(*available, left) : left;
  }
  return available;
}

}  // namespace yirage
