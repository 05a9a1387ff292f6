#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "llm/llm.h"
#include "llm_gguf_writer.h"
#include "llm_model_path.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using test_util::error_of;
using testing::ByteSink;
using testing::GgufWriter;
using ::testing::HasSubstr;
using ::testing::StartsWith;

GgufFile parse(const std::vector<std::byte>& bytes) {
  return GgufFile::from_memory(bytes);
}

// The message of the yirage::Error parsing `bytes` throws, or "" when it parses.
std::string gguf_error(const std::vector<std::byte>& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::byte> zeros(size_t n) {
  return std::vector<std::byte>(n);
}

GgufWriter one_f32_tensor(std::vector<uint64_t> dims = {4}) {
  GgufWriter w;
  w.scalar<uint32_t>("general.alignment", GgufWriter::U32, 32);
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  w.tensor({"t", std::move(dims), 0, zeros(n * 4), std::nullopt});
  return w;
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, ReadsEveryMetadataType) {
  GgufWriter w;
  w.version = GetParam();
  w.scalar<uint8_t>("u8", GgufWriter::U8, 200)
      .scalar<int8_t>("i8", GgufWriter::I8, -100)
      .scalar<uint16_t>("u16", GgufWriter::U16, 60000)
      .scalar<int16_t>("i16", GgufWriter::I16, -30000)
      .scalar<uint32_t>("u32", GgufWriter::U32, 4000000000u)
      .scalar<int32_t>("i32", GgufWriter::I32, -2000000000)
      .scalar<float>("f32", GgufWriter::F32, 1.5f)
      .scalar<uint8_t>("bool", GgufWriter::Bool, 1)
      .string("string", "héllo")
      .scalar<uint64_t>("u64", GgufWriter::U64, 18000000000000000000ull)
      .scalar<int64_t>("i64", GgufWriter::I64, -9000000000000000000ll)
      .scalar<double>("f64", GgufWriter::F64, -0.25)
      .array<int16_t>("i16s", GgufWriter::I16, {-1, 2, -3})
      .array<float>("f32s", GgufWriter::F32, {0.5f, -2.0f})
      .array<uint8_t>("bools", GgufWriter::Bool, {0, 1, 1})
      .string_array("strings", {"a", "", "ccc"});
  ByteSink nested;  // [["x", "yy"], []]
  nested.put<uint32_t>(GgufWriter::Array);
  nested.put<uint64_t>(2);
  for (const std::vector<std::string>& inner :
       {std::vector<std::string>{"x", "yy"}, std::vector<std::string>{}}) {
    nested.put<uint32_t>(GgufWriter::String);
    nested.put<uint64_t>(inner.size());
    for (const std::string& s : inner) nested.put_string(s);
  }
  w.raw_kv("nested", GgufWriter::Array, nested.bytes);
  const std::vector<std::byte> bytes = w.finish();
  const GgufFile f = parse(bytes);

  EXPECT_EQ(f.version(), GetParam());
  EXPECT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(f.get("u8").as_u32(), 200u);
  EXPECT_EQ(f.get("i8").as_i64(), -100);
  EXPECT_EQ(f.get("u16").as_u32(), 60000u);
  EXPECT_EQ(f.get("i16").as_i32(), -30000);
  EXPECT_EQ(f.get_u32("u32"), 4000000000u);
  EXPECT_EQ(f.get("i32").as_i32(), -2000000000);
  EXPECT_EQ(f.get_f32("f32"), 1.5f);
  EXPECT_TRUE(f.get("bool").as_bool());
  EXPECT_EQ(f.get_string("string"), "héllo");
  EXPECT_EQ(f.get("u64").as_u64(), 18000000000000000000ull);
  EXPECT_EQ(f.get("i64").as_i64(), -9000000000000000000ll);
  EXPECT_EQ(f.get("f64").as_f64(), -0.25);
  EXPECT_EQ(f.get("i16s").to_i64_vector(), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(f.get("f32s").to_f32_vector(), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(f.get("bools").element_type(), GgufType::Bool);
  EXPECT_EQ(f.get("bools").size(), 3u);
  EXPECT_EQ(f.get("strings").string_at(2), "ccc");
  EXPECT_EQ(f.get("strings").string_at(1), "");
  const GgufValue& n = f.get("nested");
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n.array_at(0).string_at(1), "yy");
  try {
    n.array_at(0).as_string();
    ADD_FAILURE() << "an array read as a string";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("metadata 'nested[0]': expected string, found array"));
  }
  EXPECT_EQ(n.array_at(1).size(), 0u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersions, ::testing::Values(2u, 3u));

TEST(Gguf, TypedGettersExplainMismatches) {
  GgufWriter w;
  w.scalar<uint32_t>("n", GgufWriter::U32, 7)
      .scalar<int32_t>("neg", GgufWriter::I32, -1)
      .scalar<uint64_t>("big", GgufWriter::U64, 1ull << 40)
      .string_array("names", {"a"});
  const std::vector<std::byte> bytes = w.finish();
  const GgufFile f = parse(bytes);
  EXPECT_EQ(error_of([&] { f.get_string("n"); }),
            "<memory>: offset 24: metadata 'n': expected string, found u32");
  EXPECT_EQ(error_of([&] { f.get("neg").as_u32(); }),
            "<memory>: offset 41: metadata 'neg': value -1 is negative");
  EXPECT_EQ(error_of([&] { f.get_u32("big"); }),
            "<memory>: offset 60: metadata 'big': value 1099511627776 does not fit in u32");
  EXPECT_EQ(error_of([&] { f.get_u32("missing"); }), "<memory>: missing GGUF metadata 'missing'");
  EXPECT_EQ(error_of([&] { f.get("names").to_f32_vector(); }),
            "<memory>: offset 83: metadata 'names': expected an array of floats, found an array of "
            "string");
  EXPECT_EQ(error_of([&] { f.get("names").string_at(1); }),
            "<memory>: offset 83: metadata 'names': index 1 out of range (size 1)");
  EXPECT_EQ(error_of([&] { f.get("n").size(); }),
            "<memory>: offset 24: metadata 'n': expected an array, found u32");
  EXPECT_EQ(error_of([&] { f.tensor("w"); }), "<memory>: no tensor named 'w'");
  EXPECT_EQ(f.get_u32_or("missing", 5), 5u);
  EXPECT_TRUE(f.get_bool_or("missing", true));
}

TEST(Gguf, LocatesTensorsAtTheDeclaredAlignment) {
  GgufWriter w;
  w.alignment = 64;
  w.scalar<uint32_t>("general.alignment", GgufWriter::U32, 64);
  w.tensor({"a", {2, 3}, 0, testing::float_bytes({1, 2, 3, 4, 5, 6}), std::nullopt});
  std::vector<std::byte> q8(34);
  q8[0] = std::byte{0x00};
  q8[1] = std::byte{0x3C};  // d = 1.0
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<std::byte>(static_cast<int8_t>(j - 16));
  w.tensor({"b", {32}, 8, q8, std::nullopt});
  const std::vector<std::byte> bytes = w.finish();
  const GgufFile f = parse(bytes);

  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  const GgufTensor& a = f.tensor("a");
  EXPECT_EQ(a.type, GgmlType::F32);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.element_count, 6u);
  EXPECT_EQ(a.data.size(), 24u);
  EXPECT_EQ(a.data.data(), bytes.data() + f.data_offset());
  EXPECT_EQ(f.dequantize(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const GgufTensor& b = f.tensor("b");
  EXPECT_EQ(b.data.data(), bytes.data() + f.data_offset() + 64);
  const std::vector<float> values = f.dequantize(b);
  EXPECT_EQ(values[0], -16.0f);
  EXPECT_EQ(values[31], 15.0f);
  EXPECT_EQ(f.find_tensor("c"), nullptr);
}

TEST(Gguf, OpensFilesThroughMmapAndNamesThemInErrors) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::filesystem::path good = dir / "yirage_llm_gguf_good.gguf";
  const std::filesystem::path bad = dir / "yirage_llm_gguf_bad.gguf";
  const auto write = [](const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  };
  write(good, one_f32_tensor().finish());
  std::vector<std::byte> truncated = one_f32_tensor().finish();
  truncated.resize(30);
  write(bad, truncated);

  const GgufFile f = GgufFile::open(good.string());
  EXPECT_EQ(f.source(), good.string());
  EXPECT_EQ(f.tensor("t").data.size(), 16u);
  try {
    GgufFile::open(bad.string());
    ADD_FAILURE() << "truncated file parsed";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), StartsWith(bad.string() + ": offset 16: metadata count 1 exceeds"));
  }
  try {
    GgufFile::open((dir / "yirage_no_such_file.gguf").string());
    ADD_FAILURE() << "missing file opened";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("yirage_no_such_file.gguf: cannot open: No such file"));
  }
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST(GgufMalformed, EveryTruncationFailsWithAnOffset) {
  GgufWriter w = one_f32_tensor({8});
  testing::add_tiny_gpt2_tokenizer(w);
  const std::vector<std::byte> bytes = w.finish();
  ASSERT_NO_THROW(parse(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    const std::string message = gguf_error(prefix);
    ASSERT_THAT(message, StartsWith("<memory>: offset ")) << "prefix of " << n << " bytes";
  }
}

TEST(GgufMalformed, BadMagic) {
  std::vector<std::byte> bytes = one_f32_tensor().finish();
  bytes[0] = std::byte{'X'};
  EXPECT_EQ(gguf_error(bytes), "<memory>: offset 0: not a GGUF file (bad magic)");
}

TEST(GgufMalformed, UnsupportedVersions) {
  GgufWriter w = one_f32_tensor();
  w.version = 4;
  EXPECT_EQ(gguf_error(w.finish()),
            "<memory>: offset 4: unsupported GGUF version 4 (only little-endian versions 2 and 3)");
  w.version = 1;
  EXPECT_EQ(gguf_error(w.finish()),
            "<memory>: offset 4: GGUF version 1 is not supported (only 2 and 3)");
  w.version = 0x03000000;  // a big-endian version 3
  EXPECT_THAT(gguf_error(w.finish()), HasSubstr("unsupported GGUF version 50331648"));
}

TEST(GgufMalformed, HugeCounts) {
  GgufWriter w = one_f32_tensor();
  w.tensor_count_override = UINT64_MAX;
  EXPECT_EQ(gguf_error(w.finish()),
            "<memory>: offset 8: tensor count 18446744073709551615 exceeds what the file can hold");
  GgufWriter k = one_f32_tensor();
  k.kv_count_override = 1ull << 40;
  EXPECT_EQ(gguf_error(k.finish()),
            "<memory>: offset 16: metadata count 1099511627776 exceeds what the file can hold");
}

TEST(GgufMalformed, HugeStringAndArrayLengths) {
  ByteSink key;
  key.put<uint64_t>(UINT64_MAX);
  std::vector<std::byte> bytes = GgufWriter().finish();
  bytes.resize(24);          // the header alone
  bytes[16] = std::byte{1};  // one key-value pair follows: a key of absurd length
  bytes.insert(bytes.end(), key.bytes.begin(), key.bytes.end());
  bytes.resize(bytes.size() + 16);
  EXPECT_EQ(gguf_error(bytes),
            "<memory>: offset 24: metadata key length 18446744073709551615 exceeds the 16 bytes "
            "left in the file");

  ByteSink array;
  array.put<uint32_t>(GgufWriter::U32);
  array.put<uint64_t>(1ull << 62);
  GgufWriter w;
  w.raw_kv("a", GgufWriter::Array, array.bytes);
  EXPECT_EQ(gguf_error(w.finish()),
            "<memory>: offset 41: array length 4611686018427387904 exceeds what the file can hold");
}

TEST(GgufMalformed, BadDimensions) {
  EXPECT_THAT(gguf_error(one_f32_tensor({1ull << 32, 1ull << 32}).finish()),
              HasSubstr("tensor 't' element count overflows"));
  EXPECT_THAT(gguf_error(one_f32_tensor({4, 0}).finish()),
              HasSubstr("tensor 't' dimension 1 is 0 (must be positive)"));
  EXPECT_THAT(gguf_error(one_f32_tensor({1, 1, 1, 1, 1}).finish()),
              HasSubstr("tensor 't' has 5 dimensions (1 to 4 allowed)"));
  GgufWriter w;
  w.tensor({"q", {31}, 8, zeros(34), std::nullopt});
  EXPECT_THAT(
      gguf_error(w.finish()),
      HasSubstr("tensor 'q' row of 31 elements is not a multiple of the Q8_0 block size 32"));
}

TEST(GgufMalformed, UnknownTypes) {
  GgufWriter w;
  w.tensor({"t", {4}, 4, zeros(16), std::nullopt});  // 4 was Q4_2, long removed
  EXPECT_THAT(gguf_error(w.finish()), HasSubstr("tensor 't' has unknown ggml type 4"));
  GgufWriter v;
  v.raw_kv("k", 13, zeros(4));
  EXPECT_EQ(gguf_error(v.finish()), "<memory>: offset 33: unknown metadata value type 13");
}

TEST(GgufMalformed, BadOffsets) {
  GgufWriter misaligned;
  misaligned.tensor({"t", {4}, 0, zeros(16), 8});
  EXPECT_THAT(gguf_error(misaligned.finish()),
              HasSubstr("tensor 't' data offset 8 is not a multiple of the alignment 32"));
  GgufWriter outside = one_f32_tensor();
  std::vector<std::byte> bytes = outside.finish();
  bytes.resize(bytes.size() - 1);
  EXPECT_THAT(gguf_error(bytes),
              HasSubstr("tensor 't' data [0, 16) lies outside the 15-byte data section"));
  GgufWriter far;
  far.tensor({"t", {4}, 0, zeros(16), 1ull << 60});
  EXPECT_THAT(gguf_error(far.finish()), HasSubstr("lies outside"));
}

TEST(GgufMalformed, OverlappingAndDuplicateTensors) {
  GgufWriter overlap;
  overlap.tensor({"a", {16}, 0, zeros(64), 0});
  overlap.tensor({"b", {4}, 0, zeros(16), 32});
  EXPECT_THAT(gguf_error(overlap.finish()), HasSubstr("tensor 'b' data overlaps tensor 'a'"));
  GgufWriter duplicate;
  duplicate.tensor({"a", {4}, 0, zeros(16), std::nullopt});
  duplicate.tensor({"a", {4}, 0, zeros(16), std::nullopt});
  EXPECT_THAT(gguf_error(duplicate.finish()), HasSubstr("duplicate tensor name 'a'"));
}

TEST(GgufMalformed, DuplicateKeysAndBadValues) {
  GgufWriter dup;
  dup.scalar<uint32_t>("k", GgufWriter::U32, 1).scalar<uint32_t>("k", GgufWriter::U32, 2);
  EXPECT_EQ(gguf_error(dup.finish()), "<memory>: offset 41: duplicate metadata key 'k'");
  GgufWriter boolean;
  boolean.scalar<uint8_t>("b", GgufWriter::Bool, 2);
  EXPECT_EQ(gguf_error(boolean.finish()), "<memory>: offset 37: bool value 2 is neither 0 nor 1");
  GgufWriter alignment;
  alignment.scalar<uint32_t>("general.alignment", GgufWriter::U32, 48);
  EXPECT_EQ(gguf_error(alignment.finish()),
            "<memory>: offset 24: general.alignment 48 is not a power of two");
  GgufWriter alignment_type;
  alignment_type.scalar<uint64_t>("general.alignment", GgufWriter::U64, 32);
  EXPECT_EQ(gguf_error(alignment_type.finish()),
            "<memory>: offset 24: general.alignment must be u32, found u64");
}

TEST(GgufMalformed, DeeplyNestedArrays) {
  ByteSink nested;
  for (int i = 0; i < 100; ++i) {
    nested.put<uint32_t>(GgufWriter::Array);
    nested.put<uint64_t>(1);
  }
  nested.put<uint32_t>(GgufWriter::U8);
  nested.put<uint64_t>(0);
  GgufWriter w;
  w.raw_kv("deep", GgufWriter::Array, nested.bytes);
  EXPECT_THAT(gguf_error(w.finish()), HasSubstr("arrays nested deeper than 8"));
}

// ------------------------------------------------------------------------------------------------
// The real SmolLM2 file, when scripts/fetch-model.sh has fetched it.

TEST(GgufSmolLM2, ReadsTheModelDirectory) {
  const std::optional<std::string> path = testing::smollm2_path();
  if (!path) GTEST_SKIP() << testing::kModelSkipReason;
  const GgufFile f = GgufFile::open(*path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 30u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 3u);
  EXPECT_FLOAT_EQ(f.get_f32("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.data_offset(), 1785664u);
  const GgufTensor& embedding = f.tensor("token_embd.weight");
  EXPECT_EQ(embedding.type, GgmlType::Q8_0);
  EXPECT_EQ(embedding.dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embedding.data.size(), 576u / 32 * 34 * 49152);
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, GgmlType::Q4_1);
  EXPECT_EQ(f.tensor("output_norm.weight").type, GgmlType::F32);
}

// Golden values computed with an independent NumPy decoder of the same bytes.
TEST(GgufSmolLM2, DequantizesEachTypeInTheFile) {
  const std::optional<std::string> path = testing::smollm2_path();
  if (!path) GTEST_SKIP() << testing::kModelSkipReason;
  const GgufFile f = GgufFile::open(*path);
  const std::vector<float> norm = f.dequantize(f.tensor("blk.0.attn_norm.weight"));
  const std::vector<float> q = f.dequantize(f.tensor("blk.0.attn_q.weight"));
  const GgufTensor& embedding = f.tensor("token_embd.weight");
  std::vector<float> row(576);  // token 1000
  dequantize(GgmlType::Q8_0, embedding.data.subspan(1000 * 18 * 34), row, "row");

  const auto sum = [](std::span<const float> v) {
    double s = 0;
    for (float x : v) s += x;
    return s;
  };
  ASSERT_EQ(norm.size(), 576u);
  ASSERT_EQ(q.size(), 576u * 576u);
  EXPECT_NEAR(sum(norm), 0.6129436492919922, 1e-3);
  EXPECT_FLOAT_EQ(q[0], -0.0963134765625f);
  EXPECT_FLOAT_EQ(q[17], 0.2841796875f);
  EXPECT_NEAR(sum(q), 59.22322082519531, 1e-2);
  EXPECT_FLOAT_EQ(row[0], -0.1119384765625f);
  EXPECT_NEAR(sum(row), 1.9784250259399414, 1e-4);
}

}  // namespace
}  // namespace yirage::llm
