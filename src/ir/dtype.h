// Element types and the scalar conversions between them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace yirage::ir {

// i8 and u8 are storage types for quantized weights: no arithmetic op accepts them.
enum class DType : uint8_t { f32, f16, bf16, i32, i8, u8 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16,
                                       DType::i32, DType::i8,  DType::u8};

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::i8:
    case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

inline std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  // Accept the spellings NumPy and PyTorch users type.
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int8") return DType::i8;
  if (name == "uint8") return DType::u8;
  return std::nullopt;
}

// IEEE binary16 and bfloat16 conversions, round to nearest even. Hand-written because g++ 12 has
// no std::float16_t/std::bfloat16_t and no Debian package offers a small header for this.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: value = mant * 2^-24
    float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;   // nan
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf (65520 and up)
  if (absx < 0x38800000u) {                        // below the smallest normal half, 2^-14
    // Scale so the subnormal step 2^-24 is one unit; the float add rounds to nearest even.
    float scaled = std::bit_cast<float>(absx) * 0x1p24f;
    return sign | uint16_t(std::nearbyint(scaled));
  }
  uint32_t mant_round = absx + 0xfffu + ((absx >> 13) & 1u);  // round to nearest even at bit 13
  return sign | uint16_t((mant_round - 0x38000000u) >> 13);
}

inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet nan
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Rounds a float to the nearest value representable in `t` (identity for f32).
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::f16: return f16_to_f32(f32_to_f16(v));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(v));
    default: return v;
  }
}

}  // namespace yirage::ir
