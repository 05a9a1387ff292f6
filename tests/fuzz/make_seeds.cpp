// Writes the seed corpora of the fuzz targets: small well-formed GGUF files from the test writer
// (both tokenizer kinds, every metadata type, tensors of each dequantizable type) and a few texts.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "llm_gguf_writer.h"

namespace {

using yirage::llm::testing::GgufWriter;

void write(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write_text(const std::filesystem::path& path, std::string_view text) {
  std::ofstream(path, std::ios::binary) << text;
}

GgufWriter with_tensors() {
  GgufWriter w;
  w.scalar<uint32_t>("general.alignment", GgufWriter::U32, 32);
  w.string("general.architecture", "llama");
  // F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 elements each) and one Q6_K block.
  const std::pair<uint32_t, size_t> types[] = {{0, 128}, {1, 64}, {30, 64}, {2, 18},
                                               {3, 20},  {6, 22}, {7, 24},  {8, 34}};
  int i = 0;
  for (const auto& [type, bytes] : types) {
    std::vector<std::byte> data(bytes, std::byte{0x3C});
    w.tensor({"t" + std::to_string(i++), {32}, type, data, std::nullopt});
  }
  w.tensor({"q6k", {256}, 14, std::vector<std::byte>(210, std::byte{0x11}), std::nullopt});
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gguf_make_seeds GGUF_DIR TEXT_DIR\n");
    return 1;
  }
  const std::filesystem::path gguf = argv[1], text = argv[2];
  std::filesystem::create_directories(gguf);
  std::filesystem::create_directories(text);

  GgufWriter bpe = with_tensors();
  yirage::llm::testing::add_tiny_gpt2_tokenizer(bpe);
  write(gguf / "bpe.gguf", bpe.finish());
  GgufWriter spm;
  spm.version = 2;
  yirage::llm::testing::add_tiny_spm_tokenizer(spm);
  write(gguf / "spm_v2.gguf", spm.finish());
  GgufWriter scalars;
  scalars.scalar<uint8_t>("u8", GgufWriter::U8, 1).scalar<int64_t>("i64", GgufWriter::I64, -1);
  scalars.scalar<double>("f64", GgufWriter::F64, 0.5).scalar<uint8_t>("b", GgufWriter::Bool, 1);
  scalars.array<uint16_t>("u16s", GgufWriter::U16, {1, 2}).string_array("s", {"x", "yz"});
  write(gguf / "scalars.gguf", scalars.finish());
  write(gguf / "tensors.gguf", with_tensors().finish());

  write_text(text / "plain", "\x00Hello, world! don't 12345   spaces\n\ttabs");
  write_text(text / "special", "\x01<|im_start|>user\nhello<|im_end|><s>hello</s>");
  write_text(text / "unicode",
             "\x00\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xFF\xE4\xB8");
  return 0;
}
