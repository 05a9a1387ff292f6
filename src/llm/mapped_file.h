// A read-only memory mapping of a whole file, shared by the model-file readers (GGUF,
// safetensors): weights are borrowed from the mapping instead of copied, and pages are read from
// disk only when a tensor is touched.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace yirage::llm {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`; fails naming it when it cannot be opened, is not a regular file or cannot be
  // mapped. An empty file maps to an empty span.
  static MappedFile open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {address_, size_}; }

 private:
  MappedFile(const std::byte* address, size_t size) : address_(address), size_(size) {}
  void unmap();

  const std::byte* address_ = nullptr;
  size_t size_ = 0;
};

}  // namespace yirage::llm
