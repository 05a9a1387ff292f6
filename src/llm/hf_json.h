// Internal to the llm module: reading the JSON of Hugging Face model files (config.json,
// tokenizer.json, tokenizer_config.json, the safetensors header) with one-line errors that name
// the file and the byte offset or key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace yirage::llm::hf {

using nlohmann::json;

// `text` for a one-line message: control characters escaped as \xNN, cut short after `max`
// bytes. Names and keys come from the file, and may hold anything.
std::string printable(std::string_view text, size_t max = 80);
// A JSON value as a message shows it: scalars printable(), containers by kind.
std::string excerpt(const json& v);

// The path of file `name` in model folder `dir`.
std::string path_in(const std::string& dir, std::string_view name);
// The whole of `path`; fails naming it when it cannot be read.
std::string read_text_file(const std::string& path);
// Parses `text`, which starts at byte `base` of `source`; errors name `source` and the byte
// offset. `callback` sees every parse event, as nlohmann's parser passes them.
json parse_json(std::string_view text, const std::string& source, uint64_t base = 0,
                const json::parser_callback_t& callback = nullptr);
// Reads and parses `path`; errors name the path and, for a syntax error, the byte offset.
json read_json_file(const std::string& path);

// A JSON object read from `file`; `path` ("", "model", "added_tokens[3]") prefixes the keys in
// messages. Getters fail naming the file and the key; a key whose value is null counts as absent,
// as Hugging Face's loaders treat it.
class JsonObject {
 public:
  JsonObject(const json& value, std::string file, std::string path = "");

  const json* find(std::string_view key) const;
  const json& at(std::string_view key) const;  // fails when absent
  std::string key_path(std::string_view key) const;
  [[noreturn]] void fail_key(std::string_view key, std::string_view message) const;

  // An integer in [min, max].
  int64_t integer(std::string_view key, int64_t min, int64_t max) const;
  std::optional<int64_t> optional_integer(std::string_view key, int64_t min, int64_t max) const;
  double number_or(std::string_view key, double fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  JsonObject object(std::string_view key) const;  // fails when absent or not an object
  const std::string& file() const { return file_; }
  const json& value() const { return value_; }

 private:
  int64_t checked_integer(std::string_view key, const json& v, int64_t min, int64_t max) const;

  const json& value_;
  std::string file_;
  std::string path_;
};

}  // namespace yirage::llm::hf
