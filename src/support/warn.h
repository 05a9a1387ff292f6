// Warnings: problems YiRage recovered from (a corrupt tuning cache moved aside, a cached kernel
// that no longer loads), reported as one line on stderr so that the user learns of them while
// nothing stops.
#pragma once

#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace yirage {

inline void warn(const std::string& line) {
  fmt::print(stderr, "yirage: warning: {}\n", line);
}

}  // namespace yirage
