#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "llm/quant.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

// A block assembled byte by byte, the way ggml lays it out.
class Block {
 public:
  Block& f16(float v) { return u16(f32_to_f16(v)); }
  Block& u16(uint16_t v) { return raw(&v, 2); }
  Block& u32(uint32_t v) { return raw(&v, 4); }
  Block& u8(uint8_t v) { return raw(&v, 1); }
  Block& i8(int8_t v) { return raw(&v, 1); }
  Block& raw_float(float v) { return raw(&v, 4); }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  Block& raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<std::byte> bytes_;
};

std::vector<float> decode(GgmlType type, const Block& block, size_t n) {
  std::vector<float> out(n);
  dequantize(type, block.bytes(), out, "test block");
  return out;
}

TEST(GgmlTypes, TableMatchesGgml) {
  const auto check = [](uint32_t id, std::string_view name, uint32_t block, uint32_t bytes) {
    const GgmlTypeTraits* t = find_ggml_type(id);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->name, name);
    EXPECT_EQ(t->block_size, block) << name;
    EXPECT_EQ(t->bytes_per_block, bytes) << name;
  };
  check(0, "F32", 1, 4);
  check(1, "F16", 1, 2);
  check(2, "Q4_0", 32, 18);
  check(3, "Q4_1", 32, 20);
  check(6, "Q5_0", 32, 22);
  check(7, "Q5_1", 32, 24);
  check(8, "Q8_0", 32, 34);
  check(9, "Q8_1", 32, 36);
  check(10, "Q2_K", 256, 84);
  check(11, "Q3_K", 256, 110);
  check(12, "Q4_K", 256, 144);
  check(13, "Q5_K", 256, 176);
  check(14, "Q6_K", 256, 210);
  check(15, "Q8_K", 256, 292);
  check(20, "IQ4_NL", 32, 18);
  check(23, "IQ4_XS", 256, 136);
  check(28, "F64", 1, 8);
  check(30, "BF16", 1, 2);
  check(35, "TQ2_0", 256, 66);
  check(39, "MXFP4", 32, 17);
  EXPECT_EQ(find_ggml_type(4), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(find_ggml_type(5), nullptr);
  EXPECT_EQ(find_ggml_type(31), nullptr);
  EXPECT_EQ(find_ggml_type(1000), nullptr);
}

TEST(HalfFloats, DecodeSpecialValues) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0xFC00)) && f16_to_f32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC0A0), -5.0f);
}

TEST(HalfFloats, RoundTripEveryHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), bits) << "half 0x" << std::hex << bits;
  }
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie rounds to even
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);                          // overflow to infinity
}

TEST(Dequantize, F32F16Bf16) {
  EXPECT_EQ(decode(GgmlType::F32, Block().raw_float(2.5f), 1), std::vector<float>{2.5f});
  EXPECT_EQ(decode(GgmlType::F16, Block().u16(0x3C00).u16(0xB800), 2),
            (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(decode(GgmlType::BF16, Block().u16(0x4040).u16(0xBF00), 2),
            (std::vector<float>{3.0f, -0.5f}));
}

TEST(Dequantize, Q4_0LowNibblesFirst) {
  Block b;
  b.f16(0.5f);
  for (int j = 0; j < 16; ++j) b.u8(static_cast<uint8_t>(j | ((15 - j) << 4)));
  const std::vector<float> y = decode(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j;
  }
}

TEST(Dequantize, Q4_1AddsTheMinimum) {
  Block b;
  b.f16(0.25f).f16(-1.0f);
  for (int j = 0; j < 16; ++j) b.u8(static_cast<uint8_t>(j | (3 << 4)));
  const std::vector<float> y = decode(GgmlType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 3 * 0.25f - 1.0f) << j;
  }
}

TEST(Dequantize, Q5_0TakesTheFifthBitFromQh) {
  Block b;
  // Fifth bit set for elements 1 and 17 (qh bits 1 and 17).
  b.f16(2.0f).u32((1u << 1) | (1u << 17));
  for (int j = 0; j < 16; ++j) b.u8(0x21);  // low nibble 1, high nibble 2
  const std::vector<float> y = decode(GgmlType::Q5_0, b, 32);
  EXPECT_EQ(y[0], (1 - 16) * 2.0f);
  EXPECT_EQ(y[1], (1 + 16 - 16) * 2.0f);
  EXPECT_EQ(y[16], (2 - 16) * 2.0f);
  EXPECT_EQ(y[17], (2 + 16 - 16) * 2.0f);
}

TEST(Dequantize, Q5_1) {
  Block b;
  b.f16(1.0f).f16(0.5f).u32(1u << 31);  // fifth bit of element 31 only
  for (int j = 0; j < 16; ++j) b.u8(0xF0);
  const std::vector<float> y = decode(GgmlType::Q5_1, b, 32);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[16], 15.5f);
  EXPECT_EQ(y[31], 31.5f);
}

TEST(Dequantize, Q8_0IsSigned) {
  Block b;
  b.f16(0.125f);
  for (int j = 0; j < 32; ++j) b.i8(static_cast<int8_t>(j * 8 - 128));
  const std::vector<float> y = decode(GgmlType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.125f) << j;
}

TEST(Dequantize, Q6_K) {
  Block b;
  // ql: low nibble = 5 and high nibble = 9 everywhere; qh: 2-bit fields 0,1,2,3 in each byte.
  for (int i = 0; i < 128; ++i) b.u8(0x95);
  for (int i = 0; i < 64; ++i) b.u8(0b11100100);
  for (int i = 0; i < 16; ++i) b.i8(static_cast<int8_t>(i - 8));
  b.f16(0.5f);
  const std::vector<float> y = decode(GgmlType::Q6_K, b, 256);
  // Element l + 32k of half h uses scale index 8h + l/16 + 2k and qh field k.
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int nibble = k < 2 ? 5 : 9;
        const int q = (nibble | (k << 4)) - 32;
        const int scale = 8 * h + l / 16 + 2 * k - 8;
        ASSERT_EQ(y[128 * h + 32 * k + l], 0.5f * scale * q) << h << " " << k << " " << l;
      }
    }
  }
}

TEST(Dequantize, ReportsUnsupportedTypesAndShortInput) {
  std::vector<float> out(256);
  std::vector<std::byte> block(144);
  try {
    dequantize(GgmlType::Q4_K, block, out, "model.gguf: tensor 'w'");
    ADD_FAILURE() << "Q4_K dequantized";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("model.gguf: tensor 'w': cannot dequantize ggml "
                                                "type Q4_K"));
  }
  std::vector<float> small(32);
  try {
    dequantize(GgmlType::Q8_0, std::span(block).first(10), small, "x");
    ADD_FAILURE() << "short input accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x: 10 bytes of Q8_0 data hold fewer than the 32 elements requested");
  }
  std::vector<float> odd(31);
  EXPECT_THROW(dequantize(GgmlType::Q8_0, block, odd, "x"), Error);
}

}  // namespace
}  // namespace yirage::llm
