#include "llm/safetensors.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "llm/hf_json.h"
#include "llm/quant.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

using hf::json;

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::Bool, "BOOL", 1},       {SafetensorsDtype::U8, "U8", 1},
    {SafetensorsDtype::I8, "I8", 1},           {SafetensorsDtype::F8_E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::F8_E4M3, "F8_E4M3", 1}, {SafetensorsDtype::F8_E8M0, "F8_E8M0", 1},
    {SafetensorsDtype::I16, "I16", 2},         {SafetensorsDtype::U16, "U16", 2},
    {SafetensorsDtype::F16, "F16", 2},         {SafetensorsDtype::BF16, "BF16", 2},
    {SafetensorsDtype::I32, "I32", 4},         {SafetensorsDtype::U32, "U32", 4},
    {SafetensorsDtype::F32, "F32", 4},         {SafetensorsDtype::F64, "F64", 8},
    {SafetensorsDtype::I64, "I64", 8},         {SafetensorsDtype::U64, "U64", 8},
};

const DtypeInfo& info(SafetensorsDtype dtype) {
  return kDtypes[static_cast<size_t>(dtype)];
}

std::string known_dtypes() {
  std::string names;
  for (const DtypeInfo& d : kDtypes)
    names += fmt::format("{}{}", names.empty() ? "" : ", ", d.name);
  return names;
}

constexpr std::string_view kMetadataKey = "__metadata__";

// Records the first key repeated within one JSON object: nlohmann keeps the last value of a
// duplicated key silently, which would let two entries claim one tensor name.
class DuplicateKeyFinder {
 public:
  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: keys_.emplace_back(); break;
      case json::parse_event_t::object_end: keys_.pop_back(); break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (depth == 1) current_tensor_ = key;
        if (!keys_.back().insert(key).second && !duplicate_) {
          duplicate_ = depth == 1 ? fmt::format("duplicate entry '{}'", hf::printable(key))
                                  : fmt::format("entry '{}': duplicate key '{}'",
                                                hf::printable(current_tensor_), hf::printable(key));
        }
        break;
      }
      default: break;
    }
    return true;
  }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  std::vector<std::set<std::string>> keys_;
  std::string current_tensor_;
  std::optional<std::string> duplicate_;
};

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDtype dtype) {
  return info(dtype).name;
}

size_t safetensors_dtype_size(SafetensorsDtype dtype) {
  return info(dtype).size;
}

class SafetensorsParser {
 public:
  SafetensorsParser(SafetensorsFile& file, std::span<const std::byte> bytes)
      : file_(file), bytes_(bytes) {}

  void parse() {
    const json header = parse_header();  // an object: it starts with '{'
    for (const auto& [name, entry] : header.items()) {
      if (name == kMetadataKey) {
        parse_metadata(entry);
      } else {
        parse_tensor(name, entry);
      }
    }
    check_layout();
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      file_.index_.emplace(file_.tensors_[i].name, i);
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail_at(uint64_t offset, fmt::format_string<Args...> format, Args&&... args) {
    fail("{}: offset {}: {}", file_.source_, offset,
         fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  [[noreturn]] void fail_tensor(std::string_view name, fmt::format_string<Args...> format,
                                Args&&... args) {
    fail("{}: tensor '{}': {}", file_.source_, hf::printable(name),
         fmt::format(format, std::forward<Args>(args)...));
  }

  json parse_header() {
    if (bytes_.size() < 8) {
      fail_at(0, "truncated: the 8-byte header length is missing ({} bytes in the file)",
              bytes_.size());
    }
    uint64_t length;
    std::memcpy(&length, bytes_.data(), 8);  // little-endian, as is every host YiRage supports
    const uint64_t after = bytes_.size() - 8;
    if (length > SafetensorsFile::kMaxHeaderBytes) {
      fail_at(0, "header length {} exceeds the limit of {} bytes", length,
              SafetensorsFile::kMaxHeaderBytes);
    }
    if (length > after) {
      fail_at(0, "header length {} exceeds the {} bytes after it (truncated file?)", length, after);
    }
    const std::string_view text(reinterpret_cast<const char*>(bytes_.data()) + 8, length);
    // The reference implementation requires this too; it also rejects an empty header early.
    if (text.empty() || text.front() != '{') fail_at(8, "the header does not start with '{{'");
    file_.data_offset_ = 8 + length;
    DuplicateKeyFinder duplicates;
    json header = hf::parse_json(text, file_.source_, 8, std::ref(duplicates));
    if (duplicates.duplicate()) fail_at(8, "header: {}", *duplicates.duplicate());
    return header;
  }

  void parse_metadata(const json& entry) {
    if (!entry.is_object()) {
      fail_at(8, "header: {} is a {}, not an object of strings", kMetadataKey, entry.type_name());
    }
    for (const auto& [key, value] : entry.items()) {
      if (!value.is_string()) {
        fail_at(8, "header: {} entry '{}' is a {}, not a string", kMetadataKey, hf::printable(key),
                value.type_name());
      }
      file_.metadata_.emplace(key, value.get<std::string>());
    }
  }

  // A JSON integer in [0, 2^63): shapes and offsets are never negative and must fit in int64.
  uint64_t non_negative(std::string_view name, const json& value, std::string_view what) {
    if (value.is_number_float()) fail_tensor(name, "{} is {}, not an integer", what, value.dump());
    if (!value.is_number_integer()) {
      fail_tensor(name, "{} is a {}, not an integer", what, value.type_name());
    }
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      fail_tensor(name, "{} is negative ({})", what, value.get<int64_t>());
    }
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(name, "{} {} is too large", what, v);
    }
    return v;
  }

  const json& field(std::string_view name, const json& entry, const char* key) {
    const auto it = entry.find(key);
    if (it == entry.end()) fail_tensor(name, "missing '{}'", key);
    return *it;
  }

  void parse_tensor(const std::string& name, const json& entry) {
    if (name.empty()) fail_at(8, "header: empty tensor name");
    if (!entry.is_object()) fail_tensor(name, "entry is a {}, not an object", entry.type_name());

    const json& dtype_value = field(name, entry, "dtype");
    if (!dtype_value.is_string()) {
      fail_tensor(name, "dtype is a {}, not a string", dtype_value.type_name());
    }
    const std::string& dtype_name = dtype_value.get_ref<const std::string&>();
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                    [&](const DtypeInfo& d) { return d.name == dtype_name; });
    if (known == std::end(kDtypes)) {
      fail_tensor(name, "unknown dtype '{}' (known: {})", hf::printable(dtype_name),
                  known_dtypes());
    }

    const json& shape_value = field(name, entry, "shape");
    if (!shape_value.is_array()) {
      fail_tensor(name, "shape is a {}, not an array", shape_value.type_name());
    }
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (size_t d = 0; d < shape_value.size(); ++d) {
      const uint64_t dim = non_negative(name, shape_value[d], fmt::format("shape[{}]", d));
      if (dim != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        fail_tensor(name, "shape {} has more elements than fit in 63 bits", shape_value.dump());
      }
      elements *= dim;
      shape.push_back(static_cast<int64_t>(dim));
    }

    const json& offsets = field(name, entry, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      fail_tensor(name, "data_offsets is not an array of two integers");
    }
    const uint64_t begin = non_negative(name, offsets[0], "data_offsets[0]");
    const uint64_t end = non_negative(name, offsets[1], "data_offsets[1]");
    const uint64_t data_size = bytes_.size() - file_.data_offset_;
    if (begin > end) fail_tensor(name, "data_offsets [{}, {}] are out of order", begin, end);
    if (end > data_size) {
      fail_tensor(name, "data_offsets [{}, {}] end beyond the {}-byte data section at offset {}",
                  begin, end, data_size, file_.data_offset_);
    }
    if (elements > data_size) {
      fail_tensor(name, "shape [{}] has {} elements, more than the {}-byte data section holds",
                  fmt::join(shape, ", "), elements, data_size);
    }
    const uint64_t bytes = elements * known->size;  // at most 8 × the file size: no wrap
    if (bytes != end - begin) {
      fail_tensor(name, "shape [{}] of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                  fmt::join(shape, ", "), known->name, bytes, begin, end, end - begin);
    }
    file_.tensors_.push_back(SafetensorsTensor{
        name, known->dtype, std::move(shape), elements, file_.data_offset_ + begin,
        bytes_.subspan(file_.data_offset_ + begin, end - begin)});
  }

  // The data section must be tiled exactly: no two tensors share a byte and no byte is left over.
  void check_layout() {
    std::vector<SafetensorsTensor>& tensors = file_.tensors_;
    // Empty tensors first among those starting at one offset, so that they never seem to
    // overlap the tensor that starts there.
    std::sort(
        tensors.begin(), tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
          return std::pair(a.file_offset, a.data.size()) < std::pair(b.file_offset, b.data.size());
        });
    uint64_t covered = file_.data_offset_;  // end of the bytes the previous tensors claim
    const SafetensorsTensor* previous = nullptr;
    for (const SafetensorsTensor& t : tensors) {
      if (t.file_offset < covered) {
        fail_tensor(t.name, "data at offset {} overlaps tensor '{}', which ends at offset {}",
                    t.file_offset, hf::printable(previous->name), covered);
      }
      if (t.file_offset > covered) {
        fail_at(covered, "bytes {} to {} of the data section belong to no tensor",
                covered - file_.data_offset_, t.file_offset - file_.data_offset_);
      }
      covered = t.file_offset + t.data.size();
      previous = &t;
    }
    if (covered != bytes_.size()) {
      fail_at(covered, "{} bytes after the last tensor's data belong to no tensor",
              bytes_.size() - covered);
    }
  }

  SafetensorsFile& file_;
  std::span<const std::byte> bytes_;
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile mapping = MappedFile::open(path);
  SafetensorsFile file = from_memory(mapping.bytes(), path);
  file.mapping_ = std::move(mapping);
  return file;
}

SafetensorsFile SafetensorsFile::from_memory(std::span<const std::byte> bytes, std::string source) {
  SafetensorsFile file;
  file.source_ = std::move(source);
  SafetensorsParser(file, bytes).parse();
  return file;
}

const SafetensorsTensor* SafetensorsFile::find_tensor(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find_tensor(name);
  if (t == nullptr) fail("{}: no tensor named '{}'", source_, name);
  return *t;
}

std::vector<float> SafetensorsFile::to_f32(const SafetensorsTensor& tensor) const {
  GgmlType type;
  switch (tensor.dtype) {
    case SafetensorsDtype::F32: type = GgmlType::F32; break;
    case SafetensorsDtype::F16: type = GgmlType::F16; break;
    case SafetensorsDtype::BF16: type = GgmlType::BF16; break;
    default:
      fail("{}: tensor '{}': dtype {} cannot be read as float (F32, F16 and BF16 can)", source_,
           tensor.name, safetensors_dtype_name(tensor.dtype));
  }
  if (tensor.element_count == 0) return {};  // an empty vector's data() may be null
  std::vector<float> out(tensor.element_count);
  dequantize(type, tensor.data, out, fmt::format("{}: tensor '{}'", source_, tensor.name));
  return out;
}

}  // namespace yirage::llm
