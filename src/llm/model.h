// The Llama-family model: configuration from GGUF metadata (or a Hugging Face config.json, see
// hf_model.h), weights borrowed from the mapped file in their stored encoding, a KV cache, and
// the forward pass.
//
// The forward pass is a sequence of hot blocks behind `HotBlocks`: RMSNorm + QKV projections,
// attention (RoPE, KV cache, softmax), then its output projection and residual with the gated MLP
// (RMSNorm, SwiGLU, down projection, residual), and the final norm + LM head. `CpuBlocks` runs them
// with the quantized kernels of kernels.h on a thread pool; `FusedBlocks` (fused_blocks.h) runs
// every block but attention as kernel graphs optimized by the superoptimizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "llm/gguf.h"
#include "llm/kernels.h"
#include "llm/paged_kv.h"
#include "llm/thread_pool.h"
#include "llm/tokenizer.h"

namespace yirage::backend {
class Backend;  // backend/backend.h
}

namespace yirage::llm {

struct LlamaConfig {
  std::string arch;  // general.architecture
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // n_embd / n_head
  int rope_dim = 0;  // dimensions rotated per head (rope.dimension_count, default head_dim)
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the LM head is token_embd

  // Reads <arch>.* keys and checks them against each other and against the tensor shapes;
  // errors name the file and the key or tensor.
  static LlamaConfig from_gguf(const GgufFile& file);
};

// A weight matrix of `rows` output features × `cols` inputs, kept in its GGUF encoding.
struct Linear {
  std::string name;
  GgmlType type = GgmlType::F32;
  int rows = 0;
  int cols = 0;
  const std::byte* data = nullptr;
  size_t row_bytes = 0;
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  Linear wq, wk, wv, wo, gate, up, down;
};

struct LlamaWeights {
  Linear token_embd;  // rows are tokens
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;
  Linear output;  // token_embd when tied
  // Matrices the loader had to rewrite (safetensors: BF16 widened to F32, Q and K rows reordered,
  // tensors too misaligned to read in place) live here; every other Linear borrows from the
  // mapped file.
  std::vector<std::vector<std::byte>> owned;

  // Borrows tensors from `file`, which must outlive the result; checks every shape and type.
  static LlamaWeights from_gguf(const GgufFile& file, const LlamaConfig& config);
};

// Keys and values per layer, f32 rows of n_head_kv · head_dim. Values are rounded through f16 when
// stored, which is what llama.cpp's default f16 cache holds.
struct KvCache {
  KvCache(const LlamaConfig& config, int capacity);
  float* k(int layer, int pos) { return data(0, layer, pos); }
  float* v(int layer, int pos) { return data(1, layer, pos); }
  int capacity = 0;
  int row = 0;  // floats per position

 private:
  float* data(int which, int layer, int pos);
  int n_layer_ = 0;
  std::unique_ptr<float[]> storage_;  // left uninitialised: pages are touched as positions fill
};

// One sequence's rows in a batched step: `rows` consecutive rows of the batch at positions pos0..,
// its keys and values in a PagedKvCache through the block table `blocks`.
struct SequenceRows {
  const int32_t* blocks = nullptr;
  int pos0 = 0;
  int rows = 0;
};

// The KV cache that a step's block tables index: `blocks` blocks of `block_rows` positions, a
// sequence holding up to `max_blocks` of them. `owner` tells caches apart (the model's own, a
// server's PagedKvCache).
struct KvLayout {
  const void* owner = nullptr;
  int blocks = 0;
  int block_rows = 0;
  int max_blocks = 0;
};

// One hot block's launches and the time they took (ModelOptions::time_blocks): "rmsnorm+qkv, 64
// rows", "rope + paged attention, 1 rows, 512 KV blocks", ...
struct BlockTime {
  std::string block;
  uint64_t launches = 0;
  double seconds = 0;
};

class HotBlocks {
 public:
  virtual ~HotBlocks() = default;
  // Optional: each block's launches and time so far, where the blocks were asked to time them.
  virtual std::vector<BlockTime> block_times() const { return {}; }
  // Optional: every decoder layer of a step in one call, for blocks that keep the keys and values
  // themselves, in a pool of their backend's with the blocks of `layout` (the host's cache then
  // holds none of them): x[rows][n_embd] in, the last layer's output out. False where the blocks
  // do not; the model then runs the three calls below layer by layer.
  virtual bool decoder_layers(std::span<const SequenceRows> sequences, int rows,
                              const KvLayout& layout, float* x) {
    (void)sequences, (void)rows, (void)layout, (void)x;
    return false;
  }
  // Optional: makes ready what decoder_layers needs for `layout` (pools, graphs), with lines
  // saying what is optimized; otherwise its first step does, silently.
  virtual void prepare_kv(const KvLayout& layout,
                          const std::function<void(const std::string&)>& progress) {
    (void)layout, (void)progress;
  }
  // q[n][n_head·hd], k/v[n][n_head_kv·hd] = RMSNorm(x)·Wq/Wk/Wv for n rows of x[n][n_embd].
  virtual void norm_qkv(int layer, const float* x, int n, float* q, float* k, float* v) = 0;
  // RoPE on q and k at positions pos0.., k and v appended to the cache, and causal attention
  // over positions 0..pos into out[n][n_head·hd]. q is overwritten.
  virtual void attention(int layer, int pos0, int n, float* q, float* k, float* v, KvCache& cache,
                         float* out) = 0;
  // The same for a batched step: the rows of `sequences`, one after another, each attending to
  // its own sequence's positions through its block table in `cache`.
  virtual void paged_attention(int layer, std::span<const SequenceRows> sequences, float* q,
                               float* k, float* v, PagedKvCache& cache, float* out) = 0;
  // The rest of the layer: x += attention · Woᵀ for n rows of attention[n][n_head·hd], then the
  // gated MLP, x += down(silu(gate(RMSNorm(x))) ⊙ up(RMSNorm(x))).
  virtual void output_and_mlp(int layer, const float* attention, int n, float* x) = 0;
  // logits[n_vocab] = RMSNorm(x)·outputᵀ for one row x.
  virtual void final_norm_lm_head(const float* x, float* logits) = 0;
  // logits[n][n_vocab] for n rows of x, the LM head's weights read once for all of them.
  virtual void final_norm_lm_head_rows(const float* x, int n, float* logits) = 0;
};

// One sequence's part of a batched step (LlamaModel::forward_batch).
struct BatchEntry {
  std::span<const TokenId> tokens;  // appended at positions pos0, pos0 + 1, ...
  int pos0 = 0;                     // positions the sequence's cache already holds
  // The sequence's block table in the PagedKvCache, covering pos0 + tokens.size() positions.
  std::span<const int32_t> blocks;
  bool logits = true;  // whether the logits after its last token are wanted
};

struct ModelOptions {
  int threads = 2;
  int context_length = 0;  // 0: the training context, capped at 4096
  // Bytes the model may take: its weights and KV cache must fit, or loading it is an error with
  // the numbers. 0: the memory available now (support/system_memory.h).
  uint64_t memory_budget_bytes = 0;
  // Run RMSNorm + QKV, the gated MLP and the LM head as superoptimized kernel graphs
  // (fused_blocks.h) on `backend` where the model's weight types allow; else, or when false or
  // without a backend, every block runs on the hand-written kernels on the host. A backend whose
  // buffers the host cannot address (a GPU) runs the graphs or refuses the model with the reason.
  bool fused_blocks = true;
  backend::Backend* backend = nullptr;  // must outlive the model
  // With fused blocks: RoPE, the KV cache and attention as a kernel graph on the backend too, the
  // cache in a pool of its own (HotBlocks::decoder_layers). Unset: where the backend's buffers
  // are not host memory (a GPU), so that a step does not go to the host and back every layer.
  std::optional<bool> attention_on_backend = {};
  double search_seconds = 2;  // per block graph, the first time on this device
  // Add up each hot block's launches and time (LlamaModel::block_times), fused or hand-written;
  // fused blocks wait for their backend before and after every launch. It serializes the host with
  // the device, so a step takes longer; it says where a step's time goes.
  bool time_blocks = false;
  std::function<void(const std::string&)> progress = {};  // optimization progress; may be empty
  std::function<void(const std::string&)> detail = {};    // the tuning pipeline's lines
};

class LlamaModel {
 public:
  // `file` must outlive the model.
  LlamaModel(const GgufFile& file, const ModelOptions& options);
  // From weights loaded by any reader (GGUF, safetensors); what they borrow must outlive the
  // model.
  LlamaModel(LlamaConfig config, LlamaWeights weights, const ModelOptions& options);
  ~LlamaModel();

  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  int context_length() const { return cache_.capacity; }
  int position() const { return position_; }  // tokens in the KV cache
  const KernelTable& kernels() const { return *kernels_; }
  int threads() const { return pool_.size(); }
  // Where the hot blocks run: "fused kernel graphs on the cpu backend" (the backend's name), or
  // the hand-written kernels and why.
  std::string hot_path() const;
  // Each hot block's launches and time so far (ModelOptions::time_blocks); empty otherwise.
  // Safe to call from another thread than the one stepping the model.
  std::vector<BlockTime> block_times() const;

  // Appends `tokens` to the sequence and returns the logits after the last one (n_vocab floats,
  // valid until the next call). With `all_logits` (tests) every position's logits are computed:
  // row i of all_logits_rows().
  std::span<const float> forward(std::span<const TokenId> tokens, bool all_logits = false);
  const std::vector<float>& all_logits_rows() const { return all_logits_; }
  // Forgets positions from `position` on (0 empties the cache).
  void truncate(int position);
  // The tokens' rows of the embedding, dequantized into x[tokens.size()][n_embd]: the first
  // layer's input, as forward() computes it.
  void embed(std::span<const TokenId> tokens, float* x) const;

  // One step over several sequences whose keys and values live in `cache`: every entry's tokens
  // go through the matmuls together, as rows of one activation matrix, so the weights are read
  // once per step; attention reads each sequence's own blocks. Returns the logits of the entries
  // with `logits` set, in order, n_vocab floats each (valid until the next call). Each row's result
  // does not depend on the other rows of the step. Leaves this model's own cache untouched.
  std::span<const float> forward_batch(std::span<const BatchEntry> entries, PagedKvCache& cache);
  // Where the blocks keep the keys and values on their backend: makes the pools and graphs for
  // `cache` now (a server's startup), with `progress` lines, rather than at its first step.
  void prepare_batch_cache(const PagedKvCache& cache,
                           const std::function<void(const std::string&)>& progress);

 private:
  LlamaConfig config_;
  LlamaWeights weights_;
  std::string unfused_why_;  // empty when the hot blocks run as fused kernel graphs
  bool attention_on_backend_;
  std::string hot_path_;
  ThreadPool pool_;
  const KernelTable* kernels_;
  KvCache cache_;
  std::unique_ptr<HotBlocks> blocks_;
  LlamaModel(const LlamaConfig& config, const GgufFile& file, const ModelOptions& options);

  // cache_ as the blocks of one sequence, for blocks that keep the keys and values themselves.
  KvLayout own_layout() const;
  KvLayout layout_of(const PagedKvCache& cache) const;
  std::vector<int32_t> own_blocks_;
  int position_ = 0;
  std::vector<float> x_, q_, k_, v_, attn_, logits_, all_logits_;
  // forward_batch's: per sequence, and the rows whose logits are wanted.
  std::vector<SequenceRows> batch_sequences_;
  std::vector<float> batch_last_x_, batch_logits_;
  void check_batch(std::span<const BatchEntry> entries, const PagedKvCache& cache) const;
};

}  // namespace yirage::llm
