#include "llm/quant.h"

#include <array>
#include <bit>
#include <cstring>

#include "support/error.h"

namespace yirage::llm {
namespace {

constexpr uint32_t kQK = 32;  // elements per block of the legacy Q4/Q5/Q8 formats

constexpr std::array kTypes = {
    GgmlTypeTraits{GgmlType::F32, "F32", 1, 4, true},
    GgmlTypeTraits{GgmlType::F16, "F16", 1, 2, true},
    GgmlTypeTraits{GgmlType::Q4_0, "Q4_0", 32, 18, true},
    GgmlTypeTraits{GgmlType::Q4_1, "Q4_1", 32, 20, true},
    GgmlTypeTraits{GgmlType::Q5_0, "Q5_0", 32, 22, true},
    GgmlTypeTraits{GgmlType::Q5_1, "Q5_1", 32, 24, true},
    GgmlTypeTraits{GgmlType::Q8_0, "Q8_0", 32, 34, true},
    GgmlTypeTraits{GgmlType::Q8_1, "Q8_1", 32, 36, false},
    GgmlTypeTraits{GgmlType::Q2_K, "Q2_K", 256, 84, false},
    GgmlTypeTraits{GgmlType::Q3_K, "Q3_K", 256, 110, false},
    GgmlTypeTraits{GgmlType::Q4_K, "Q4_K", 256, 144, false},
    GgmlTypeTraits{GgmlType::Q5_K, "Q5_K", 256, 176, false},
    GgmlTypeTraits{GgmlType::Q6_K, "Q6_K", 256, 210, true},
    GgmlTypeTraits{GgmlType::Q8_K, "Q8_K", 256, 292, false},
    GgmlTypeTraits{GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false},
    GgmlTypeTraits{GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
    GgmlTypeTraits{GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false},
    GgmlTypeTraits{GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
    GgmlTypeTraits{GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false},
    GgmlTypeTraits{GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
    GgmlTypeTraits{GgmlType::IQ2_S, "IQ2_S", 256, 82, false},
    GgmlTypeTraits{GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false},
    GgmlTypeTraits{GgmlType::I8, "I8", 1, 1, false},
    GgmlTypeTraits{GgmlType::I16, "I16", 1, 2, false},
    GgmlTypeTraits{GgmlType::I32, "I32", 1, 4, false},
    GgmlTypeTraits{GgmlType::I64, "I64", 1, 8, false},
    GgmlTypeTraits{GgmlType::F64, "F64", 1, 8, false},
    GgmlTypeTraits{GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
    GgmlTypeTraits{GgmlType::BF16, "BF16", 1, 2, true},
    GgmlTypeTraits{GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    GgmlTypeTraits{GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
    GgmlTypeTraits{GgmlType::MXFP4, "MXFP4", 32, 17, false},
};

// GGUF data is little-endian and only byte-aligned inside blocks, hence memcpy.
uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t load_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint8_t byte_at(const std::byte* p, size_t i) {
  return std::to_integer<uint8_t>(p[i]);
}
int8_t signed_byte_at(const std::byte* p, size_t i) {
  return static_cast<int8_t>(byte_at(p, i));
}

// block_q4_0 {f16 d; u8 qs[16]}: element j is (low nibble of qs[j]) - 8, element j+16 the high one.
void dequantize_q4_0(const std::byte* block, float* y) {
  const float d = f16_to_f32(load_u16(block));
  const std::byte* qs = block + 2;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((byte_at(qs, j) & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((byte_at(qs, j) >> 4) - 8) * d;
  }
}

// block_q4_1 {f16 d; f16 m; u8 qs[16]}: x = q * d + m with the nibble order of Q4_0.
void dequantize_q4_1(const std::byte* block, float* y) {
  const float d = f16_to_f32(load_u16(block));
  const float m = f16_to_f32(load_u16(block + 2));
  const std::byte* qs = block + 4;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(byte_at(qs, j) & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(byte_at(qs, j) >> 4) * d + m;
  }
}

// Q5 blocks add a fifth bit per element from the 32-bit qh: bit j for element j, bit j+16 for
// element j+16.
int fifth_bit_low(uint32_t qh, uint32_t j) {
  return static_cast<int>(((qh >> j) << 4) & 0x10);
}
int fifth_bit_high(uint32_t qh, uint32_t j) {
  return static_cast<int>((qh >> (j + 12)) & 0x10);
}

// block_q5_0 {f16 d; u8 qh[4]; u8 qs[16]}: x = (q - 16) * d.
void dequantize_q5_0(const std::byte* block, float* y) {
  const float d = f16_to_f32(load_u16(block));
  const uint32_t qh = load_u32(block + 2);
  const std::byte* qs = block + 6;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    const int lo = ((byte_at(qs, j) & 0x0F) | fifth_bit_low(qh, j)) - 16;
    const int hi = ((byte_at(qs, j) >> 4) | fifth_bit_high(qh, j)) - 16;
    y[j] = static_cast<float>(lo) * d;
    y[j + kQK / 2] = static_cast<float>(hi) * d;
  }
}

// block_q5_1 {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: x = q * d + m.
void dequantize_q5_1(const std::byte* block, float* y) {
  const float d = f16_to_f32(load_u16(block));
  const float m = f16_to_f32(load_u16(block + 2));
  const uint32_t qh = load_u32(block + 4);
  const std::byte* qs = block + 8;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    const int lo = (byte_at(qs, j) & 0x0F) | fifth_bit_low(qh, j);
    const int hi = (byte_at(qs, j) >> 4) | fifth_bit_high(qh, j);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + kQK / 2] = static_cast<float>(hi) * d + m;
  }
}

// block_q8_0 {f16 d; i8 qs[32]}: x = q * d.
void dequantize_q8_0(const std::byte* block, float* y) {
  const float d = f16_to_f32(load_u16(block));
  for (uint32_t j = 0; j < kQK; ++j) y[j] = static_cast<float>(signed_byte_at(block + 2, j)) * d;
}

// block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 256 elements in two halves of 128.
// Each half takes 64 bytes of ql (low 4 bits), 32 of qh (high 2 bits) and 8 scales, one per 16
// elements; x = d * scale * (q - 32), multiplied in that order as ggml does.
void dequantize_q6_k(const std::byte* block, float* y) {
  const std::byte* ql = block;
  const std::byte* qh = block + 128;
  const std::byte* sc = block + 192;
  const float d = f16_to_f32(load_u16(block + 208));
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int h = byte_at(qh, l);
      const int q1 = ((byte_at(ql, l) & 0xF) | ((h >> 0) & 3) << 4) - 32;
      const int q2 = ((byte_at(ql, l + 32) & 0xF) | ((h >> 2) & 3) << 4) - 32;
      const int q3 = ((byte_at(ql, l) >> 4) | ((h >> 4) & 3) << 4) - 32;
      const int q4 = ((byte_at(ql, l + 32) >> 4) | ((h >> 6) & 3) << 4) - 32;
      y[l + 0] = d * static_cast<float>(signed_byte_at(sc, is + 0)) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(signed_byte_at(sc, is + 2)) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(signed_byte_at(sc, is + 4)) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(signed_byte_at(sc, is + 6)) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockDecoder = void (*)(const std::byte* block, float* out);

BlockDecoder block_decoder(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return dequantize_q4_0;
    case GgmlType::Q4_1: return dequantize_q4_1;
    case GgmlType::Q5_0: return dequantize_q5_0;
    case GgmlType::Q5_1: return dequantize_q5_1;
    case GgmlType::Q8_0: return dequantize_q8_0;
    case GgmlType::Q6_K: return dequantize_q6_k;
    default: return nullptr;
  }
}

}  // namespace

const GgmlTypeTraits* find_ggml_type(uint32_t id) {
  for (const GgmlTypeTraits& traits : kTypes) {
    if (static_cast<uint32_t>(traits.type) == id) return &traits;
  }
  return nullptr;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType type) {
  const GgmlTypeTraits* traits = find_ggml_type(static_cast<uint32_t>(type));
  if (traits == nullptr) fail("unknown ggml type id {}", static_cast<uint32_t>(type));
  return *traits;
}

std::string_view ggml_type_name(GgmlType type) {
  return ggml_type_traits(type).name;
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0x1F) {
    out = sign | 0x7F800000 | (mantissa << 13);  // inf or nan
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {
    // Subnormal half: shift the mantissa up until its leading one becomes the implicit bit.
    uint32_t e = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mantissa & 0x3FF) << 13);
  }
  return std::bit_cast<float>(out);
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exponent = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mantissa = x & 0x7FFFFF;
  if (((x >> 23) & 0xFF) == 0xFF) {
    return static_cast<uint16_t>(sign | 0x7C00 | (mantissa != 0 ? 0x200 : 0));
  }
  if (exponent >= 0x1F) return static_cast<uint16_t>(sign | 0x7C00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    const uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(half);
}

void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> out,
                std::string_view what) {
  const GgmlTypeTraits& traits = ggml_type_traits(type);
  if (!traits.dequantizable) {
    fail(
        "{}: cannot dequantize ggml type {} (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
        "Q8_0, Q6_K)",
        what, traits.name);
  }
  if (out.size() % traits.block_size != 0) {
    fail("{}: {} elements is not a whole number of {} blocks of {}", what, out.size(), traits.name,
         traits.block_size);
  }
  const size_t blocks = out.size() / traits.block_size;
  if (src.size() < blocks * traits.bytes_per_block) {
    fail("{}: {} bytes of {} data hold fewer than the {} elements requested", what, src.size(),
         traits.name, out.size());
  }
  const std::byte* p = src.data();
  switch (type) {
    case GgmlType::F32: std::memcpy(out.data(), p, out.size() * sizeof(float)); return;
    case GgmlType::F16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(load_u16(p + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(load_u16(p + 2 * i));
      return;
    default: break;
  }
  const BlockDecoder decode = block_decoder(type);
  for (size_t b = 0; b < blocks; ++b) {
    decode(p + b * traits.bytes_per_block, out.data() + b * traits.block_size);
  }
}

}  // namespace yirage::llm
