#include "llm/fused_blocks.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "ir/ir.h"
#include "llm/block_timer.h"
#include "support/error.h"
#include "tune/tune.h"

namespace yirage::llm {
namespace {

// Rows per launch. A block of n rows runs as the largest buckets that fit: a 128-token prompt is
// two launches of 64, a decode step one launch of 1, and a batched step of 15 rows three of 4 and
// three of 1. Every launch reads all of the block's weights, so the bucket of 4 keeps a partial
// batch from running row by row (15 launches of 1 there before). Every bucket is one optimized
// graph.
constexpr std::array<int, 4> kRowBuckets = {64, 16, 4, 1};

std::optional<ir::QuantFormat> format_of(GgmlType type) {
  if (type == GgmlType::Q4_1) return ir::QuantFormat::q4_1;
  if (type == GgmlType::Q8_0) return ir::QuantFormat::q8_0;
  if (type == GgmlType::Q4_0) return ir::QuantFormat::q4_0;
  if (type == GgmlType::F16) return ir::QuantFormat::f16;
  if (type == GgmlType::BF16) return ir::QuantFormat::bf16;
  return std::nullopt;
}

// The weight formats the backend's quant_matmul reads (capabilities "quant_matmul_formats").
std::vector<std::string> formats_read_by(const backend::Backend& backend) {
  const nlohmann::json& caps = backend.device().capabilities;
  if (!caps.is_object() || !caps.contains("quant_matmul_formats")) return {};
  return caps["quant_matmul_formats"].get<std::vector<std::string>>();
}

ir::TensorRef weight_input(ir::KernelGraph& g, const std::string& name, const Linear& w) {
  return g.input(name, {w.rows, static_cast<int64_t>(w.row_bytes)}, ir::DType::u8);
}

ir::TensorRef quant_matmul(ir::KernelGraph& g, ir::TensorRef x, ir::TensorRef w_in,
                           const Linear& w) {
  return g.quant_matmul(x, w_in, *format_of(w.type));
}

// Inputs: x, attn_norm, wq, wk, wv; outputs q, k, v.
ir::KernelGraph norm_qkv_graph(const LlamaConfig& c, const LayerWeights& lw, int rows) {
  ir::KernelGraph g;
  const ir::TensorRef x = g.input("x", {rows, c.n_embd}, ir::DType::f32);
  const ir::TensorRef gain = g.input("attn_norm", {c.n_embd}, ir::DType::f32);
  const ir::TensorRef wq = weight_input(g, "wq", lw.wq), wk = weight_input(g, "wk", lw.wk),
                      wv = weight_input(g, "wv", lw.wv);
  const ir::TensorRef xn = g.rms_norm(x, {c.n_embd}, gain, c.rms_eps);
  g.mark_output(quant_matmul(g, xn, wq, lw.wq), "q");
  g.mark_output(quant_matmul(g, xn, wk, lw.wk), "k");
  g.mark_output(quant_matmul(g, xn, wv, lw.wv), "v");
  return g;
}

// Inputs: attention, x, wo, ffn_norm, gate, up, down; output the layer's result: the attention
// residual x1 = x + attention · Woᵀ, then x1 + down(silu(gate(xn)) · up(xn)) with xn = RMSNorm(x1).
// One graph for both, so the search sees the residual add next to the norm that reads it.
ir::KernelGraph output_and_mlp_graph(const LlamaConfig& c, const LayerWeights& lw, int rows) {
  ir::KernelGraph g;
  const ir::TensorRef attn =
      g.input("attention", {rows, int64_t(c.n_head) * c.head_dim}, ir::DType::f32);
  const ir::TensorRef x = g.input("x", {rows, c.n_embd}, ir::DType::f32);
  const ir::TensorRef wo = weight_input(g, "wo", lw.wo);
  const ir::TensorRef gain = g.input("ffn_norm", {c.n_embd}, ir::DType::f32);
  const ir::TensorRef gate = weight_input(g, "gate", lw.gate), up = weight_input(g, "up", lw.up),
                      down = weight_input(g, "down", lw.down);
  const ir::TensorRef x1 = g.add(x, quant_matmul(g, attn, wo, lw.wo));
  const ir::TensorRef xn = g.rms_norm(x1, {c.n_embd}, gain, c.rms_eps);
  const ir::TensorRef h =
      g.mul(g.silu(quant_matmul(g, xn, gate, lw.gate)), quant_matmul(g, xn, up, lw.up));
  g.mark_output(g.add(x1, quant_matmul(g, h, down, lw.down)), "x_next");
  return g;
}

// Inputs: x, output_norm, output; output the logits.
ir::KernelGraph lm_head_graph(const LlamaConfig& c, const LlamaWeights& w, int rows) {
  ir::KernelGraph g;
  const ir::TensorRef x = g.input("x", {rows, c.n_embd}, ir::DType::f32);
  const ir::TensorRef gain = g.input("output_norm", {c.n_embd}, ir::DType::f32);
  const ir::TensorRef head = weight_input(g, "output", w.output);
  g.mark_output(quant_matmul(g, g.rms_norm(x, {c.n_embd}, gain, c.rms_eps), head, w.output),
                "logits");
  return g;
}

std::span<const std::byte> bytes_of(const void* data, size_t bytes) {
  return {static_cast<const std::byte*>(data), bytes};
}

// A weight as the backend reads it: the mapping itself where the backend's buffers can be host
// memory, else a buffer of the backend's, written once here.
std::unique_ptr<backend::Buffer> placed(backend::Backend& backend, const void* data, size_t bytes) {
  if (std::unique_ptr<backend::Buffer> view = backend.buffer_from_host_ptr(
          const_cast<void*>(data), bytes, backend::HostAccess::read_only, "a model weight"))
    return view;
  std::unique_ptr<backend::Buffer> buffer = backend.allocate(bytes);
  buffer->write(bytes_of(data, bytes));
  return buffer;
}

std::unique_ptr<backend::Buffer> placed(backend::Backend& backend, const Linear& w) {
  return placed(backend, w.data, static_cast<size_t>(w.rows) * w.row_bytes);
}
std::unique_ptr<backend::Buffer> placed(backend::Backend& backend, const std::vector<float>& v) {
  return placed(backend, v.data(), v.size() * sizeof(float));
}

// The activations of one launch. Where the backend's buffers are host memory they are views of
// the model's own arrays; elsewhere each is a buffer of the backend's, one per role and size and
// kept for the next step, that inputs are copied into before the launch and outputs out of after.
class ActivationBuffers {
 public:
  explicit ActivationBuffers(backend::Backend& backend)
      : backend_(backend), host_visible_(backend.buffer_type().host_visible) {}

  backend::Buffer* input(int role, const float* data, size_t bytes) {
    if (host_visible_) return view(const_cast<float*>(data), bytes, backend::HostAccess::read_only);
    backend::Buffer& buffer = on_device(role, bytes);
    buffer.write(bytes_of(data, bytes));
    return &buffer;
  }

  backend::Buffer* output(int role, float* data, size_t bytes) {
    if (host_visible_) return view(data, bytes, backend::HostAccess::read_write);
    backend::Buffer& buffer = on_device(role, bytes);
    pending_.push_back({&buffer, data, bytes});
    return &buffer;
  }

  // After the launch: the outputs back in host memory, and the views forgotten.
  void finish() {
    if (!pending_.empty()) backend_.synchronize();
    for (const Pending& p : pending_)
      p.buffer->read({reinterpret_cast<std::byte*>(p.data), p.bytes});
    pending_.clear();
    views_.clear();
  }

 private:
  struct Pending {
    backend::Buffer* buffer;
    float* data;
    size_t bytes;
  };

  backend::Buffer* view(float* data, size_t bytes, backend::HostAccess access) {
    views_.push_back(backend_.buffer_from_host_ptr(data, bytes, access, "an activation"));
    return views_.back().get();
  }

  backend::Buffer& on_device(int role, size_t bytes) {
    std::unique_ptr<backend::Buffer>& slot = device_[{role, bytes}];
    if (!slot) slot = backend_.allocate(bytes);
    return *slot;
  }

  backend::Backend& backend_;
  const bool host_visible_;
  std::vector<std::unique_ptr<backend::Buffer>> views_;
  std::map<std::pair<int, size_t>, std::unique_ptr<backend::Buffer>> device_;
  std::vector<Pending> pending_;
};

double seconds_from(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The roles of ActivationBuffers' buffers, one buffer per role and size.
enum Role : int { kX, kQ, kK, kV, kAttention, kNext, kLogits };

class FusedBlocks final : public HotBlocks {
 public:
  FusedBlocks(const LlamaConfig& config, const LlamaWeights& weights,
              std::unique_ptr<HotBlocks> attention, const FusedBlockOptions& options)
      : c_(config),
        attention_(std::move(attention)),
        backend_(*options.backend),
        activations_(backend_),
        timer_(&backend_, options.time_blocks),
        attention_on_backend_(options.attention_on_backend),
        search_seconds_(options.search_seconds) {
    if (attention_on_backend_)
      if (std::string why = backend_attention_unsupported(c_); !why.empty())
        fail("attention on the {} backend: {}", backend_.name(), why);
    timer_.name(attention_.get(), "attention on the host's kernels");
    timer_.name(&activations_, "a step's rows to the backend and back");
    const std::vector<NamedGraph> graphs = fused_block_graphs(c_, weights);
    std::vector<std::unique_ptr<backend::Module>> modules;
    for (size_t i = 0; i < graphs.size(); ++i)
      modules.push_back(optimized(graphs[i].graph, graphs[i].name, i, graphs.size(), options));
    for (size_t b = 0; b < kRowBuckets.size(); ++b) {
      norm_qkv_[b] = std::move(modules[2 * b]);
      output_and_mlp_[b] = std::move(modules[2 * b + 1]);
    }
    lm_heads_.back() = std::move(modules.back());
    // A batch's LM head in buckets of rows, where it runs on the backend (final_norm_lm_head_rows).
    if (!backend_.buffer_type().host_visible)
      for (size_t b = 0; b + 1 < kRowBuckets.size(); ++b)
        lm_heads_[b] = optimized(lm_head_graph(c_, weights, kRowBuckets[b]),
                                 fmt::format("final norm + lm head, {} rows", kRowBuckets[b]), b,
                                 kRowBuckets.size() - 1, options);
    // The weights do not move: placed once, only the activations change per call.
    const bool copied = !backend_.buffer_type().host_visible;
    const auto start = std::chrono::steady_clock::now();
    const size_t n = weights.layers.size();
    for (size_t i = 0; i < n; ++i) {
      const LayerWeights& lw = weights.layers[i];
      layers_.push_back({placed(backend_, lw.attn_norm), placed(backend_, lw.wq),
                         placed(backend_, lw.wk), placed(backend_, lw.wv), placed(backend_, lw.wo),
                         placed(backend_, lw.ffn_norm), placed(backend_, lw.gate),
                         placed(backend_, lw.up), placed(backend_, lw.down)});
      // A large model's copy takes seconds: a line at every tenth of the layers.
      if (copied && options.progress && (i + 1) * 10 / n != i * 10 / n)
        options.progress(fmt::format("weights to the {} backend: {}/{} layers, {:.1f} s",
                                     backend_.name(), i + 1, n, seconds_from(start)));
    }
    output_norm_ = placed(backend_, weights.output_norm);
    output_ = placed(backend_, weights.output);
    if (attention_on_backend_)
      for (const KvLayout& layout : options.kv_layouts) stack_for(layout, options);
  }

  // The layers of a step on the backend, in chunks of at most 64 rows, each padded to the bucket
  // that holds it: x goes in once and out once, and between the layers' launches nothing leaves
  // the backend. A chunk's rows see the appends of the chunks before it, as a prompt's should.
  bool decoder_layers(std::span<const SequenceRows> sequences, int rows, const KvLayout& layout,
                      float* x) override {
    if (!attention_on_backend_) return false;
    LayerStack& stack = stack_for(layout);
    std::vector<std::pair<const SequenceRows*, int>>& row_of = row_of_;
    row_of.clear();
    for (const SequenceRows& s : sequences)
      for (int i = 0; i < s.rows; ++i) row_of.emplace_back(&s, s.pos0 + i);
    if (static_cast<int>(row_of.size()) != rows)
      fail("decoder_layers: {} rows, but the sequences hold {}", rows, row_of.size());
    for (int start = 0; start < rows; start += kRowBuckets.front()) {
      const int n = std::min(rows - start, kRowBuckets.front());
      size_t b = 0;
      while (b + 1 < kRowBuckets.size() && kRowBuckets[b + 1] >= n) ++b;
      run_chunk(stack, b, std::span(row_of).subspan(size_t(start), size_t(n)),
                x + size_t(start) * c_.n_embd);
    }
    return true;
  }

  void prepare_kv(const KvLayout& layout,
                  const std::function<void(const std::string&)>& progress) override {
    if (!attention_on_backend_) return;
    FusedBlockOptions options;
    options.progress = progress;
    stack_for(layout, options);
  }

  void norm_qkv(int layer, const float* x, int n, float* q, float* k, float* v) override {
    const LayerBuffers& l = layers_[static_cast<size_t>(layer)];
    const size_t dq = static_cast<size_t>(c_.n_head) * c_.head_dim;
    const size_t dkv = static_cast<size_t>(c_.n_head_kv) * c_.head_dim;
    for_buckets(n, [&](size_t bucket, int row, int rows) {
      ActivationBuffers& a = activations_;
      launch(*norm_qkv_[bucket],
             {a.input(kX, x + row * static_cast<size_t>(c_.n_embd), bytes(rows, c_.n_embd)),
              l.attn_norm.get(), l.wq.get(), l.wk.get(), l.wv.get()},
             {a.output(kQ, q + row * dq, bytes(rows, dq)),
              a.output(kK, k + row * dkv, bytes(rows, dkv)),
              a.output(kV, v + row * dkv, bytes(rows, dkv))});
    });
  }

  void attention(int layer, int pos0, int n, float* q, float* k, float* v, KvCache& cache,
                 float* out) override {
    timer_.time(attention_.get(),
                [&] { attention_->attention(layer, pos0, n, q, k, v, cache, out); });
  }

  void paged_attention(int layer, std::span<const SequenceRows> sequences, float* q, float* k,
                       float* v, PagedKvCache& cache, float* out) override {
    timer_.time(attention_.get(),
                [&] { attention_->paged_attention(layer, sequences, q, k, v, cache, out); });
  }

  std::vector<BlockTime> block_times() const override { return timer_.times(); }

  void output_and_mlp(int layer, const float* attention, int n, float* x) override {
    const LayerBuffers& l = layers_[static_cast<size_t>(layer)];
    const size_t dq = static_cast<size_t>(c_.n_head) * c_.head_dim;
    // The result goes to a buffer of its own, copied back once every bucket has run: a graph's
    // output never aliases its input.
    next_.resize(static_cast<size_t>(n) * c_.n_embd);
    for_buckets(n, [&](size_t bucket, int row, int rows) {
      const size_t at = static_cast<size_t>(row) * c_.n_embd;
      ActivationBuffers& a = activations_;
      launch(*output_and_mlp_[bucket],
             {a.input(kAttention, attention + row * dq, bytes(rows, dq)),
              a.input(kX, x + at, bytes(rows, c_.n_embd)), l.wo.get(), l.ffn_norm.get(),
              l.gate.get(), l.up.get(), l.down.get()},
             {a.output(kNext, next_.data() + at, bytes(rows, c_.n_embd))});
    });
    std::copy(next_.begin(), next_.end(), x);
  }

  // A batch's LM head. Where the backend's buffers are host memory, the hand-written kernels,
  // which take any number of rows in one pass over the weights. Elsewhere the fused graph of each
  // bucket of rows on the device: a row at a time read the whole head once a row (a Llama-3-8B
  // shape's 1 GB bf16 head, 0.36 ms a row on an H100, 23 ms of a 64-row step), and the host would
  // stream it through its own memory (40 ms a step for a Llama-3.2-1B shape's on the H100
  // machine). A row's logits depend on its bucket's size, never on the other rows' values, as in
  // the layers' graphs.
  void final_norm_lm_head_rows(const float* x, int n, float* logits) override {
    if (backend_.buffer_type().host_visible) {
      attention_->final_norm_lm_head_rows(x, n, logits);
      return;
    }
    for_buckets(n, [&](size_t bucket, int row, int rows) {
      launch(*lm_heads_[bucket],
             {activations_.input(kX, x + size_t(row) * c_.n_embd, bytes(rows, c_.n_embd)),
              output_norm_.get(), output_.get()},
             {activations_.output(kLogits, logits + size_t(row) * c_.n_vocab,
                                  bytes(rows, c_.n_vocab))});
    });
  }

  void final_norm_lm_head(const float* x, float* logits) override {
    launch(*lm_heads_.back(),
           {activations_.input(kX, x, bytes(1, c_.n_embd)), output_norm_.get(), output_.get()},
           {activations_.output(kLogits, logits, bytes(1, c_.n_vocab))});
  }

 private:
  struct LayerBuffers {
    std::unique_ptr<backend::Buffer> attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down;
  };

  static size_t bytes(int rows, size_t width) {
    return static_cast<size_t>(rows) * width * sizeof(float);
  }

  template <typename F>
  static void for_buckets(int n, F&& run) {
    int row = 0;
    for (size_t b = 0; b < kRowBuckets.size(); ++b)
      for (; n - row >= kRowBuckets[b]; row += kRowBuckets[b]) run(b, row, kRowBuckets[b]);
  }

  // A launch whose outputs the host reads back (ActivationBuffers) as soon as it ends.
  void launch(backend::Module& module, std::initializer_list<backend::Buffer*> inputs,
              std::initializer_list<backend::Buffer*> outputs) {
    run(module, inputs, outputs);
    activations_.finish();
  }

  std::unique_ptr<backend::Module> optimized(const ir::KernelGraph& graph, const std::string& what,
                                             size_t index, size_t count,
                                             const FusedBlockOptions& options) {
    tune::OptimizeOptions o;
    o.search.budget_seconds = options.search_seconds;
    o.max_candidates = 3;
    o.profile.min_seconds = 0.1;
    if (options.detail) o.log = [&](const std::string& line) { options.detail("  " + line); };
    const auto start = std::chrono::steady_clock::now();
    tune::OptimizeResult result = tune::optimize(graph, backend_, o);
    if (options.progress) {
      const double seconds = seconds_from(start);
      const tune::CandidateRecord& winner = result.entry.winner();
      options.progress(
          fmt::format("[{}/{}] {}: {} ({:.3f} ms), {}", index + 1, count, what, winner.label,
                      winner.seconds * 1e3,
                      result.cache_hit ? "cached" : fmt::format("optimized in {:.1f} s", seconds)));
    }
    std::unique_ptr<backend::Module> module = backend_.compile(result.chosen);
    timer_.name(module.get(), what);
    return module;
  }

  // What decoder_layers keeps per KV layout: each layer's pool, the attention graph per bucket,
  // and per bucket the activations, which stay on the backend between launches.
  struct Activations {
    std::unique_ptr<backend::Buffer> x, x_next, q, k, v, attention, table, positions, rope;
    // Their host sides, kept so that a step allocates nothing.
    std::vector<int32_t> host_table, host_positions, host_rope;
    std::vector<float> host_x;
  };
  struct LayerStack {
    KvLayout layout;
    std::vector<std::unique_ptr<backend::Buffer>> pools;
    std::array<std::unique_ptr<backend::Module>, kRowBuckets.size()> attention;
    std::array<Activations, kRowBuckets.size()> buffers;
  };

  // The stack for `layout`, made (its graphs optimized, its pools allocated) on first use; with
  // `options`' progress lines when the caller gives them (at load), silently otherwise.
  LayerStack& stack_for(const KvLayout& layout, const FusedBlockOptions& options = {}) {
    std::unique_ptr<LayerStack>& stack = stacks_[layout.owner];
    // Another cache at the address of one that is gone, of another size, gets its own stack.
    if (stack && stack->layout.blocks == layout.blocks &&
        stack->layout.block_rows == layout.block_rows &&
        stack->layout.max_blocks == layout.max_blocks)
      return *stack;
    stack = std::make_unique<LayerStack>();
    stack->layout = layout;
    FusedBlockOptions o = options;
    o.search_seconds = search_seconds_;
    for (size_t b = 0; b < kRowBuckets.size(); ++b) {
      const ir::KernelGraph g = attention_graph(c_, kRowBuckets[b], layout);
      stack->attention[b] = optimized(g,
                                      fmt::format("rope + paged attention, {} rows, {} KV blocks",
                                                  kRowBuckets[b], layout.blocks),
                                      b, kRowBuckets.size(), o);
      Activations& a = stack->buffers[b];
      const size_t rows = size_t(kRowBuckets[b]);
      const size_t dq = size_t(c_.n_head) * c_.head_dim, dkv = size_t(c_.n_head_kv) * c_.head_dim;
      a.x = backend_.allocate(rows * c_.n_embd * sizeof(float));
      a.x_next = backend_.allocate(rows * c_.n_embd * sizeof(float));
      a.q = backend_.allocate(rows * dq * sizeof(float));
      a.k = backend_.allocate(rows * dkv * sizeof(float));
      a.v = backend_.allocate(rows * dkv * sizeof(float));
      a.attention = backend_.allocate(rows * dq * sizeof(float));
      a.table = backend_.allocate(rows * size_t(layout.max_blocks) * sizeof(int32_t));
      a.positions = backend_.allocate(rows * sizeof(int32_t));
      a.rope = backend_.allocate(rows * sizeof(int32_t));
    }
    // Zeroed, so that a block is finite before its first append (nothing reads it before).
    // One layer's pool is the attention graph's input 3 (q, k, v, pool, ...), whatever its rows.
    const ir::KernelGraph one_row = attention_graph(c_, 1, layout);
    const ir::TensorType& pool = one_row.type(one_row.inputs()[3]);
    const std::vector<std::byte> zeros(size_t(ir::num_elements(pool.dims)) *
                                       ir::dtype_size(pool.dtype));
    for (int l = 0; l < c_.n_layer; ++l) {
      stack->pools.push_back(backend_.allocate(zeros.size()));
      stack->pools.back()->write(zeros);
    }
    return *stack;
  }

  // One chunk of at most a bucket's rows through every layer; padding rows have position -1.
  void run_chunk(LayerStack& stack, size_t bucket,
                 std::span<const std::pair<const SequenceRows*, int>> rows, float* x) {
    const int capacity = kRowBuckets[bucket];
    Activations& a = stack.buffers[bucket];
    const size_t max_blocks = size_t(stack.layout.max_blocks);
    const int block_rows = stack.layout.block_rows;
    std::vector<int32_t>&table = a.host_table, &positions = a.host_positions, &rope = a.host_rope;
    table.assign(size_t(capacity) * max_blocks, 0);
    positions.assign(size_t(capacity), -1);
    rope.assign(size_t(capacity), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [sequence, position] = rows[r];
      const size_t used = size_t(position / block_rows + 1);
      if (used > max_blocks)
        fail("decoder_layers: position {} needs {} blocks of {}; a sequence holds at most {}",
             position, used, block_rows, max_blocks);
      positions[r] = rope[r] = position;
      std::copy_n(sequence->blocks, used, table.begin() + ptrdiff_t(r * max_blocks));
    }
    std::vector<float>& staged = a.host_x;
    staged.assign(size_t(capacity) * c_.n_embd, 0.0f);
    std::copy_n(x, rows.size() * c_.n_embd, staged.begin());
    timer_.time(&activations_, [&] {
      a.x->write(bytes_of(staged.data(), staged.size() * sizeof(float)));
      a.table->write(bytes_of(table.data(), table.size() * sizeof(int32_t)));
      a.positions->write(bytes_of(positions.data(), positions.size() * sizeof(int32_t)));
      a.rope->write(bytes_of(rope.data(), rope.size() * sizeof(int32_t)));
    });
    for (int l = 0; l < c_.n_layer; ++l) {
      const LayerBuffers& w = layers_[size_t(l)];
      backend::Buffer* pool = stack.pools[size_t(l)].get();
      run(*norm_qkv_[bucket], {a.x.get(), w.attn_norm.get(), w.wq.get(), w.wk.get(), w.wv.get()},
          {a.q.get(), a.k.get(), a.v.get()});
      run(*stack.attention[bucket],
          {a.q.get(), a.k.get(), a.v.get(), pool, a.table.get(), a.positions.get(), a.rope.get()},
          {a.attention.get(), pool});
      run(*output_and_mlp_[bucket],
          {a.attention.get(), a.x.get(), w.wo.get(), w.ffn_norm.get(), w.gate.get(), w.up.get(),
           w.down.get()},
          {a.x_next.get()});
      std::swap(a.x, a.x_next);
    }
    backend_.synchronize();
    timer_.time(&activations_, [&] {
      a.x->read({reinterpret_cast<std::byte*>(staged.data()), staged.size() * sizeof(float)});
    });
    std::copy_n(staged.begin(), rows.size() * c_.n_embd, x);
  }

  // A launch whose buffers stay on the backend.
  void run(backend::Module& module, std::initializer_list<backend::Buffer*> inputs,
           std::initializer_list<backend::Buffer*> outputs) {
    const std::vector<backend::Buffer*> in(inputs), out(outputs);
    timer_.time(&module, [&] { module.launch(in, out); });
  }

  const LlamaConfig& c_;
  std::unique_ptr<HotBlocks> attention_;
  backend::Backend& backend_;
  ActivationBuffers activations_;
  BlockTimer timer_;
  std::array<std::unique_ptr<backend::Module>, kRowBuckets.size()> norm_qkv_, output_and_mlp_;
  // The final norm and LM head per bucket of rows; only the last (one row) where the backend's
  // buffers are host memory.
  std::array<std::unique_ptr<backend::Module>, kRowBuckets.size()> lm_heads_;
  std::vector<LayerBuffers> layers_;
  std::unique_ptr<backend::Buffer> output_norm_, output_;
  std::vector<float> next_;
  const bool attention_on_backend_;
  const double search_seconds_;
  std::map<const void*, std::unique_ptr<LayerStack>> stacks_;  // by KvLayout::owner
  std::vector<std::pair<const SequenceRows*, int>> row_of_;    // decoder_layers': each row's
                                                               // sequence and position
};

}  // namespace

std::vector<NamedGraph> fused_block_graphs(const LlamaConfig& config, const LlamaWeights& weights) {
  const LayerWeights& l0 = weights.layers.at(0);
  std::vector<NamedGraph> graphs;
  for (int rows : kRowBuckets) {
    graphs.push_back({fmt::format("rmsnorm+qkv, {} rows", rows), norm_qkv_graph(config, l0, rows)});
    graphs.push_back({fmt::format("attention output + gated mlp, {} rows", rows),
                      output_and_mlp_graph(config, l0, rows)});
  }
  graphs.push_back({"final norm + lm head", lm_head_graph(config, weights, 1)});
  return graphs;
}

ir::KernelGraph attention_graph(const LlamaConfig& c, int rows, const KvLayout& layout) {
  const int64_t d = c.head_dim, heads = c.n_head, kv_heads = c.n_head_kv;
  ir::KernelGraph g;
  const ir::TensorRef q = g.input("q", {rows, heads * d}, ir::DType::f32);
  const ir::TensorRef k = g.input("k", {rows, kv_heads * d}, ir::DType::f32);
  const ir::TensorRef v = g.input("v", {rows, kv_heads * d}, ir::DType::f32);
  const ir::TensorRef pool =
      g.input("pool", {layout.blocks, 2 * kv_heads, layout.block_rows, d}, ir::DType::f16);
  const ir::TensorRef table = g.input("table", {rows, layout.max_blocks}, ir::DType::i32);
  const ir::TensorRef positions = g.input("positions", {rows}, ir::DType::i32);
  const ir::TensorRef rope_positions = g.input("rope_positions", {rows}, ir::DType::i32);
  // ggml's "normal" rope, as the host engine's (cpu_blocks.cpp): adjacent pairs rotate.
  auto rotated = [&](ir::TensorRef x, int64_t n) {
    return g.rope(g.reshape(x, {rows, n, d}), rope_positions, c.rope_base,
                  ir::RopeStyle::interleaved);
  };
  const std::vector<ir::TensorRef> out =
      g.paged_attention(rotated(q, heads), rotated(k, kv_heads), g.reshape(v, {rows, kv_heads, d}),
                        pool, table, positions, layout.block_rows);
  g.mark_output(out[0], "attention");
  g.mark_output(out[1], "pool_out");
  return g;
}

std::string backend_attention_unsupported(const LlamaConfig& config) {
  if (config.rope_dim != config.head_dim)
    return fmt::format("RoPE rotates {} of each head's {} dimensions; the graph rotates all",
                       config.rope_dim, config.head_dim);
  return {};
}

std::string fused_blocks_unsupported(const LlamaConfig& config, const LlamaWeights& weights,
                                     const backend::Backend* backend) {
  if (weights.layers.empty()) return "the model has no layers";
  if (!backend) return "no backend given to run them on";
  if (const backend::Availability a = backend->availability(); !a.available)
    return fmt::format("backend '{}' is unavailable: {}", backend->name(), a.reason);
  const std::vector<std::string> formats = formats_read_by(*backend);
  auto check = [&](const Linear& w) -> std::string {
    const std::optional<ir::QuantFormat> format = format_of(w.type);
    if (format && std::ranges::find(formats, ir::quant_format_name(*format)) != formats.end())
      return {};
    return fmt::format("{} is {}, which the {} backend's quant_matmul does not read ({})", w.name,
                       ggml_type_name(w.type), backend->name(),
                       formats.empty() ? "it lowers no quant_matmul"
                                       : fmt::format("{}", fmt::join(formats, ", ")));
  };
  for (const LayerWeights& lw : weights.layers)
    for (const Linear* w : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.gate, &lw.up, &lw.down})
      if (std::string why = check(*w); !why.empty()) return why;
  if (config.n_embd % ir::kQuantBlock != 0 || config.n_ff % ir::kQuantBlock != 0 ||
      config.n_head * config.head_dim % ir::kQuantBlock != 0)
    return "the model's widths are not multiples of 32";
  return check(weights.output);
}

std::unique_ptr<HotBlocks> make_fused_blocks(const LlamaConfig& config, const LlamaWeights& weights,
                                             std::unique_ptr<HotBlocks> attention,
                                             const FusedBlockOptions& options) {
  if (std::string why = fused_blocks_unsupported(config, weights, options.backend); !why.empty())
    fail("fused hot blocks: {}", why);
  return std::make_unique<FusedBlocks>(config, weights, std::move(attention), options);
}

}  // namespace yirage::llm
