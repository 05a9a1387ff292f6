// safetensors reader. The format is an 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets} (plus an optional "__metadata__" object of strings),
// then the tensor bytes, packed without holes. A file is memory-mapped (or borrowed from a byte
// span) and fully validated when opened, so that every tensor's bytes are known to be in bounds,
// of the size its shape and dtype imply, and disjoint from every other tensor's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llm/mapped_file.h"

namespace yirage::llm {

// Every dtype of the safetensors specification whose elements are whole bytes.
enum class SafetensorsDtype {
  Bool,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
};

std::string_view safetensors_dtype_name(SafetensorsDtype dtype);
size_t safetensors_dtype_size(SafetensorsDtype dtype);  // bytes per element

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;  // row-major: the last dimension is contiguous
  uint64_t element_count;
  uint64_t file_offset;  // where the data starts in the file, for error messages
  std::span<const std::byte> data;
};

class SafetensorsFile {
 public:
  // The largest header accepted, as in the reference implementation: it bounds what a hostile
  // length can make the JSON parser allocate.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates `path`; errors are one line naming the path and the byte offset or tensor.
  static SafetensorsFile open(const std::string& path);
  // Validates bytes the caller keeps alive for the lifetime of the result. `source` names them in
  // errors.
  static SafetensorsFile from_memory(std::span<const std::byte> bytes,
                                     std::string source = "<memory>");

  const std::string& source() const { return source_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Tensors in the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find_tensor(std::string_view name) const;
  const SafetensorsTensor& tensor(std::string_view name) const;  // fails when missing

  // Decodes an F32, F16 or BF16 tensor to float; fails naming the tensor for other dtypes.
  std::vector<float> to_f32(const SafetensorsTensor& tensor) const;

 private:
  friend class SafetensorsParser;
  SafetensorsFile() = default;

  MappedFile mapping_;  // empty for from_memory()
  std::string source_;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string_view, size_t> index_;  // views of tensors_[i].name
};

}  // namespace yirage::llm
