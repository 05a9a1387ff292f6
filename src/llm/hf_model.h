// Llama-family models in the Hugging Face layout: a directory holding config.json
// (LlamaForCausalLM), the weights in model.safetensors or in the shards that
// model.safetensors.index.json lists, and the tokenizer in tokenizer.json (with
// tokenizer_config.json for its special tokens and chat template).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llm/chat.h"
#include "llm/model.h"
#include "llm/safetensors.h"
#include "llm/tokenizer.h"

namespace yirage::llm {

// Reads the text of a LlamaForCausalLM config.json and checks it; errors name `source` and the
// key. Only what the engine computes is accepted: no rope scaling, no biases, SiLU, and a head
// size of hidden_size / num_attention_heads.
LlamaConfig llama_config_from_hf(std::string_view json_text, const std::string& source);

// The safetensors files of one checkpoint, with tensors looked up by name across shards.
class HfCheckpoint {
 public:
  // `dir`/model.safetensors, else the shards `dir`/model.safetensors.index.json maps tensors to.
  static HfCheckpoint open(const std::string& dir);
  // Already opened files (tests); a name found in several is an error.
  static HfCheckpoint from_files(std::vector<SafetensorsFile> files);

  struct Found {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  std::optional<Found> find(std::string_view name) const;
  Found get(std::string_view name) const;  // fails naming the tensor when missing
  const std::string& source() const { return source_; }

 private:
  std::string source_;  // the directory, or the one file, for messages
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string_view, size_t> file_of_;  // tensor name → index in files_
};

// Maps Hugging Face tensor names (model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight,
// ...) to the engine's weights, checking every shape and dtype. F32, F16 and BF16 matrices are
// borrowed from the mapping as they are (a GPU backend reads 16-bit weights without widening). The
// rows of q_proj and k_proj are reordered within each head from Hugging Face's rotate-half RoPE
// layout to the interleaved pairs the engine rotates, as llama.cpp's converter does, so that the
// model computes the same function.
LlamaWeights llama_weights_from_hf(const HfCheckpoint& checkpoint, const LlamaConfig& config);

// A Hugging Face model directory, opened and validated.
class HfModelDir {
 public:
  static HfModelDir open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const LlamaConfig& config() const { return config_; }
  const HfCheckpoint& checkpoint() const { return checkpoint_; }
  // Borrows from the checkpoint, so this directory must outlive the result.
  LlamaWeights weights() const { return llama_weights_from_hf(checkpoint_, config_); }
  // From tokenizer.json; fails saying so when the directory has none.
  Tokenizer tokenizer() const;
  // tokenizer_config.json's chat_template, when there is one.
  std::optional<ChatTemplate> chat_template() const;

 private:
  std::string dir_;
  LlamaConfig config_;
  HfCheckpoint checkpoint_;
};

}  // namespace yirage::llm
