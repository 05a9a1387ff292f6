#include "llm/cpu_blocks.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "support/error.h"

namespace yirage::llm {
namespace {

// Rows [begin, end) of `total` for `thread` of `threads`, in whole tiles of 4 rows so that every
// thread but the last runs full kernel tiles.
std::pair<int, int> split_rows(int total, int thread, int threads) {
  const int tiles = (total + 3) / 4;
  const int begin = std::min(total, tiles * thread / threads * 4);
  const int end = std::min(total, tiles * (thread + 1) / threads * 4);
  return {begin, end};
}

// One matrix of a parallel region: y[c·ldy + r] = W row r · activation row c.
struct Job {
  const Linear* w;
  const Activations* x;
  float* y;
  size_t ldy;
};

class CpuBlocks final : public HotBlocks {
 public:
  CpuBlocks(const LlamaConfig& config, const LlamaWeights& weights, int context_length,
            ThreadPool& pool, const KernelTable& kernels)
      : c_(config), w_(weights), pool_(pool), k_(kernels) {
    // RoPE angles as ggml computes them: θ advances by a factor freq_base^(-2/n_dims) per pair,
    // multiplied in float.
    const int pairs = c_.rope_dim / 2;
    rope_cos_.resize(static_cast<size_t>(context_length) * pairs);
    rope_sin_.resize(rope_cos_.size());
    const float theta_scale = std::pow(c_.rope_base, -2.0f / static_cast<float>(c_.rope_dim));
    for (int p = 0; p < context_length; ++p) {
      float theta = static_cast<float>(p);
      for (int i = 0; i < pairs; ++i) {
        rope_cos_[static_cast<size_t>(p) * pairs + i] = std::cos(theta);
        rope_sin_[static_cast<size_t>(p) * pairs + i] = std::sin(theta);
        theta *= theta_scale;
      }
    }
    scores_.resize(static_cast<size_t>(pool.size()));
    for (auto& s : scores_) s.resize(static_cast<size_t>(context_length));
  }

  void norm_qkv(int layer, const float* x, int n, float* q, float* k, float* v) override {
    const LayerWeights& lw = w_.layers[layer];
    ensure(xn_, static_cast<size_t>(n) * c_.n_embd);
    rms_norm(x, lw.attn_norm.data(), n, c_.n_embd, c_.rms_eps, xn_.data());
    const Activations& a = prepare(lw.wq, xn_.data(), n, 0);
    // Quantize once when the matrices read the same activation kind (they all do in a
    // uniformly quantized file).
    const Activations& b = same_kind(lw.wk, lw.wq) ? a : prepare(lw.wk, xn_.data(), n, 1);
    const Activations& cc = same_kind(lw.wv, lw.wq)   ? a
                            : same_kind(lw.wv, lw.wk) ? b
                                                      : prepare(lw.wv, xn_.data(), n, 2);
    const Job jobs[] = {{&lw.wq, &a, q, static_cast<size_t>(lw.wq.rows)},
                        {&lw.wk, &b, k, static_cast<size_t>(lw.wk.rows)},
                        {&lw.wv, &cc, v, static_cast<size_t>(lw.wv.rows)}};
    run_jobs(jobs, n);
  }

  void attention(int layer, int pos0, int n, float* q, float* k, float* v, KvCache& cache,
                 float* out) override {
    const size_t q_row = static_cast<size_t>(c_.n_head) * c_.head_dim;
    const size_t kv_row = static_cast<size_t>(c_.n_head_kv) * c_.head_dim;
    for (int i = 0; i < n; ++i)
      store_row(pos0 + i, q + i * q_row, k + i * kv_row, v + i * kv_row, cache.k(layer, pos0 + i),
                cache.v(layer, pos0 + i));
    attend(n, q, out, [&](int i, size_t kv_offset) {
      return RowKv{pos0 + i + 1, contiguous_rows(cache.k(layer, 0) + kv_offset, cache.row),
                   contiguous_rows(cache.v(layer, 0) + kv_offset, cache.row), n == 1};
    });
  }

  void paged_attention(int layer, std::span<const SequenceRows> sequences, float* q, float* k,
                       float* v, PagedKvCache& cache, float* out) override {
    const size_t q_row = static_cast<size_t>(c_.n_head) * c_.head_dim;
    const size_t kv_row = static_cast<size_t>(c_.n_head_kv) * c_.head_dim;
    row_sequence_.clear();
    row_position_.clear();
    int i = 0;
    for (size_t s = 0; s < sequences.size(); ++s) {
      const SequenceRows& seq = sequences[s];
      for (int r = 0; r < seq.rows; ++r, ++i) {
        const int pos = seq.pos0 + r;
        store_row(pos, q + i * q_row, k + i * kv_row, v + i * kv_row,
                  cache.k_row(layer, seq.blocks, pos), cache.v_row(layer, seq.blocks, pos));
        row_sequence_.push_back(static_cast<int>(s));
        row_position_.push_back(pos);
      }
    }
    // A sequence's one_query follows its own row count, never the batch's, so that its sums run
    // in the order they would alone.
    attend(i, q, out, [&](int row, size_t kv_offset) {
      const SequenceRows& seq = sequences[static_cast<size_t>(row_sequence_[row])];
      return RowKv{row_position_[row] + 1, cache.k_rows(layer, seq.blocks, kv_offset),
                   cache.v_rows(layer, seq.blocks, kv_offset), seq.rows == 1};
    });
  }

  void output_and_mlp(int layer, const float* attention, int n, float* x) override {
    const LayerWeights& lw = w_.layers[layer];
    residual_matmul(lw.wo, prepare(lw.wo, attention, n, 0), n, x);
    gated_mlp(lw, x, n);
  }

  // x += down(silu(gate(RMSNorm(x))) ⊙ up(RMSNorm(x))).
  void gated_mlp(const LayerWeights& lw, float* x, int n) {
    ensure(xn_, static_cast<size_t>(n) * c_.n_embd);
    rms_norm(x, lw.ffn_norm.data(), n, c_.n_embd, c_.rms_eps, xn_.data());
    const Activations& ag = prepare(lw.gate, xn_.data(), n, 0);
    const Activations& au = same_kind(lw.up, lw.gate) ? ag : prepare(lw.up, xn_.data(), n, 1);
    const size_t ff = static_cast<size_t>(c_.n_ff);
    ensure(gate_, n * ff);
    ensure(up_, n * ff);
    // Each thread owns a range of hidden features, computes gate and up for it and applies
    // SwiGLU there, so the activation needs no extra barrier.
    pool_.run([&](int thread, int threads) {
      auto [begin, end] = split_rows(c_.n_ff, thread, threads);
      if (begin >= end) return;
      gemm(lw.gate, ag, begin, end, n, gate_.data(), ff);
      gemm(lw.up, au, begin, end, n, up_.data(), ff);
      for (int c = 0; c < n; ++c)
        k_.swiglu(gate_.data() + c * ff + begin, up_.data() + c * ff + begin, end - begin);
    });
    const Activations& ad = prepare(lw.down, gate_.data(), n, 0);
    residual_matmul(lw.down, ad, n, x);
  }

  void final_norm_lm_head(const float* x, float* logits) override {
    final_norm_lm_head_rows(x, 1, logits);
  }

  void final_norm_lm_head_rows(const float* x, int n, float* logits) override {
    ensure(xn_, static_cast<size_t>(n) * c_.n_embd);
    rms_norm(x, w_.output_norm.data(), n, c_.n_embd, c_.rms_eps, xn_.data());
    const Activations& a = prepare(w_.output, xn_.data(), n, 0);
    const Job job{&w_.output, &a, logits, static_cast<size_t>(w_.output.rows)};
    run_jobs({&job, 1}, n);
  }

 private:
  static void ensure(std::vector<float>& v, size_t size) {
    if (v.size() < size) v.resize(size);
  }

  // What row i of a step attends to: positions 0..len-1 of its sequence.
  struct RowKv {
    int len;
    KvRows k, v;
    bool one_query;
  };

  // RoPE on row `pos`'s q and k, and k and v stored (as f16 values) at kc and vc.
  void store_row(int pos, float* q, float* k, const float* v, float* kc, float* vc) {
    const int hd = c_.head_dim;
    const size_t q_row = static_cast<size_t>(c_.n_head) * hd;
    const size_t kv_row = static_cast<size_t>(c_.n_head_kv) * hd;
    for (int h = 0; h < c_.n_head; ++h) rope(q + h * hd, pos);
    for (int h = 0; h < c_.n_head_kv; ++h) rope(k + h * hd, pos);
    // llama.cpp stores keys and values as f16 and converts q to f16 for the K·q product.
    std::copy_n(k, kv_row, kc);
    std::copy_n(v, kv_row, vc);
    k_.round_f16(kc, kv_row);
    k_.round_f16(vc, kv_row);
    k_.round_f16(q, q_row);
  }

  // Causal attention for n rows of q into out[n][n_head·hd]; where(i, kv_offset) says what row i
  // attends to, from float kv_offset of each cached row (its KV head).
  template <typename Where>
  void attend(int n, const float* q, float* out, Where&& where) {
    const int hd = c_.head_dim;
    const int q_row = c_.n_head * hd;
    std::fill(out, out + static_cast<ptrdiff_t>(n) * q_row, 0.0f);
    const int group = c_.n_head / c_.n_head_kv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int items = n * c_.n_head;
    pool_.run([&](int thread, int threads) {
      float* scores = scores_[thread].data();
      for (int item = items * thread / threads; item < items * (thread + 1) / threads; ++item) {
        const int i = item / c_.n_head;
        const int h = item % c_.n_head;
        const RowKv kv = where(i, static_cast<size_t>(h / group) * hd);
        const int len = kv.len;
        k_.attn_scores(q + i * q_row + h * hd, kv.k, len, hd, kv.one_query, scores);
        float max = -INFINITY;
        for (int j = 0; j < len; ++j) max = std::max(max, scores[j] * scale);
        for (int j = 0; j < len; ++j) scores[j] *= scale;
        const double sum = k_.softmax_exp(scores, len, max);
        const float inv = static_cast<float>(1.0 / sum);
        // The probabilities meet the f16 values as f16, as in llama.cpp's V·softmax product.
        for (int j = 0; j < len; ++j) scores[j] *= inv;
        k_.round_f16(scores, static_cast<size_t>(len));
        k_.attn_accumulate(scores, kv.v, len, hd, kv.one_query,
                           out + static_cast<size_t>(i) * q_row + h * hd);
      }
    });
  }

  void rope(float* x, int pos) const {
    const int pairs = c_.rope_dim / 2;
    const float* cs = rope_cos_.data() + static_cast<size_t>(pos) * pairs;
    const float* sn = rope_sin_.data() + static_cast<size_t>(pos) * pairs;
    // LLM_ARCH_LLAMA uses ggml's "normal" rope: adjacent pairs (x[2i], x[2i+1]) rotate; the GGUF
    // converter permuted Wq and Wk so that this matches the HF model's rotate-half. The products
    // fuse as GCC contracts ggml's x0·cos − x1·sin where the target has FMA (the first product
    // into the fma): a tenth of the keys differed from llama.cpp's by an ulp otherwise, and now and
    // then one survived the f16 rounding of the cache.
    for (int i = 0; i < pairs; ++i) {
      const float x0 = x[2 * i];
      const float x1 = x[2 * i + 1];
      x[2 * i] = std::fma(x0, cs[i], -(x1 * sn[i]));
      x[2 * i + 1] = std::fma(x0, sn[i], x1 * cs[i]);
    }
  }

  static bool same_kind(const Linear& a, const Linear& b) {
    return activation_kind(a.type, a.name) == activation_kind(b.type, b.name);
  }

  // The activations `w` reads, from slot `slot` of the scratch (one slot per matrix of a region
  // whose activations could differ in kind).
  const Activations& prepare(const Linear& w, const float* x, int n, int slot) {
    Activations& a = acts_[slot];
    quantize_activations(activation_kind(w.type, w.name), x, n, w.cols, a, k_);
    return a;
  }

  void gemm(const Linear& w, const Activations& x, int begin, int end, int n, float* y,
            size_t ldy) const {
    gemm_for(k_, w.type)(w.cols, w.data + static_cast<size_t>(begin) * w.row_bytes, w.row_bytes,
                         end - begin, x, 0, n, y + begin, ldy);
  }

  // Several matrices in one parallel region; the threads split their rows as one list.
  void run_jobs(std::span<const Job> jobs, int n) {
    int total = 0;
    for (const Job& j : jobs) total += j.w->rows;
    pool_.run([&](int thread, int threads) {
      auto [begin, end] = split_rows(total, thread, threads);
      int base = 0;
      for (const Job& j : jobs) {
        const int b = std::max(begin - base, 0);
        const int e = std::min(end - base, j.w->rows);
        if (b < e) gemm(*j.w, *j.x, b, e, n, j.y, j.ldy);
        base += j.w->rows;
      }
    });
  }

  // x += x_in · Wᵀ, each thread adding the rows it computed.
  void residual_matmul(const Linear& w, const Activations& a, int n, float* x) {
    const size_t d = static_cast<size_t>(w.rows);
    ensure(out_, n * d);
    pool_.run([&](int thread, int threads) {
      auto [begin, end] = split_rows(w.rows, thread, threads);
      if (begin >= end) return;
      gemm(w, a, begin, end, n, out_.data(), d);
      for (int c = 0; c < n; ++c)
        for (int r = begin; r < end; ++r) x[c * d + r] += out_[c * d + r];
    });
  }

  const LlamaConfig& c_;
  const LlamaWeights& w_;
  ThreadPool& pool_;
  const KernelTable& k_;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<std::vector<float>> scores_;  // per thread
  std::vector<float> xn_, gate_, up_, out_;
  std::vector<int> row_sequence_, row_position_;  // per row of a paged step
  Activations acts_[3];
};

}  // namespace

void rms_norm(const float* x, const float* w, int n, int dim, float eps, float* y) {
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* yr = y + static_cast<size_t>(r) * dim;
    double sum = 0;
    // The square in float, the sum in double: ggml's order, which the logits are compared with.
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / dim);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

std::unique_ptr<HotBlocks> make_cpu_blocks(const LlamaConfig& config, const LlamaWeights& weights,
                                           int context_length, ThreadPool& pool,
                                           const KernelTable& kernels) {
  return std::make_unique<CpuBlocks>(config, weights, context_length, pool, kernels);
}

}  // namespace yirage::llm
