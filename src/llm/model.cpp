#include "llm/model.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "llm/block_timer.h"
#include "llm/cpu_blocks.h"
#include "llm/fused_blocks.h"
#include "support/error.h"
#include "support/system_memory.h"

namespace yirage::llm {
namespace {

// Bounds that keep every size computation far from overflow; real models are well inside them.
constexpr uint32_t kMaxDim = 1 << 20;
constexpr uint32_t kMaxLayers = 4096;

int checked_dim(const GgufFile& file, const std::string& key, uint32_t value, uint32_t max) {
  if (value == 0 || value > max)
    fail("{}: {} = {} is out of range (1 to {})", file.source(), key, value, max);
  return static_cast<int>(value);
}

Linear linear(const GgufFile& file, const std::string& name, int rows, int cols) {
  const GgufTensor& t = file.tensor(name);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
    fail("{}: tensor {} has shape [{}], expected [{}, {}] (ggml order)", file.source(), name,
         fmt::join(t.dims, ", "), cols, rows);
  activation_kind(t.type, fmt::format("{}: tensor {}", file.source(), name));
  const GgmlTypeTraits& traits = ggml_type_traits(t.type);
  if (cols % 32 != 0 || cols % static_cast<int>(traits.block_size) != 0)
    fail("{}: tensor {} has rows of {} elements, not a multiple of 32", file.source(), name, cols);
  Linear l;
  l.name = name;
  l.type = t.type;
  l.rows = rows;
  l.cols = cols;
  l.data = t.data.data();
  l.row_bytes = static_cast<size_t>(cols) / traits.block_size * traits.bytes_per_block;
  if (l.row_bytes * static_cast<size_t>(rows) != t.data.size())
    fail("{}: tensor {} holds {} bytes, expected {}", file.source(), name, t.data.size(),
         l.row_bytes * static_cast<size_t>(rows));
  return l;
}

std::vector<float> vector(const GgufFile& file, const std::string& name, int size) {
  const GgufTensor& t = file.tensor(name);
  if (t.dims.size() != 1 || t.dims[0] != size)
    fail("{}: tensor {} has shape [{}], expected [{}]", file.source(), name,
         fmt::join(t.dims, ", "), size);
  return file.dequantize(t);
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& file) {
  LlamaConfig c;
  c.arch = std::string(file.get_string("general.architecture"));
  if (c.arch != "llama")
    fail("{}: general.architecture is '{}'; this engine runs 'llama' models", file.source(),
         c.arch);
  const std::string p = c.arch + ".";
  auto dim = [&](const std::string& key, uint32_t max) {
    return checked_dim(file, p + key, file.get_u32(p + key), max);
  };
  c.n_layer = dim("block_count", kMaxLayers);
  c.n_embd = dim("embedding_length", kMaxDim);
  c.n_ff = dim("feed_forward_length", kMaxDim);
  c.n_head = dim("attention.head_count", kMaxDim);
  c.n_head_kv = checked_dim(file, p + "attention.head_count_kv",
                            file.get_u32_or(p + "attention.head_count_kv", c.n_head), kMaxDim);
  c.n_ctx_train = dim("context_length", 1u << 24);
  if (c.n_embd % c.n_head != 0)
    fail("{}: {}embedding_length {} is not a multiple of {}attention.head_count {}", file.source(),
         p, c.n_embd, p, c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: {}attention.head_count {} is not a multiple of {}attention.head_count_kv {}",
         file.source(), p, c.n_head, p, c.n_head_kv);
  c.head_dim = c.n_embd / c.n_head;
  c.rope_dim = checked_dim(file, p + "rope.dimension_count",
                           file.get_u32_or(p + "rope.dimension_count", c.head_dim), kMaxDim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail("{}: {}rope.dimension_count {} must be even and at most the head size {}", file.source(),
         p, c.rope_dim, c.head_dim);
  if (const GgufValue* v = file.find(p + "rope.freq_base")) c.rope_base = v->as_f64();
  if (const GgufValue* v = file.find(p + "attention.layer_norm_rms_epsilon"))
    c.rms_eps = v->as_f64();
  if (!(c.rope_base > 0) || !(c.rms_eps >= 0))
    fail("{}: rope.freq_base {} / layer_norm_rms_epsilon {} out of range", file.source(),
         c.rope_base, c.rms_eps);
  if (const GgufValue* v = file.find(p + "rope.scaling.type");
      v != nullptr && v->as_string() != "none")
    fail("{}: {}rope.scaling.type '{}' is not supported", file.source(), p, v->as_string());
  if (file.find_tensor("rope_freqs.weight") != nullptr)
    fail("{}: tensor rope_freqs.weight (Llama 3 rope scaling) is not supported", file.source());
  const GgufTensor& embd = file.tensor("token_embd.weight");
  if (embd.dims.size() != 2 || embd.dims[0] != c.n_embd || embd.dims[1] < 1 ||
      embd.dims[1] > std::numeric_limits<int32_t>::max())
    fail("{}: tensor token_embd.weight has shape [{}], expected [{}, n_vocab]", file.source(),
         fmt::join(embd.dims, ", "), c.n_embd);
  c.n_vocab = static_cast<int>(embd.dims[1]);
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  return c;
}

LlamaWeights LlamaWeights::from_gguf(const GgufFile& file, const LlamaConfig& c) {
  LlamaWeights w;
  w.token_embd = linear(file, "token_embd.weight", c.n_vocab, c.n_embd);
  if (!ggml_type_traits(w.token_embd.type).dequantizable)
    fail("{}: tensor token_embd.weight has type {}, which cannot be decoded", file.source(),
         ggml_type_name(w.token_embd.type));
  const int q_dim = c.n_head * c.head_dim;
  const int kv_dim = c.n_head_kv * c.head_dim;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    LayerWeights lw;
    lw.attn_norm = vector(file, b + "attn_norm.weight", c.n_embd);
    lw.ffn_norm = vector(file, b + "ffn_norm.weight", c.n_embd);
    lw.wq = linear(file, b + "attn_q.weight", q_dim, c.n_embd);
    lw.wk = linear(file, b + "attn_k.weight", kv_dim, c.n_embd);
    lw.wv = linear(file, b + "attn_v.weight", kv_dim, c.n_embd);
    lw.wo = linear(file, b + "attn_output.weight", c.n_embd, q_dim);
    lw.gate = linear(file, b + "ffn_gate.weight", c.n_ff, c.n_embd);
    lw.up = linear(file, b + "ffn_up.weight", c.n_ff, c.n_embd);
    lw.down = linear(file, b + "ffn_down.weight", c.n_embd, c.n_ff);
    w.layers.push_back(std::move(lw));
  }
  w.output_norm = vector(file, "output_norm.weight", c.n_embd);
  w.output = c.tied_embeddings ? w.token_embd : linear(file, "output.weight", c.n_vocab, c.n_embd);
  return w;
}

KvCache::KvCache(const LlamaConfig& config, int capacity_)
    : capacity(capacity_), row(config.n_head_kv * config.head_dim), n_layer_(config.n_layer) {
  const size_t floats = size_t{2} * n_layer_ * static_cast<size_t>(capacity) * row;
  storage_.reset(new float[floats]);
}

float* KvCache::data(int which, int layer, int pos) {
  return storage_.get() + ((static_cast<size_t>(which) * n_layer_ + layer) * capacity + pos) * row;
}

namespace {

// Why the hot blocks cannot run as fused kernel graphs, or empty when they can. The hand-written
// kernels run on the host: a backend whose buffers the host cannot address, asked for by name,
// is never left for them silently.
std::string unfused_reason(const ModelOptions& options, const LlamaConfig& config,
                           const LlamaWeights& weights) {
  std::string why = options.fused_blocks
                        ? fused_blocks_unsupported(config, weights, options.backend)
                        : std::string("fused blocks turned off");
  if (!why.empty() && options.backend && !options.backend->buffer_type().host_visible)
    fail("the model cannot run on backend '{}': only the block graphs run there, and {}",
         options.backend->name(), why);
  return why;
}

// Where the hot blocks run, for LlamaModel::hot_path.
std::string hot_path_of(const ModelOptions& options, const std::string& unfused_why,
                        bool attention_on_backend) {
  if (!unfused_why.empty()) return "hand-written kernels (" + unfused_why + ")";
  const backend::Backend& b = *options.backend;
  // Where the backend's buffers are host memory, attention on the host is no round trip.
  const char* attention = attention_on_backend           ? ", attention on the backend"
                          : b.buffer_type().host_visible ? ""
                                                         : ", attention on the host";
  return fmt::format("fused kernel graphs on the {} backend{}", b.name(), attention);
}

// Whether RoPE, the KV cache and attention run on the backend too (ModelOptions).
bool attention_on_backend(const ModelOptions& options, const LlamaConfig& config,
                          const std::string& unfused_why) {
  if (!unfused_why.empty()) return false;
  const bool wanted =
      options.attention_on_backend.value_or(!options.backend->buffer_type().host_visible);
  return wanted && backend_attention_unsupported(config).empty();
}

uint64_t linear_bytes(const Linear& l) {
  return uint64_t(l.rows) * l.row_bytes;
}

// What the weights occupy in memory: mapped from the file or owned, they are read every token.
uint64_t weight_bytes(const LlamaWeights& w) {
  uint64_t bytes = linear_bytes(w.token_embd) + w.output_norm.size() * sizeof(float);
  if (w.output.data != w.token_embd.data) bytes += linear_bytes(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down})
      bytes += linear_bytes(*m);
    bytes += (l.attn_norm.size() + l.ffn_norm.size()) * sizeof(float);
  }
  return bytes;
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.3g} GiB", double(bytes) / double(1 << 30));
}

// The KV cache's capacity in tokens, once the weights and the cache are known to fit the budget:
// refusing here, before the cache is allocated, is what keeps a model too large for the machine
// from being killed by the OOM killer half-way through loading.
int checked_capacity(const LlamaConfig& c, const LlamaWeights& w, const ModelOptions& options) {
  if (options.context_length < 0 || options.context_length > (1 << 24))
    fail("context length {} is out of range", options.context_length);
  const int capacity =
      options.context_length > 0 ? options.context_length : std::min(c.n_ctx_train, 4096);
  const uint64_t weights = weight_bytes(w);
  const uint64_t kv = uint64_t(2) * uint64_t(c.n_layer) * uint64_t(capacity) *
                      uint64_t(c.n_head_kv) * uint64_t(c.head_dim) * sizeof(float);
  const std::optional<uint64_t> budget = options.memory_budget_bytes > 0
                                             ? std::optional(options.memory_budget_bytes)
                                             : available_memory_bytes();
  if (budget && weights + kv > *budget)
    fail(
        "the model needs {} ({} bytes: {} of weights, {} of KV cache for {} tokens), more than "
        "the {} ({} bytes) {}; a shorter context length shrinks the KV cache",
        gib(weights + kv), weights + kv, gib(weights), gib(kv), capacity, gib(*budget), *budget,
        options.memory_budget_bytes > 0 ? "of its memory budget" : "of memory available");
  return capacity;
}

}  // namespace

LlamaModel::LlamaModel(const GgufFile& file, const ModelOptions& options)
    : LlamaModel(LlamaConfig::from_gguf(file), file, options) {}

LlamaModel::LlamaModel(const LlamaConfig& config, const GgufFile& file, const ModelOptions& options)
    : LlamaModel(config, LlamaWeights::from_gguf(file, config), options) {}

LlamaModel::LlamaModel(LlamaConfig config, LlamaWeights weights, const ModelOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      unfused_why_(unfused_reason(options, config_, weights_)),
      attention_on_backend_(attention_on_backend(options, config_, unfused_why_)),
      hot_path_(hot_path_of(options, unfused_why_, attention_on_backend_)),
      pool_(options.threads,
            unfused_why_.empty() ? ThreadPool::Workers::openmp : ThreadPool::Workers::own),
      kernels_(&best_kernels()),
      cache_(config_, checked_capacity(config_, weights_, options)) {
  blocks_ = make_cpu_blocks(config_, weights_, cache_.capacity, pool_, *kernels_);
  if (options.time_blocks && !unfused_why_.empty()) blocks_ = timed_blocks(std::move(blocks_));
  if (unfused_why_.empty())
    blocks_ = make_fused_blocks(config_, weights_, std::move(blocks_),
                                {options.backend,
                                 options.search_seconds,
                                 options.progress,
                                 options.detail,
                                 attention_on_backend_,
                                 {own_layout()},
                                 options.time_blocks});
  logits_.resize(static_cast<size_t>(config_.n_vocab));
  // The model's own cache as a block table: one sequence whose blocks are 0, 1, 2, ...
  const KvLayout own = own_layout();
  own_blocks_.resize(static_cast<size_t>(own.blocks));
  for (int b = 0; b < own.blocks; ++b) own_blocks_[size_t(b)] = b;
}

LlamaModel::~LlamaModel() = default;

std::vector<BlockTime> LlamaModel::block_times() const {
  return blocks_->block_times();
}

std::string LlamaModel::hot_path() const {
  return hot_path_;
}

KvLayout LlamaModel::own_layout() const {
  constexpr int kBlockRows = 16;
  const int blocks = (cache_.capacity + kBlockRows - 1) / kBlockRows;
  return {&cache_, blocks, kBlockRows, blocks};
}

KvLayout LlamaModel::layout_of(const PagedKvCache& cache) const {
  return {&cache, cache.total_blocks(), cache.block_rows(), cache.blocks_for(cache_.capacity)};
}

void LlamaModel::prepare_batch_cache(const PagedKvCache& cache,
                                     const std::function<void(const std::string&)>& progress) {
  blocks_->prepare_kv(layout_of(cache), progress);
}

void LlamaModel::truncate(int position) {
  if (position < 0 || position > position_)
    fail("truncate to {}: the cache holds {} positions", position, position_);
  position_ = position;
}

std::span<const float> LlamaModel::forward(std::span<const TokenId> tokens, bool all_logits) {
  const LlamaConfig& c = config_;
  if (tokens.empty()) fail("forward: no tokens");
  if (tokens.size() > static_cast<size_t>(cache_.capacity - position_))
    fail("context full: {} tokens in the cache, {} more do not fit in the context of {}", position_,
         tokens.size(), cache_.capacity);
  for (TokenId t : tokens)
    if (t < 0 || t >= c.n_vocab) fail("token id {} is outside the vocabulary of {}", t, c.n_vocab);
  if (all_logits) all_logits_.assign(tokens.size() * static_cast<size_t>(c.n_vocab), 0.0f);
  // Chunks bound the scratch buffers for long prompts.
  constexpr size_t kChunk = 256;
  const size_t d = static_cast<size_t>(c.n_embd);
  for (size_t start = 0; start < tokens.size(); start += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, tokens.size() - start));
    x_.resize(n * d);
    q_.resize(static_cast<size_t>(n) * c.n_head * c.head_dim);
    k_.resize(static_cast<size_t>(n) * c.n_head_kv * c.head_dim);
    v_.resize(k_.size());
    attn_.resize(q_.size());
    embed(tokens.subspan(start, static_cast<size_t>(n)), x_.data());
    const SequenceRows sequence{own_blocks_.data(), position_, n};
    if (!blocks_->decoder_layers({&sequence, 1}, n, own_layout(), x_.data()))
      for (int l = 0; l < c.n_layer; ++l) {
        blocks_->norm_qkv(l, x_.data(), n, q_.data(), k_.data(), v_.data());
        blocks_->attention(l, position_, n, q_.data(), k_.data(), v_.data(), cache_, attn_.data());
        blocks_->output_and_mlp(l, attn_.data(), n, x_.data());
      }
    if (all_logits) {
      for (int i = 0; i < n; ++i)
        blocks_->final_norm_lm_head(x_.data() + i * d,
                                    all_logits_.data() + (start + i) * c.n_vocab);
    }
    position_ += n;
    if (start + n == tokens.size())
      blocks_->final_norm_lm_head(x_.data() + (n - 1) * d, logits_.data());
  }
  return logits_;
}

void LlamaModel::embed(std::span<const TokenId> tokens, float* x) const {
  const Linear& e = weights_.token_embd;
  const size_t d = static_cast<size_t>(config_.n_embd);
  for (size_t i = 0; i < tokens.size(); ++i)
    dequantize(e.type, {e.data + static_cast<size_t>(tokens[i]) * e.row_bytes, e.row_bytes},
               {x + i * d, d}, e.name);
}

void LlamaModel::check_batch(std::span<const BatchEntry> entries, const PagedKvCache& cache) const {
  if (entries.empty()) fail("forward_batch: no sequences");
  for (size_t s = 0; s < entries.size(); ++s) {
    const BatchEntry& e = entries[s];
    const int end = e.pos0 + static_cast<int>(e.tokens.size());
    if (e.tokens.empty()) fail("forward_batch: sequence {} has no tokens", s);
    if (e.pos0 < 0 || end > cache_.capacity)
      fail("forward_batch: sequence {} reaches position {}, past the context of {}", s, end,
           cache_.capacity);
    if (static_cast<int>(e.blocks.size()) < cache.blocks_for(end))
      fail("forward_batch: sequence {} has {} KV blocks for {} positions", s, e.blocks.size(), end);
    for (TokenId t : e.tokens)
      if (t < 0 || t >= config_.n_vocab)
        fail("token id {} is outside the vocabulary of {}", t, config_.n_vocab);
  }
}

std::span<const float> LlamaModel::forward_batch(std::span<const BatchEntry> entries,
                                                 PagedKvCache& cache) {
  check_batch(entries, cache);
  const LlamaConfig& c = config_;
  const size_t d = static_cast<size_t>(c.n_embd);
  int rows = 0, wanted = 0;
  batch_sequences_.clear();
  for (const BatchEntry& e : entries) {
    const int n = static_cast<int>(e.tokens.size());
    batch_sequences_.push_back({e.blocks.data(), e.pos0, n});
    rows += n;
    wanted += e.logits ? 1 : 0;
  }
  // The scratch only grows, so that steady decoding allocates nothing.
  const auto grow = [](std::vector<float>& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  const size_t nr = static_cast<size_t>(rows);
  grow(x_, nr * d);
  grow(q_, nr * c.n_head * c.head_dim);
  grow(k_, nr * c.n_head_kv * c.head_dim);
  grow(v_, nr * c.n_head_kv * c.head_dim);
  grow(attn_, nr * c.n_head * c.head_dim);
  size_t row = 0;
  for (const BatchEntry& e : entries) {
    embed(e.tokens, x_.data() + row * d);
    row += e.tokens.size();
  }
  const KvLayout layout = layout_of(cache);
  if (!blocks_->decoder_layers(batch_sequences_, rows, layout, x_.data()))
    for (int l = 0; l < c.n_layer; ++l) {
      blocks_->norm_qkv(l, x_.data(), rows, q_.data(), k_.data(), v_.data());
      blocks_->paged_attention(l, batch_sequences_, q_.data(), k_.data(), v_.data(), cache,
                               attn_.data());
      blocks_->output_and_mlp(l, attn_.data(), rows, x_.data());
    }
  grow(batch_last_x_, static_cast<size_t>(wanted) * d);
  grow(batch_logits_, static_cast<size_t>(wanted) * c.n_vocab);
  row = 0;
  size_t out = 0;
  for (const BatchEntry& e : entries) {
    row += e.tokens.size();
    if (e.logits) std::copy_n(x_.data() + (row - 1) * d, d, batch_last_x_.data() + out++ * d);
  }
  if (wanted == 0) return {};
  blocks_->final_norm_lm_head_rows(batch_last_x_.data(), wanted, batch_logits_.data());
  return {batch_logits_.data(), static_cast<size_t>(wanted) * c.n_vocab};
}

}  // namespace yirage::llm
