#include "llm/hf_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/error.h"

namespace yirage::llm::hf {

std::string printable(std::string_view text, size_t max) {
  size_t keep = std::min(text.size(), max);
  // Never cut inside a UTF-8 sequence: back up over continuation bytes.
  while (keep < text.size() && keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80)
    --keep;
  std::string out;
  for (const char c : text.substr(0, keep)) {
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 || u == 0x7F ? fmt::format("\\x{:02X}", u) : std::string(1, c);
  }
  if (keep < text.size()) out += "...";
  return out;
}

std::string excerpt(const json& v) {
  if (!v.is_primitive()) return std::string("a JSON ") + v.type_name();
  return printable(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

namespace {

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line L, column
// C:" prefix (the caller reports the byte offset instead) and without the "last read" excerpt,
// which may hold raw bytes of a malformed file.
std::string describe(const json::exception& e) {
  std::string_view what = e.what();
  if (const size_t bracket = what.find("] "); what.starts_with("[") && bracket != what.npos) {
    what.remove_prefix(bracket + 2);
  }
  if (what.starts_with("parse error")) {
    if (const size_t colon = what.find(": "); colon != what.npos) what.remove_prefix(colon + 2);
  }
  return printable(what.substr(0, what.find("; last read")), 240);
}

}  // namespace

std::string path_in(const std::string& dir, std::string_view name) {
  return (std::filesystem::path(dir) / name).string();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: read failed", path);
  return text.str();
}

json parse_json(std::string_view text, const std::string& source, uint64_t base,
                const json::parser_callback_t& callback) {
  try {
    return json::parse(text, callback);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and may point one past the end of the text.
    const uint64_t at = std::min<uint64_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    fail("{}: offset {}: not valid JSON: {}", source, base + at, describe(e));
  } catch (const json::exception& e) {
    // Other failures (a number too large for a double) carry no position.
    fail("{}: offset {}: not valid JSON: {}", source, base, describe(e));
  }
}

json read_json_file(const std::string& path) {
  return parse_json(read_text_file(path), path);
}

JsonObject::JsonObject(const json& value, std::string file, std::string path)
    : value_(value), file_(std::move(file)), path_(std::move(path)) {
  if (!value_.is_object()) {
    fail("{}: {} is a JSON {}, not an object", file_, path_.empty() ? "the top level" : path_,
         value_.type_name());
  }
}

std::string JsonObject::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void JsonObject::fail_key(std::string_view key, std::string_view message) const {
  fail("{}: {}: {}", file_, printable(key_path(key)), message);
}

const json* JsonObject::find(std::string_view key) const {
  const auto it = value_.find(key);
  return it == value_.end() || it->is_null() ? nullptr : &*it;
}

const json& JsonObject::at(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) fail_key(key, "missing");
  return *v;
}

int64_t JsonObject::checked_integer(std::string_view key, const json& v, int64_t min,
                                    int64_t max) const {
  if (!v.is_number_integer()) {
    fail_key(key, fmt::format("expected an integer, found {}", excerpt(v)));
  }
  // Unsigned values may exceed int64's range, so they are compared as unsigned.
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(max) &&
                                  (min <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(min))
                            : v.get<int64_t>() >= min && v.get<int64_t>() <= max;
  if (!in_range) fail_key(key, fmt::format("{} is out of range ({} to {})", v.dump(), min, max));
  return v.get<int64_t>();
}

int64_t JsonObject::integer(std::string_view key, int64_t min, int64_t max) const {
  return checked_integer(key, at(key), min, max);
}

std::optional<int64_t> JsonObject::optional_integer(std::string_view key, int64_t min,
                                                    int64_t max) const {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  return checked_integer(key, *v, min, max);
}

double JsonObject::number_or(std::string_view key, double fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) fail_key(key, fmt::format("expected a number, found {}", excerpt(*v)));
  return v->get<double>();
}

bool JsonObject::boolean_or(std::string_view key, bool fallback) const {
  const json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail_key(key, fmt::format("expected true or false, found {}", excerpt(*v)));
  return v->get<bool>();
}

std::optional<std::string> JsonObject::optional_string(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail_key(key, fmt::format("expected a string, found {}", excerpt(*v)));
  return v->get<std::string>();
}

JsonObject JsonObject::object(std::string_view key) const {
  return JsonObject(at(key), file_, key_path(key));
}

}  // namespace yirage::llm::hf
