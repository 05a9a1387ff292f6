// The safetensors reader: well-formed files read back exactly, and every kind of malformed file
// (truncated, bad header length, bad JSON, bad entries, offsets out of range or overlapping, huge
// dims, unknown dtypes) is rejected with one line naming the source and the offset or tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "llm/llm.h"
#include "llm_safetensors_writer.h"
#include "llm_tiny_model.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using test_util::error_of;
using testing::assemble_safetensors;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::StTensor;
using testing::write_safetensors;

std::vector<std::byte> f32_bytes(std::vector<float> v) {
  return testing::float_bytes(v);
}

// The error parsing `bytes` gives; it must be a single line naming the source.
std::string safetensors_error(const std::vector<std::byte>& bytes) {
  const std::string e = error_of([&] { SafetensorsFile::from_memory(bytes, "m.st"); });
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_THAT(e, StartsWith("m.st: "));
  return e;
}

// A file whose header is `header` verbatim, followed by `data_bytes` zero bytes.
std::string header_error(const std::string& header, size_t data_bytes = 16) {
  return safetensors_error(assemble_safetensors(header, std::vector<std::byte>(data_bytes)));
}

const std::vector<StTensor> kTwoTensors = {
    {"b.weight", "F32", {2, 2}, f32_bytes({1, 2, 3, -4})},
    {"a.bias", "F16", {3}, testing::encode({0.5f, -1.0f, 2.0f}, 1)},
};

TEST(Safetensors, ReadsTensorsAndMetadata) {
  const std::vector<std::byte> bytes = write_safetensors(kTwoTensors, {{"format", "pt"}});
  const SafetensorsFile f = SafetensorsFile::from_memory(bytes);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 2u);
  // In data order, not name order.
  EXPECT_EQ(f.tensors()[0].name, "b.weight");
  const SafetensorsTensor& b = f.tensor("b.weight");
  EXPECT_EQ(b.dtype, SafetensorsDtype::F32);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.element_count, 4u);
  EXPECT_EQ(b.file_offset, f.data_offset());
  EXPECT_EQ(f.data_offset() % 8, 0u);  // the writer pads the header
  EXPECT_EQ(f.to_f32(b), (std::vector<float>{1, 2, 3, -4}));
  const SafetensorsTensor& a = f.tensor("a.bias");
  EXPECT_EQ(a.file_offset, f.data_offset() + 16);
  EXPECT_EQ(f.to_f32(a), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(f.find_tensor("c"), nullptr);
  EXPECT_THAT(error_of([&] { f.tensor("c"); }), HasSubstr("no tensor named 'c'"));
}

TEST(Safetensors, ReadsEveryDtypeAndEmptyTensors) {
  std::vector<StTensor> tensors;
  for (const char* dtype : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
                            "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    SafetensorsDtype d = SafetensorsDtype::Bool;
    while (safetensors_dtype_name(d) != dtype) d = static_cast<SafetensorsDtype>(int(d) + 1);
    tensors.push_back({dtype, dtype, {3}, std::vector<std::byte>(3 * safetensors_dtype_size(d))});
  }
  tensors.push_back({"empty", "F32", {0, 5}, {}});
  tensors.push_back({"scalar", "BF16", {}, testing::encode({1.5f}, 30)});
  const std::vector<std::byte> bytes = write_safetensors(tensors);
  const SafetensorsFile f = SafetensorsFile::from_memory(bytes);
  EXPECT_EQ(f.tensors().size(), tensors.size());
  EXPECT_EQ(f.tensor("empty").element_count, 0u);
  EXPECT_EQ(f.to_f32(f.tensor("scalar")), std::vector<float>{1.5f});
  EXPECT_EQ(f.tensor("I64").data.size(), 24u);
  EXPECT_THAT(error_of([&] { f.to_f32(f.tensor("I64")); }),
              HasSubstr("tensor 'I64': dtype I64 cannot be read as float"));
  // No tensors at all is a valid file too.
  EXPECT_TRUE(SafetensorsFile::from_memory(assemble_safetensors("{}", {})).tensors().empty());
}

TEST(Safetensors, OpensAFileThroughMmap) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("yirage_st_" + std::to_string(::getpid()) + ".safetensors");
  testing::write_file(path, write_safetensors(kTwoTensors));
  {
    const SafetensorsFile f = SafetensorsFile::open(path.string());
    EXPECT_EQ(f.source(), path.string());
    EXPECT_EQ(f.to_f32(f.tensor("b.weight"))[3], -4.0f);
  }
  std::filesystem::remove(path);
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path.string()); }),
              HasSubstr(path.string() + ": cannot open"));
}

TEST(SafetensorsErrors, TruncatedOrBadHeaderLength) {
  EXPECT_THAT(safetensors_error({}),
              HasSubstr("offset 0: truncated: the 8-byte header length is missing"));
  EXPECT_THAT(safetensors_error(std::vector<std::byte>(5)), HasSubstr("offset 0: truncated"));
  const std::vector<std::byte> good = write_safetensors(kTwoTensors);
  // Cut inside the header, then inside the data.
  EXPECT_THAT(safetensors_error({good.begin(), good.begin() + 20}),
              HasSubstr("offset 0: header length"));
  EXPECT_THAT(safetensors_error({good.begin(), good.end() - 1}),
              HasSubstr("tensor 'a.bias': data_offsets [16, 22] end beyond the 21-byte data"));
  EXPECT_THAT(safetensors_error(assemble_safetensors("{}", {}, 1000)),
              HasSubstr("offset 0: header length 1000 exceeds the 8 bytes after it"));
  EXPECT_THAT(safetensors_error(assemble_safetensors("{}", {}, uint64_t{1} << 62)),
              HasSubstr("offset 0: header length 4611686018427387904 exceeds the limit"));
  EXPECT_THAT(safetensors_error(assemble_safetensors("", {})),
              HasSubstr("offset 8: the header does not start with '{'"));
}

TEST(SafetensorsErrors, BadJson) {
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32",, }})"),
              HasSubstr("offset 30: not valid JSON: syntax error"));
  EXPECT_THAT(header_error("{\"t\": \"\xff\"}"),
              HasSubstr("not valid JSON: syntax error while parsing value - "
                        "invalid string: ill-formed UTF-8 byte"));
  EXPECT_THAT(header_error(R"({"t": 1} trailing)"), HasSubstr("not valid JSON"));
  // nlohmann reports a number beyond double's range with another exception type.
  EXPECT_THAT(header_error(R"({"t": {"shape": [1e999]}})"),
              HasSubstr("offset 8: not valid JSON: number overflow parsing '1e999'"));
  EXPECT_THAT(header_error("[1, 2]"), HasSubstr("offset 8: the header does not start with '{'"));
}

TEST(SafetensorsErrors, BadEntries) {
  const std::string ok_rest = R"("shape": [4], "data_offsets": [0, 16]})";
  EXPECT_THAT(header_error(R"({"t": 5})"),
              HasSubstr("tensor 't': entry is a number, not an object"));
  EXPECT_THAT(header_error(R"({"t": {)" + ok_rest + "}"), HasSubstr("tensor 't': missing 'dtype'"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": 4, )" + ok_rest + "}"),
              HasSubstr("tensor 't': dtype is a number, not a string"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", "data_offsets": [0, 16]}})"),
              HasSubstr("tensor 't': missing 'shape'"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", "shape": [4]}})"),
              HasSubstr("tensor 't': missing 'data_offsets'"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})"),
              HasSubstr("tensor 't': shape is a number, not an array"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})"),
              HasSubstr("tensor 't': data_offsets is not an array of two integers"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, "16"]}})"),
              HasSubstr("tensor 't': data_offsets[1] is a string, not an integer"));
  EXPECT_THAT(header_error(R"({"": {"dtype": "F32", )" + ok_rest + "}"),
              HasSubstr("offset 8: header: empty tensor name"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", )" + ok_rest.substr(0, ok_rest.size() - 1) +
                           R"(, "dtype": "F16"}})"),
              HasSubstr("header: entry 't': duplicate key 'dtype'"));
  EXPECT_THAT(header_error(R"({"t": {"dtype": "F32", )" + ok_rest + R"(, "t": {"dtype": "F32", )" +
                           ok_rest + "}"),
              HasSubstr("offset 8: header: duplicate entry 't'"));
  EXPECT_THAT(header_error(R"({"__metadata__": [1], "t": {"dtype": "F32", )" + ok_rest + "}"),
              HasSubstr("header: __metadata__ is a array, not an object of strings"));
  EXPECT_THAT(header_error(R"({"__metadata__": {"k": 1}, "t": {"dtype": "F32", )" + ok_rest + "}"),
              HasSubstr("header: __metadata__ entry 'k' is a number, not a string"));
}

TEST(SafetensorsErrors, UnknownDtypeNamesTheTensor) {
  EXPECT_THAT(header_error(R"({"w": {"dtype": "Q4_0", "shape": [4], "data_offsets": [0, 16]}})"),
              HasSubstr("m.st: tensor 'w': unknown dtype 'Q4_0' (known: BOOL, U8, I8, F8_E5M2"));
  // Names are escaped, so that the message stays on one line.
  EXPECT_THAT(header_error(R"({"a\nb": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})"),
              HasSubstr("m.st: tensor 'a\\x0Ab': unknown dtype 'Q4'"));
}

TEST(SafetensorsErrors, BadOrHugeDims) {
  const auto with_shape = [](const std::string& shape) {
    return header_error(R"({"t": {"dtype": "F32", "shape": )" + shape +
                        R"(, "data_offsets": [0, 16]}})");
  };
  EXPECT_THAT(with_shape("[-4]"), HasSubstr("tensor 't': shape[0] is negative (-4)"));
  EXPECT_THAT(with_shape("[2.5]"), HasSubstr("tensor 't': shape[0] is 2.5, not an integer"));
  EXPECT_THAT(with_shape("[1e30]"), HasSubstr("shape[0] is 1e+30, not an integer"));
  EXPECT_THAT(with_shape("[18446744073709551615]"),
              HasSubstr("shape[0] 18446744073709551615 is too large"));
  EXPECT_THAT(with_shape("[4294967296, 4294967296]"),
              HasSubstr("tensor 't': shape [4294967296,4294967296] has more elements than fit in "
                        "63 bits"));
  EXPECT_THAT(with_shape("[1099511627776]"),
              HasSubstr("shape [1099511627776] has 1099511627776 elements, more than the 16-byte "
                        "data section holds"));
  EXPECT_THAT(with_shape("[2, 3]"),
              HasSubstr("shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 16] hold 16"));
}

TEST(SafetensorsErrors, OffsetsOutOfRangeOverlappingOrLeavingHoles) {
  const auto with_offsets = [](const std::string& a, const std::string& b, size_t data = 32) {
    return header_error(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": )" + a +
                            R"(}, "b": {"dtype": "F32", "shape": [4], "data_offsets": )" + b + "}}",
                        data);
  };
  const std::string valid = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, )"
                            R"("b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})";
  EXPECT_EQ(SafetensorsFile::from_memory(assemble_safetensors(valid, std::vector<std::byte>(32)))
                .tensors()
                .size(),
            2u);
  EXPECT_THAT(with_offsets("[16, 0]", "[16, 32]"),
              HasSubstr("tensor 'a': data_offsets [16, 0] are out of order"));
  EXPECT_THAT(with_offsets("[0, 16]", "[32, 48]"),
              HasSubstr("tensor 'b': data_offsets [32, 48] end beyond the 32-byte data section"));
  EXPECT_THAT(with_offsets("[0, 16]", "[18446744073709551600, 18446744073709551615]"),
              HasSubstr("tensor 'b': data_offsets[0] 18446744073709551600 is too large"));
  EXPECT_THAT(with_offsets("[0, 16]", "[-16, 0]"),
              HasSubstr("tensor 'b': data_offsets[0] is negative (-16)"));
  EXPECT_THAT(with_offsets("[0, 16]", "[8, 24]"),
              HasSubstr("tensor 'b': data at offset 144 overlaps tensor 'a', which ends at offset "
                        "152"));
  EXPECT_THAT(with_offsets("[0, 16]", "[0, 16]"), HasSubstr("overlaps tensor"));
  EXPECT_THAT(with_offsets("[0, 16]", "[20, 36]", 36),
              HasSubstr("offset 152: bytes 16 to 20 of the data section belong to no tensor"));
  EXPECT_THAT(with_offsets("[0, 16]", "[16, 32]", 40),
              HasSubstr("offset 168: 8 bytes after the last tensor's data belong to no tensor"));
}

// Every prefix of a valid file fails cleanly (the fuzz target covers arbitrary bytes).
TEST(SafetensorsErrors, EveryTruncationIsAnError) {
  const std::vector<std::byte> good = write_safetensors(kTwoTensors, {{"k", "v"}});
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THAT(safetensors_error({good.begin(), good.begin() + static_cast<ptrdiff_t>(n)}),
                HasSubstr("m.st: "))
        << n << " bytes";
  }
}

}  // namespace
}  // namespace yirage::llm
