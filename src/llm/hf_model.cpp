#include "llm/hf_model.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "llm/hf_json.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

namespace fs = std::filesystem;
using hf::json;
using hf::JsonObject;
using hf::path_in;

// The bounds model.cpp applies to GGUF metadata, and a vocabulary far above any real model's
// that keeps a hostile vocab_size from sizing the tokenizer's tables.
constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = 1 << 24;

}  // namespace

// ---------------------------------------------------------------------------------------------
// config.json

LlamaConfig llama_config_from_hf(std::string_view json_text, const std::string& source) {
  const json root = hf::parse_json(json_text, source);
  const JsonObject j(root, source);
  const json* architectures = j.find("architectures");
  const bool llama_architecture = architectures != nullptr && architectures->is_array() &&
                                  architectures->size() == 1 &&
                                  (*architectures)[0] == "LlamaForCausalLM";
  const std::optional<std::string> model_type = j.optional_string("model_type");
  if (!llama_architecture && model_type != "llama") {
    j.fail_key(architectures != nullptr ? "architectures" : "model_type",
               "this engine runs LlamaForCausalLM (model_type 'llama') models");
  }
  if (const auto act = j.optional_string("hidden_act"); act && *act != "silu") {
    j.fail_key("hidden_act", fmt::format("'{}' is not supported (silu is)", hf::printable(*act)));
  }
  if (j.find("rope_scaling") != nullptr)
    j.fail_key("rope_scaling", "rope scaling is not supported");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (j.boolean_or(key, false)) j.fail_key(key, "biases are not supported");
  }

  LlamaConfig c;
  c.arch = "llama";
  const auto dim = [&](std::string_view key, int64_t max) {
    return static_cast<int>(j.integer(key, 1, max));
  };
  c.n_layer = dim("num_hidden_layers", kMaxLayers);
  c.n_embd = dim("hidden_size", kMaxDim);
  c.n_ff = dim("intermediate_size", kMaxDim);
  c.n_head = dim("num_attention_heads", kMaxDim);
  // Hugging Face's LlamaConfig defaults: no grouping, a 2048-token context, eps 1e-6.
  c.n_head_kv =
      static_cast<int>(j.optional_integer("num_key_value_heads", 1, kMaxDim).value_or(c.n_head));
  c.n_vocab = dim("vocab_size", kMaxVocab);
  c.n_ctx_train =
      static_cast<int>(j.optional_integer("max_position_embeddings", 1, 1 << 24).value_or(2048));
  c.rms_eps = static_cast<float>(j.number_or("rms_norm_eps", 1e-6));
  c.rope_base = static_cast<float>(j.number_or("rope_theta", 10000.0));
  c.tied_embeddings = j.boolean_or("tie_word_embeddings", false);
  if (c.n_embd % c.n_head != 0) {
    j.fail_key("hidden_size",
               fmt::format("{} is not a multiple of num_attention_heads {}", c.n_embd, c.n_head));
  }
  if (c.n_head % c.n_head_kv != 0) {
    j.fail_key("num_attention_heads", fmt::format("{} is not a multiple of num_key_value_heads {}",
                                                  c.n_head, c.n_head_kv));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (const auto head_dim = j.optional_integer("head_dim", 1, kMaxDim);
      head_dim && *head_dim != c.head_dim) {
    j.fail_key("head_dim", fmt::format("{} differs from hidden_size / num_attention_heads = {}, "
                                       "which is not supported",
                                       *head_dim, c.head_dim));
  }
  if (c.head_dim % 2 != 0) j.fail_key("hidden_size", "the head size must be even for RoPE");
  c.rope_dim = c.head_dim;  // Llama rotates whole heads
  if (!(c.rope_base > 0)) j.fail_key("rope_theta", "must be positive");
  if (!(c.rms_eps >= 0)) j.fail_key("rms_norm_eps", "must not be negative");
  return c;
}

// ---------------------------------------------------------------------------------------------
// Checkpoint.

HfCheckpoint HfCheckpoint::open(const std::string& dir) {
  const std::string single = path_in(dir, "model.safetensors");
  const std::string index_path = path_in(dir, "model.safetensors.index.json");
  if (fs::exists(single)) {
    std::vector<SafetensorsFile> files;
    files.push_back(SafetensorsFile::open(single));
    HfCheckpoint c = from_files(std::move(files));
    c.source_ = dir;
    return c;
  }
  if (!fs::exists(index_path)) {
    fail("{}: no model.safetensors or model.safetensors.index.json in the directory", dir);
  }
  const json root = hf::read_json_file(index_path);
  const JsonObject index(root, index_path);
  const JsonObject weight_map = index.object("weight_map");
  // Each shard once, in name order; every mapped tensor must be in the shard named for it.
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, shard] : weight_map.value().items()) {
    if (!shard.is_string()) weight_map.fail_key(tensor, "expected a shard file name");
    const std::string& name = shard.get_ref<const std::string&>();
    // Shards live next to the index; a path could point anywhere.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      weight_map.fail_key(tensor, fmt::format("'{}' is not a file name in the directory", name));
    }
    shards[name].push_back(tensor);
  }
  std::vector<SafetensorsFile> files;
  for (const auto& [name, tensors] : shards) {
    files.push_back(SafetensorsFile::open(path_in(dir, name)));
    for (const std::string& tensor : tensors) {
      if (files.back().find_tensor(tensor) == nullptr) {
        fail("{}: weight_map.{}: shard {} has no such tensor", index_path, hf::printable(tensor),
             hf::printable(name));
      }
    }
  }
  HfCheckpoint c = from_files(std::move(files));
  c.source_ = dir;
  return c;
}

HfCheckpoint HfCheckpoint::from_files(std::vector<SafetensorsFile> files) {
  HfCheckpoint c;
  c.files_ = std::move(files);
  if (!c.files_.empty()) c.source_ = c.files_.front().source();
  for (size_t i = 0; i < c.files_.size(); ++i) {
    for (const SafetensorsTensor& t : c.files_[i].tensors()) {
      const auto [it, inserted] = c.file_of_.emplace(t.name, i);
      if (!inserted) {
        fail("{}: tensor '{}' is also in {}", c.files_[i].source(), hf::printable(t.name),
             c.files_[it->second].source());
      }
    }
  }
  return c;
}

std::optional<HfCheckpoint::Found> HfCheckpoint::find(std::string_view name) const {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) return std::nullopt;
  const SafetensorsFile& file = files_[it->second];
  return Found{&file, file.find_tensor(name)};
}

HfCheckpoint::Found HfCheckpoint::get(std::string_view name) const {
  const std::optional<Found> found = find(name);
  if (!found) fail("{}: no tensor named '{}'", source_, name);
  return *found;
}

// ---------------------------------------------------------------------------------------------
// Weights.

namespace {

class WeightLoader {
 public:
  WeightLoader(const HfCheckpoint& checkpoint, LlamaWeights& weights)
      : checkpoint_(checkpoint), weights_(weights) {}

  // A [rows, cols] matrix (Hugging Face's [out_features, in_features], rows contiguous, which is
  // the engine's layout too). With `heads` > 0 the rows of each of `heads` heads are reordered
  // from rotate-half order (the first half of a head's dimensions pairs with the second half) to
  // interleaved pairs: engine row 2j + t of a head is checkpoint row t·(head_dim/2) + j.
  Linear matrix(const std::string& name, int rows, int cols, int heads = 0) {
    const auto [file, t] = checkpoint_.get(name);
    if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols) {
      fail("{}: tensor '{}' has shape [{}], expected [{}, {}]", file->source(), name,
           fmt::join(t->shape, ", "), rows, cols);
    }
    if (cols % 32 != 0) {
      fail("{}: tensor '{}' has rows of {} elements, not a multiple of 32", file->source(), name,
           cols);
    }
    if (t->dtype != SafetensorsDtype::F32 && t->dtype != SafetensorsDtype::F16 &&
        t->dtype != SafetensorsDtype::BF16) {
      fail("{}: tensor '{}' has dtype {}; weights must be F32, F16 or BF16", file->source(), name,
           safetensors_dtype_name(t->dtype));
    }
    Linear l;
    l.name = name;
    l.type = t->dtype == SafetensorsDtype::F16    ? GgmlType::F16
             : t->dtype == SafetensorsDtype::BF16 ? GgmlType::BF16
                                                  : GgmlType::F32;
    l.rows = rows;
    l.cols = cols;
    const size_t element_bytes = safetensors_dtype_size(t->dtype);
    l.row_bytes = static_cast<size_t>(cols) * element_bytes;
    // The kernels read the rows in place, which needs their natural alignment; safetensors packs
    // tensors without padding, so an odd-sized 16-bit tensor can misalign the next one.
    const auto address = reinterpret_cast<uintptr_t>(t->data.data());
    if (heads == 0 && address % element_bytes == 0) {
      l.data = t->data.data();
      return l;
    }
    std::vector<std::byte>& out = weights_.owned.emplace_back(l.row_bytes * rows);
    const int head_dim = heads > 0 ? rows / heads : 0;
    for (int r = 0; r < rows; ++r) {
      int source_row = r;
      if (heads > 0) {
        const int h = r / head_dim, within = r % head_dim;
        source_row = h * head_dim + (within % 2) * (head_dim / 2) + within / 2;
      }
      std::memcpy(out.data() + static_cast<size_t>(r) * l.row_bytes,
                  t->data.data() + static_cast<size_t>(source_row) * l.row_bytes, l.row_bytes);
    }
    l.data = out.data();
    return l;
  }

  std::vector<float> vector(const std::string& name, int size) {
    const auto [file, t] = checkpoint_.get(name);
    if (t->shape.size() != 1 || t->shape[0] != size) {
      fail("{}: tensor '{}' has shape [{}], expected [{}]", file->source(), name,
           fmt::join(t->shape, ", "), size);
    }
    return file->to_f32(*t);
  }

 private:
  const HfCheckpoint& checkpoint_;
  LlamaWeights& weights_;
};

}  // namespace

LlamaWeights llama_weights_from_hf(const HfCheckpoint& checkpoint, const LlamaConfig& c) {
  LlamaWeights w;
  WeightLoader load(checkpoint, w);
  w.token_embd = load.matrix("model.embed_tokens.weight", c.n_vocab, c.n_embd);
  const int q_dim = c.n_head * c.head_dim;
  const int kv_dim = c.n_head_kv * c.head_dim;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("model.layers.{}.", l);
    LayerWeights lw;
    lw.attn_norm = load.vector(b + "input_layernorm.weight", c.n_embd);
    lw.ffn_norm = load.vector(b + "post_attention_layernorm.weight", c.n_embd);
    lw.wq = load.matrix(b + "self_attn.q_proj.weight", q_dim, c.n_embd, c.n_head);
    lw.wk = load.matrix(b + "self_attn.k_proj.weight", kv_dim, c.n_embd, c.n_head_kv);
    lw.wv = load.matrix(b + "self_attn.v_proj.weight", kv_dim, c.n_embd);
    lw.wo = load.matrix(b + "self_attn.o_proj.weight", c.n_embd, q_dim);
    lw.gate = load.matrix(b + "mlp.gate_proj.weight", c.n_ff, c.n_embd);
    lw.up = load.matrix(b + "mlp.up_proj.weight", c.n_ff, c.n_embd);
    lw.down = load.matrix(b + "mlp.down_proj.weight", c.n_embd, c.n_ff);
    w.layers.push_back(std::move(lw));
  }
  w.output_norm = load.vector("model.norm.weight", c.n_embd);
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else if (checkpoint.find("lm_head.weight")) {
    w.output = load.matrix("lm_head.weight", c.n_vocab, c.n_embd);
  } else {
    fail("{}: no tensor 'lm_head.weight', and config.json does not set tie_word_embeddings",
         checkpoint.source());
  }
  return w;
}

// ---------------------------------------------------------------------------------------------
// Directory.

HfModelDir HfModelDir::open(const std::string& dir) {
  const std::string config_path = path_in(dir, "config.json");
  if (!fs::exists(config_path)) fail("{}: no config.json in the model directory", dir);
  HfModelDir d;
  d.dir_ = dir;
  d.config_ = llama_config_from_hf(hf::read_text_file(config_path), config_path);
  d.checkpoint_ = HfCheckpoint::open(dir);
  return d;
}

Tokenizer HfModelDir::tokenizer() const {
  if (!fs::exists(path_in(dir_, "tokenizer.json"))) {
    fail(
        "{}: no tokenizer.json: a Hugging Face model directory needs one (only byte-level BPE "
        "tokenizers are supported)",
        dir_);
  }
  return Tokenizer::from_hf(dir_, static_cast<size_t>(config_.n_vocab));
}

std::optional<ChatTemplate> HfModelDir::chat_template() const {
  const std::string path = path_in(dir_, "tokenizer_config.json");
  if (!fs::exists(path)) return std::nullopt;
  const json root = hf::read_json_file(path);
  const std::optional<std::string> source = JsonObject(root, path).optional_string("chat_template");
  if (!source) return std::nullopt;
  return ChatTemplate::detect(*source);
}

}  // namespace yirage::llm
