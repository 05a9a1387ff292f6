// ggml tensor types: the table of every standard type (so that GGUF tensor sizes can be validated
// even for types we cannot decode) and reference dequantization to float for the types the CPU
// engine reads. Block layouts follow ggml exactly; each dequantizer documents its block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace yirage::llm {

// Ids as stored in GGUF tensor infos. Gaps are ids ggml retired (Q4_2, Q4_3, the interleaved
// Q4_0_x_y layouts); files using them are rejected as unknown.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  uint32_t block_size;       // elements per block
  uint32_t bytes_per_block;  // storage of one block
  bool dequantizable;        // dequantize() supports it
};

// Null when `id` is not a ggml type this build knows.
const GgmlTypeTraits* find_ggml_type(uint32_t id);
// The traits of a known type.
const GgmlTypeTraits& ggml_type_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);

float f16_to_f32(uint16_t bits);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);  // round to nearest even; used to build test blocks

// Decodes `out.size()` elements of type `type` from `src`. `out.size()` must be a multiple of the
// block size and `src` must hold the corresponding blocks. `what` names the data (a tensor) in the
// error thrown for a type without a dequantizer.
void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> out,
                std::string_view what);

}  // namespace yirage::llm
