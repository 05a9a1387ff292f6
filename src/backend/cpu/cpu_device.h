// What the host CPU is: read from /proc/cpuinfo, sysfs and the scheduler. Internal to backend/.
//
// Both the cpu backend and the reference backend describe the host with this. The readers of
// each file are split out so that tests can feed them text from machines they do not run on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace yirage::backend::cpu {

struct CpuFacts {
  std::string arch;              // uname's machine: "x86_64", "aarch64", ...
  std::string model;             // "AMD EPYC 9B14", or what can be found
  std::vector<std::string> isa;  // the flags code generation cares about, sorted
  int cores = 0;                 // CPUs this process may run on
  std::optional<int64_t> l1d_bytes;
  std::optional<int64_t> l2_bytes;
  std::optional<int64_t> l3_bytes;
};

// Fills `model` and `isa` from /proc/cpuinfo text; `arch` must be set already, and is the model
// of last resort.
void parse_cpuinfo(std::string_view text, CpuFacts& facts);

// A sysfs cache "size" entry: "32K", "1024K", "32M" or a plain byte count.
std::optional<int64_t> parse_cache_size(std::string_view text);

// The widest SIMD register the ISA flags promise, in bits.
std::optional<int> vector_bits(const CpuFacts& facts);

// Capabilities (keys "model", "isa", "cores", "vector_bits", "l1d_bytes", "l2_bytes",
// "l3_bytes", "arch"; unknown sizes are null) and a fingerprint of model, ISA flags and cores.
DeviceDescription describe_cpu(const CpuFacts& facts);

// Reads this machine's facts; files that are missing leave their fields unknown.
CpuFacts read_host_cpu();

}  // namespace yirage::backend::cpu
