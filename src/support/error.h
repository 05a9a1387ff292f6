// Error reporting shared by every stage.
//
// YiRage reports bad input with one line that names what went wrong and where: the op and its
// operand shapes, the JSON path, or the file and byte offset. Every stage throws `yirage::Error`
// for such problems so that the CLI and the Python layer can print the message and exit cleanly.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace yirage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace yirage
