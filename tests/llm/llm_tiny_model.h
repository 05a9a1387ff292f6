// A tiny random-weight Llama written as GGUF (through llm_gguf_writer.h) and a plain reference
// forward pass for it: weights dequantized to float, every sum in double, no caching. The engine's
// forward pass is tested against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llm/llm.h"
#include "llm_gguf_writer.h"

namespace yirage::llm::testing {

// A prompt in the tiny model's vocabulary.
inline const std::vector<TokenId> kTinyPrompt = {1, 40, 101, 102, 200, 7, 264, 33, 33, 150, 2, 99};

struct TinyLlama {
  int n_layer = 2;
  int n_embd = 64;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 96;
  int n_vocab = 265;  // add_tiny_gpt2_tokenizer's vocabulary
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  // ggml type ids: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0 (zeros), 8 Q8_0, 30 BF16.
  uint32_t matrix_type = 3;
  uint32_t embd_type = 8;
  bool tied = true;
  uint64_t seed = 1;
};

inline void put_f16(ByteSink& s, float x) {
  s.put<uint16_t>(f32_to_f16(x));
}

// Encodes `x` (a multiple of 32 values for the block types) as ggml type `type`, rounding the way
// ggml's reference quantizers do.
inline std::vector<std::byte> encode(const std::vector<float>& x, uint32_t type) {
  ByteSink s;
  if (type == 0) return float_bytes(x);
  if (type == 1) {
    for (float v : x) put_f16(s, v);
    return s.bytes;
  }
  if (type == 6) {  // Q5_0, as zero blocks of 22 bytes: only its rejection is tested
    s.bytes.resize(x.size() / 32 * 22);
    return s.bytes;
  }
  if (type == 30) {  // BF16: the top half of the f32 bits (truncation is enough for tests)
    for (float v : x) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      s.put<uint16_t>(static_cast<uint16_t>(bits >> 16));
    }
    return s.bytes;
  }
  for (size_t b = 0; b < x.size(); b += 32) {
    const float* v = x.data() + b;
    if (type == 8) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / 127;
      const float id = d != 0 ? 1 / d : 0;
      put_f16(s, d);
      for (int i = 0; i < 32; ++i) s.put<int8_t>(static_cast<int8_t>(std::round(v[i] * id)));
    } else if (type == 2) {  // ggml's quantize_row_q4_0_ref: d = (the value of largest |x|) / -8
      float amax = 0, max = 0;
      for (int i = 0; i < 32; ++i)
        if (std::fabs(v[i]) > amax) amax = std::fabs(max = v[i]);
      const float d = max / -8;
      const float id = d != 0 ? 1 / d : 0;
      put_f16(s, d);
      auto q = [&](float f) { return static_cast<uint8_t>(std::min(15, int(f * id + 8.5f))); };
      for (int j = 0; j < 16; ++j)
        s.put<uint8_t>(static_cast<uint8_t>(q(v[j]) | (q(v[j + 16]) << 4)));
    } else if (type == 3) {
      const float lo = *std::min_element(v, v + 32);
      const float hi = *std::max_element(v, v + 32);
      const float d = (hi - lo) / 15;
      const float id = d != 0 ? 1 / d : 0;
      put_f16(s, d);
      put_f16(s, lo);
      for (int j = 0; j < 16; ++j) {
        auto q = [&](float f) {
          return static_cast<uint8_t>(std::clamp(static_cast<int>(f * id + 0.5f), 0, 15));
        };
        s.put<uint8_t>(static_cast<uint8_t>(q(v[j] - lo) | (q(v[j + 16] - lo) << 4)));
      }
    }
  }
  return s.bytes;
}

// The GGUF file of a tiny model with random weights (norm weights around 1).
inline std::vector<std::byte> write_tiny_llama(const TinyLlama& m) {
  GgufWriter w;
  w.string("general.architecture", "llama");
  w.scalar<uint32_t>("llama.block_count", GgufWriter::U32, m.n_layer);
  w.scalar<uint32_t>("llama.context_length", GgufWriter::U32, 256);
  w.scalar<uint32_t>("llama.embedding_length", GgufWriter::U32, m.n_embd);
  w.scalar<uint32_t>("llama.feed_forward_length", GgufWriter::U32, m.n_ff);
  w.scalar<uint32_t>("llama.attention.head_count", GgufWriter::U32, m.n_head);
  w.scalar<uint32_t>("llama.attention.head_count_kv", GgufWriter::U32, m.n_head_kv);
  w.scalar<float>("llama.rope.freq_base", GgufWriter::F32, m.rope_base);
  w.scalar<float>("llama.attention.layer_norm_rms_epsilon", GgufWriter::F32, m.rms_eps);
  add_tiny_gpt2_tokenizer(w);
  std::mt19937_64 rng(m.seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto random = [&](size_t n, float mean = 0) {
    std::vector<float> v(n);
    for (float& x : v) x = mean + normal(rng);
    return v;
  };
  const uint64_t e = m.n_embd;
  const uint64_t hd = e / m.n_head;
  // Weights of standard deviation 1/sqrt(fan-in) keep every layer's output near unit scale, like
  // a trained model; larger ones make the random network chaotic, amplifying rounding.
  auto matrix = [&](const std::string& name, uint64_t cols, uint64_t rows, uint32_t type,
                    float scale) {
    std::vector<float> v = random(cols * rows);
    for (float& x : v) x *= scale;
    w.tensor({name, {cols, rows}, type, encode(v, type), std::nullopt});
  };
  const float in_e = 2.0f / std::sqrt(static_cast<float>(e));  // random() has σ = 0.5
  const float in_ff = 2.0f / std::sqrt(static_cast<float>(m.n_ff));
  matrix("token_embd.weight", e, m.n_vocab, m.embd_type, 2.0f);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    w.tensor({b + "attn_norm.weight", {e}, 0, float_bytes(random(e, 1.0f)), std::nullopt});
    w.tensor({b + "ffn_norm.weight", {e}, 0, float_bytes(random(e, 1.0f)), std::nullopt});
    matrix(b + "attn_q.weight", e, e, m.matrix_type, in_e);
    matrix(b + "attn_k.weight", e, hd * m.n_head_kv, m.matrix_type, in_e);
    matrix(b + "attn_v.weight", e, hd * m.n_head_kv, m.matrix_type, in_e);
    matrix(b + "attn_output.weight", e, e, m.matrix_type, in_e);
    matrix(b + "ffn_gate.weight", e, m.n_ff, m.matrix_type, in_e);
    matrix(b + "ffn_up.weight", e, m.n_ff, m.matrix_type, in_e);
    matrix(b + "ffn_down.weight", m.n_ff, e, m.matrix_type, in_ff);
  }
  w.tensor({"output_norm.weight", {e}, 0, float_bytes(random(e, 1.0f)), std::nullopt});
  if (!m.tied) matrix("output.weight", e, m.n_vocab, m.matrix_type, 2.0f);
  return w.finish();
}

// The reference forward pass: logits for every position of `tokens`, from scratch.
inline std::vector<std::vector<double>> reference_logits(const GgufFile& file,
                                                         const std::vector<TokenId>& tokens) {
  const LlamaConfig c = LlamaConfig::from_gguf(file);
  auto tensor = [&](const std::string& name) { return file.dequantize(file.tensor(name)); };
  const int e = c.n_embd, hd = c.head_dim, nkv = c.n_head_kv, n = static_cast<int>(tokens.size());
  using Rows = std::vector<std::vector<double>>;
  // y[t][r] = Σ_i W[r][i] x[t][i]
  auto matmul = [](const std::vector<float>& w, const Rows& x, int rows) {
    Rows y(x.size(), std::vector<double>(static_cast<size_t>(rows)));
    const size_t cols = x[0].size();
    for (size_t t = 0; t < x.size(); ++t)
      for (int r = 0; r < rows; ++r)
        for (size_t i = 0; i < cols; ++i) y[t][r] += w[r * cols + i] * x[t][i];
    return y;
  };
  auto norm = [&](const Rows& x, const std::vector<float>& w) {
    Rows y = x;
    for (auto& row : y) {
      double ss = 0;
      for (double v : row) ss += v * v;
      const double s = 1 / std::sqrt(ss / row.size() + c.rms_eps);
      for (size_t i = 0; i < row.size(); ++i) row[i] *= s * w[i];
    }
    return y;
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double theta = pos * std::pow(double{c.rope_base}, -2.0 * i / hd);
        double& a = v[h * hd + 2 * i];
        double& b = v[h * hd + 2 * i + 1];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(theta) - b0 * std::sin(theta);
        b = a0 * std::sin(theta) + b0 * std::cos(theta);
      }
  };
  const std::vector<float> embd = tensor("token_embd.weight");
  Rows x(n, std::vector<double>(e));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < e; ++i) x[t][i] = embd[static_cast<size_t>(tokens[t]) * e + i];
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    Rows h = norm(x, tensor(b + "attn_norm.weight"));
    Rows q = matmul(tensor(b + "attn_q.weight"), h, e);
    Rows k = matmul(tensor(b + "attn_k.weight"), h, nkv * hd);
    Rows v = matmul(tensor(b + "attn_v.weight"), h, nkv * hd);
    for (int t = 0; t < n; ++t) {
      rope(q[t], c.n_head, t);
      rope(k[t], nkv, t);
    }
    Rows att(n, std::vector<double>(e));
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < c.n_head; ++hh) {
        const int g = hh / (c.n_head / nkv);
        std::vector<double> s(t + 1);
        double max = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < hd; ++i) s[j] += q[t][hh * hd + i] * k[j][g * hd + i];
          s[j] /= std::sqrt(double(hd));
          max = std::max(max, s[j]);
        }
        for (double& sj : s) sum += sj = std::exp(sj - max);
        for (int j = 0; j <= t; ++j)
          for (int i = 0; i < hd; ++i) att[t][hh * hd + i] += s[j] / sum * v[j][g * hd + i];
      }
    Rows o = matmul(tensor(b + "attn_output.weight"), att, e);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < e; ++i) x[t][i] += o[t][i];
    h = norm(x, tensor(b + "ffn_norm.weight"));
    Rows gate = matmul(tensor(b + "ffn_gate.weight"), h, c.n_ff);
    Rows up = matmul(tensor(b + "ffn_up.weight"), h, c.n_ff);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < c.n_ff; ++i)
        gate[t][i] = gate[t][i] / (1 + std::exp(-gate[t][i])) * up[t][i];
    Rows d = matmul(tensor(b + "ffn_down.weight"), gate, e);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < e; ++i) x[t][i] += d[t][i];
  }
  Rows h = norm(x, tensor("output_norm.weight"));
  return matmul(tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight"), h, c.n_vocab);
}

}  // namespace yirage::llm::testing
