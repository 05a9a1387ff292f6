// Where tests find the SmolLM2 GGUF that scripts/fetch-model.sh downloads.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace yirage::llm::testing {

inline constexpr const char* kModelSkipReason =
    "SmolLM2-135M-Instruct.Q4_1.gguf not found: run scripts/fetch-model.sh or set "
    "YIRAGE_MODEL_PATH (YIRAGE_REQUIRE_MODEL=1 turns this skip into a failure)";

// $YIRAGE_MODEL_PATH, else the fetch script's cache location. Nullopt when the file is absent;
// throws instead when YIRAGE_REQUIRE_MODEL=1, so that CI cannot skip silently.
inline std::optional<std::string> smollm2_path() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? "" : v;
  };
  std::string path = env("YIRAGE_MODEL_PATH");
  if (path.empty()) {
    std::string dir = env("YIRAGE_MODEL_DIR");
    if (dir.empty()) {
      const std::string cache = env("XDG_CACHE_HOME");
      dir = (cache.empty() ? env("HOME") + "/.cache" : cache) + "/yirage/models";
    }
    path = dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  if (std::filesystem::is_regular_file(path)) return path;
  if (env("YIRAGE_REQUIRE_MODEL") == "1") {
    throw std::runtime_error("YIRAGE_REQUIRE_MODEL=1 but the model is missing at " + path);
  }
  return std::nullopt;
}

}  // namespace yirage::llm::testing
