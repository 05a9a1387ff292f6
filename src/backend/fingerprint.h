// Device fingerprints: a 64-bit FNV-1a hash printed as 16 hex digits. Internal to backend/.
//
// The tuning cache keys results by fingerprint, so the hash must not change between runs or
// builds; std::hash gives no such promise, hence this small fixed function.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace yirage::backend {

// Hashes the fields with a separator between them, so ("ab", "c") and ("a", "bc") differ.
inline std::string fingerprint_of(std::initializer_list<std::string_view> fields) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](unsigned char byte) {
    h ^= byte;
    h *= 0x100000001b3ull;
  };
  for (std::string_view field : fields) {
    for (char c : field) mix(static_cast<unsigned char>(c));
    mix(0x1f);
  }
  return fmt::format("{:016x}", h);
}

}  // namespace yirage::backend
