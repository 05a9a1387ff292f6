// GGUF reader: versions 2 and 3, little-endian. A file is memory-mapped (or borrowed from a byte
// span) and fully validated when opened, so every accessor afterwards works on data known to be in
// bounds. Metadata strings and tensor bytes point into the mapping; nothing is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "llm/mapped_file.h"
#include "llm/quant.h"

namespace yirage::llm {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalar arrays keep a pointer to their packed little-endian elements and are
// decoded on access; string and nested arrays are indexed when the file is opened.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_integer() const;

  // The value converted to the requested type; fails, naming the file, the key and its offset, on
  // a type mismatch or when an integer does not fit.
  uint64_t as_u64() const;
  int64_t as_i64() const;
  uint32_t as_u32() const;
  int32_t as_i32() const;
  double as_f64() const;  // from f32 or f64
  bool as_bool() const;
  std::string_view as_string() const;

  // Arrays.
  GgufType element_type() const;  // fails when not an array
  size_t size() const;            // element count; fails when not an array
  std::string_view string_at(size_t i) const;
  const GgufValue& array_at(size_t i) const;
  std::vector<float> to_f32_vector() const;    // elements of type f32 (or f64)
  std::vector<int64_t> to_i64_vector() const;  // elements of any integer type

  const std::string& key() const { return key_; }

 private:
  friend class GgufParser;

  template <typename... Args>
  [[noreturn]] void fail_here(fmt::format_string<Args...> format, Args&&... args) const;
  [[noreturn]] void wrong_type(std::string_view wanted) const;
  void require_array(std::string_view wanted) const;
  int64_t integer_element(size_t i) const;

  // Where the value came from, for error messages; array elements carry "key[i]".
  std::shared_ptr<const std::string> source_;
  uint64_t offset_ = 0;
  std::string key_;
  GgufType type_ = GgufType::U8;
  uint64_t bits_ = 0;  // raw scalar bits
  std::string_view string_;
  GgufType element_type_ = GgufType::U8;
  uint64_t count_ = 0;
  const std::byte* elements_ = nullptr;  // packed scalar elements
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> arrays_;
};

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  uint64_t element_count;
  std::span<const std::byte> data;
};

class GgufFile {
 public:
  // Maps and validates `path`; errors name the path and the byte offset.
  static GgufFile open(const std::string& path);
  // Validates bytes the caller keeps alive for the lifetime of the result. `source` names them in
  // errors.
  static GgufFile from_memory(std::span<const std::byte> bytes, std::string source = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section

  // Metadata in file order.
  const std::vector<GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  const GgufValue& get(std::string_view key) const;  // fails when missing
  std::string_view get_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  float get_f32(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool fallback) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // fails when missing

  // Decodes a whole tensor to float; fails naming the tensor for types without a dequantizer.
  std::vector<float> dequantize(const GgufTensor& tensor) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  MappedFile mapping_;  // empty for from_memory()
  std::string source_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;  // GGUF's default when general.alignment is absent
  uint64_t data_offset_ = 0;
  std::vector<GgufValue> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace yirage::llm
