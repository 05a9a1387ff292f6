// Writes the seed corpora of the fuzz targets: small well-formed GGUF files from the test writer
// (both tokenizer kinds, every metadata type, tensors of each dequantizable type), a few texts, and
// safetensors files (every dtype, metadata, and the tiny Llama checkpoint safetensors_fuzz.cpp
// maps onto weights) and Hugging Face config.json files.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "llm_gguf_writer.h"
#include "llm_safetensors_writer.h"

namespace {

using yirage::llm::testing::GgufWriter;
using yirage::llm::testing::StTensor;

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

std::vector<std::byte> filled(size_t n) {
  return std::vector<std::byte>(n, std::byte{0x3C});  // 0x3C3C: about 1.06 in F16 and BF16
}

// The tensors of a Llama with hidden size 32, 2 heads of 16 (1 for keys and values), a 32-wide
// MLP, one layer and 16 tokens, with tied embeddings; matrices in `dtype`, norms in F32.
std::vector<StTensor> tiny_checkpoint(const std::string& dtype, size_t element_bytes) {
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return StTensor{name, dtype, {rows, cols}, filled(rows * cols * element_bytes)};
  };
  const std::string b = "model.layers.0.";
  return {matrix("model.embed_tokens.weight", 16, 32),
          {b + "input_layernorm.weight", "F32", {32}, filled(128)},
          {b + "post_attention_layernorm.weight", "F32", {32}, filled(128)},
          matrix(b + "self_attn.q_proj.weight", 32, 32),
          matrix(b + "self_attn.k_proj.weight", 16, 32),
          matrix(b + "self_attn.v_proj.weight", 16, 32),
          matrix(b + "self_attn.o_proj.weight", 32, 32),
          matrix(b + "mlp.gate_proj.weight", 32, 32),
          matrix(b + "mlp.up_proj.weight", 32, 32),
          matrix(b + "mlp.down_proj.weight", 32, 32),
          {"model.norm.weight", "F32", {32}, filled(128)}};
}

void write_safetensors_seeds(const std::filesystem::path& dir) {
  using yirage::llm::testing::write_safetensors;
  std::vector<StTensor> dtypes;
  const std::pair<const char*, size_t> kinds[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8}};
  for (const auto& [dtype, bytes] : kinds)
    dtypes.push_back({dtype, dtype, {2, 3}, filled(6 * bytes)});
  dtypes.push_back({"empty", "F32", {0}, {}});
  write(dir / "dtypes.safetensors", write_safetensors(dtypes, {{"format", "pt"}}));
  write(dir / "tiny_f16.safetensors", write_safetensors(tiny_checkpoint("F16", 2)));
  write(dir / "tiny_bf16.safetensors", write_safetensors(tiny_checkpoint("BF16", 2)));
  write(dir / "tiny_f32.safetensors", write_safetensors(tiny_checkpoint("F32", 4)));
}

// SmolLM2-135M's config.json, and a minimal one relying on Hugging Face's defaults.
void write_hf_config_seeds(const std::filesystem::path& dir) {
  write_text(dir / "smollm2.json",
             R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
  "bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
  "intermediate_size": 1536, "max_position_embeddings": 8192, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
  "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 100000,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 49152})");
  write_text(dir / "minimal.json", R"({"model_type": "llama", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 265})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: gguf_make_seeds GGUF_DIR TEXT_DIR SAFETENSORS_DIR HF_CONFIG_DIR\n");
    return 1;
  }
  const std::filesystem::path gguf = argv[1], text = argv[2], safetensors = argv[3],
                              hf_config = argv[4];
  std::filesystem::create_directories(gguf);
  std::filesystem::create_directories(text);
  std::filesystem::create_directories(safetensors);
  std::filesystem::create_directories(hf_config);
  write_safetensors_seeds(safetensors);
  write_hf_config_seeds(hf_config);

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
