// Writes the Hugging Face directory of a GGUF Llama (the tiny test model, or SmolLM2):
// config.json, model.safetensors, tokenizer.json and tokenizer_config.json, made by inverting what
// llama.cpp's converter does, so that tests can check both loaders compute the same thing.
#pragma once

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/llm.h"
#include "llm_safetensors_writer.h"

namespace yirage::llm::testing {

// GGUF tensor names and the Hugging Face names they came from.
inline std::string hf_tensor_name(const std::string& gguf) {
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  const size_t dot = gguf.find('.', 4);  // "blk.N.rest"
  return "model.layers." + gguf.substr(4, dot - 4) + "." + kLayer.at(gguf.substr(dot + 1));
}

// The model's tensors in Hugging Face form: [rows, cols] shapes, F32/F16/BF16 bytes copied as they
// are (other types dequantized to F32), and the rows of each Q and K head put back in rotate-half
// order, undoing llama.cpp's permute (GGUF row 2j + t of a head is Hugging Face row t·hd/2 + j).
inline std::vector<StTensor> hf_tensors_from_gguf(const GgufFile& file) {
  const LlamaConfig c = LlamaConfig::from_gguf(file);
  std::vector<StTensor> out;
  for (const GgufTensor& t : file.tensors()) {
    StTensor s;
    s.name = hf_tensor_name(t.name);
    s.shape.assign(t.dims.rbegin(), t.dims.rend());
    std::vector<std::byte> bytes(t.data.begin(), t.data.end());
    s.dtype = t.type == GgmlType::F16 ? "F16" : t.type == GgmlType::BF16 ? "BF16" : "F32";
    if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16) {
      const std::vector<float> f = file.dequantize(t);
      bytes.resize(f.size() * 4);
      std::memcpy(bytes.data(), f.data(), bytes.size());
    }
    const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
    if (q || k) {
      const size_t rows = static_cast<size_t>(s.shape[0]);
      const size_t row_bytes = bytes.size() / rows;
      const size_t hd = static_cast<size_t>(c.head_dim);
      s.data.resize(bytes.size());
      for (size_t g = 0; g < rows; ++g) {
        const size_t h = g / hd, j = g % hd / 2, bit = g % 2;
        std::memcpy(s.data.data() + (h * hd + bit * hd / 2 + j) * row_bytes,
                    bytes.data() + g * row_bytes, row_bytes);
      }
    } else {
      s.data = std::move(bytes);
    }
    out.push_back(std::move(s));
  }
  return out;
}

inline nlohmann::json hf_config_from_gguf(const GgufFile& file) {
  const LlamaConfig c = LlamaConfig::from_gguf(file);
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.n_ff},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_head_kv},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", c.rms_eps},
      {"rope_theta", c.rope_base},
      {"rope_scaling", nullptr},
      {"vocab_size", c.n_vocab},
      {"max_position_embeddings", c.n_ctx_train},
      {"tie_word_embeddings", c.tied_embeddings},
      {"torch_dtype", "float32"},
  };
  const Tokenizer tok = Tokenizer::from_gguf(file);
  if (tok.bos_id()) j["bos_token_id"] = *tok.bos_id();
  if (tok.eos_id()) j["eos_token_id"] = *tok.eos_id();
  return j;
}

// tokenizer.json for a GGUF byte-level BPE tokenizer: normal tokens in model.vocab, control and
// user-defined ones in added_tokens, the merges, and the pre-tokenizer tokenizer.ggml.pre names.
inline nlohmann::json hf_tokenizer_from_gguf(const GgufFile& file) {
  const Tokenizer tok = Tokenizer::from_gguf(file);
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < tok.vocab_size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    const TokenType type = tok.token_type(id);
    if (type == TokenType::Control || type == TokenType::UserDefined) {
      added.push_back({{"id", id},
                       {"content", tok.token_text(id)},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == TokenType::Control}});
    }
    vocab[tok.token_text(id)] = id;
  }
  const GgufValue& merges = file.get("tokenizer.ggml.merges");
  nlohmann::json merge_list = nlohmann::json::array();
  for (size_t i = 0; i < merges.size(); ++i) merge_list.push_back(merges.string_at(i));
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  nlohmann::json pre = byte_level;
  if (file.get_string("tokenizer.ggml.pre") == "smollm") {
    pre = {{"type", "Sequence"},
           {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

inline nlohmann::json hf_tokenizer_config_from_gguf(const GgufFile& file) {
  const Tokenizer tok = Tokenizer::from_gguf(file);
  nlohmann::json j = {{"add_bos_token", tok.adds_bos()}, {"add_eos_token", tok.adds_eos()}};
  if (tok.bos_id()) j["bos_token"] = tok.token_text(*tok.bos_id());
  if (tok.eos_id()) j["eos_token"] = tok.token_text(*tok.eos_id());
  if (const GgufValue* t = file.find("tokenizer.chat_template"))
    j["chat_template"] = t->as_string();
  return j;
}

// Writes the Hugging Face directory of the GGUF Llama `file` into `dir` (created if needed).
inline void write_hf_dir(const std::filesystem::path& dir, const GgufFile& file) {
  std::filesystem::create_directories(dir);
  write_file(dir / "config.json", hf_config_from_gguf(file).dump(2));
  write_file(dir / "model.safetensors", write_safetensors(hf_tensors_from_gguf(file)));
  write_file(dir / "tokenizer.json", hf_tokenizer_from_gguf(file).dump(2));
  write_file(dir / "tokenizer_config.json", hf_tokenizer_config_from_gguf(file).dump(2));
}

}  // namespace yirage::llm::testing
