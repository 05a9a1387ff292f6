// Writes safetensors files for tests and fuzz seeds: write_safetensors() makes well-formed files;
// assemble_safetensors() takes any header text and length, for malformed ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace yirage::llm::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

// The header of `tensors` packed in order, as the reference writer lays them out.
inline nlohmann::ordered_json safetensors_header(
    const std::vector<StTensor>& tensors, const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  return header;
}

// The 8-byte length (`length` when given, else the padded header's), the header padded with
// spaces to a multiple of 8 as the reference writer does, then `data`.
inline std::vector<std::byte> assemble_safetensors(std::string header,
                                                   const std::vector<std::byte>& data,
                                                   std::optional<uint64_t> length = {}) {
  while (header.size() % 8 != 0) header += ' ';
  const uint64_t n = length.value_or(header.size());
  std::vector<std::byte> out(8);
  std::memcpy(out.data(), &n, 8);  // little-endian host
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline std::vector<std::byte> packed_data(const std::vector<StTensor>& tensors) {
  std::vector<std::byte> data;
  for (const StTensor& t : tensors) data.insert(data.end(), t.data.begin(), t.data.end());
  return data;
}

inline std::vector<std::byte> write_safetensors(
    const std::vector<StTensor>& tensors, const std::map<std::string, std::string>& metadata = {}) {
  return assemble_safetensors(safetensors_header(tensors, metadata).dump(), packed_data(tensors));
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  write_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace yirage::llm::testing
