// The AVX2 and AVX-512 kernel tables sum as llama.cpp built for that instruction set does
// (kernels_simd.inc), so that the engine's logits equal llama.cpp's bit for bit. These tests
// re-derive each order in plain scalar code, from ggml's source, and require the same bits: an edit
// that reorders a sum (or the exp's last step) fails here before the llama.cpp comparison would
// show it.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string_view>
#include <vector>

#include "llm/kernels.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using test_util::random_floats;

// GCC's _mm512_reduce_add_ps: lane l plus lane l + 8, then plus l + 4, then (0 + 2) + (1 + 3).
float reduce16(const float* v) {
  float a[8], b[4];
  for (int l = 0; l < 8; ++l) a[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) b[l] = a[l + 4] + a[l];
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// ggml_v_expf for __m512: 1 + p(b) rounded, then scaled by 2^n (vscalefps).
float exp_avx512(float x) {
  const float r = 0x1.8p23f;
  const float n = std::fma(x, 0x1.715476p+0f, r) - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192) return n <= 0 ? 0.0f : std::numeric_limits<float>::infinity();
  return std::ldexp(j, static_cast<int>(n));
}

// ggml_vec_soft_max_f32: groups of 16 reduced in float, added to a double; the row runs on past
// n with masked entries (exp 0).
double softmax_avx512(std::vector<float>& x, float max) {
  double sum = 0;
  for (size_t i = 0; i < x.size(); i += 16) {
    float group[16] = {};
    for (size_t l = 0; l < 16 && i + l < x.size(); ++l)
      group[l] = x[i + l] = exp_avx512(x[i + l] - max);
    sum += reduce16(group);
  }
  return sum;
}

// tinyBLAS's hsum of 8 lanes: high half plus low, then (0 + 2) + (1 + 3).
float hsum8(const float* v) {
  float h[4];
  for (int l = 0; l < 4; ++l) h[l] = v[l] + v[l + 4];
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// GGML_F32x8_REDUCE's last step: halves added, then two horizontal adds, (0 + 1) + (2 + 3).
float hadd8(const float* v) {
  float h[4];
  for (int l = 0; l < 4; ++l) h[l] = v[l] + v[l + 4];
  return (h[0] + h[1]) + (h[2] + h[3]);
}

// The orders of llama.cpp's CPU attention for `width`-lane vectors (16: AVX-512, 8: AVX2), from
// ggml's source: a[i·step] · b[i] summed over i < n.
struct Orders {
  int width;
  // tinyBLAS (a prompt): one accumulator over the length, then its horizontal sum.
  float prompt(const float* a, const float* b, int n, int step) const {
    float lanes[16] = {};
    for (int i = 0; i < n; ++i) lanes[i % width] = std::fma(a[i * step], b[i], lanes[i % width]);
    return width == 16 ? reduce16(lanes) : hsum8(lanes);
  }
  // ggml_vec_dot_f16 (one query): four accumulators over steps of 4·width, added 0 + 2 and
  // 1 + 3, then 0 + 1, then reduced; the leftovers past the last whole step in double (with
  // masked keys there are none: the row runs on with zeros).
  float decode(const float* a, const float* b, int n, int step, bool leftovers_in_double) const {
    float acc[4][16] = {};
    const int whole = leftovers_in_double ? n / (4 * width) * (4 * width) : n;
    for (int i = 0; i < whole; ++i) {
      float& lane = acc[(i / width) % 4][i % width];
      lane = std::fma(a[i * step], b[i], lane);
    }
    float x[16];
    for (int l = 0; l < width; ++l) x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    double sum = width == 16 ? reduce16(x) : hadd8(x);
    for (int i = whole; i < n; ++i) sum += static_cast<double>(a[i * step] * b[i]);
    return static_cast<float>(sum);
  }
};

void expect_attention_orders(const KernelTable& t, const Orders& o) {
  // Head dims 64 and 128, and 80, whose last 16 are ggml's leftovers when decoding on AVX-512;
  // key counts below, at and past the groups.
  for (int dim : {64, 80, 128})
    for (int n : {5, 16, 19, 64, 150})
      for (bool one_query : {false, true}) {
        const int stride = dim + 16;
        const std::vector<float> q = random_floats(dim, 1), kv = random_floats(n * stride, 2);
        const std::vector<float> p = random_floats(n, 3, 0.1f);
        std::vector<float> scores(n), out(dim, 0.0f);
        t.attn_scores(q.data(), contiguous_rows(kv.data(), stride), n, dim, one_query,
                      scores.data());
        t.attn_accumulate(p.data(), contiguous_rows(kv.data(), stride), n, dim, one_query,
                          out.data());
        for (int j = 0; j < n; ++j) {
          const float* k = kv.data() + j * stride;
          const float want =
              one_query ? o.decode(k, q.data(), dim, 1, true) : o.prompt(k, q.data(), dim, 1);
          EXPECT_EQ(std::bit_cast<uint32_t>(scores[j]), std::bit_cast<uint32_t>(want))
              << t.isa << " scores dim " << dim << " n " << n << " one_query " << one_query;
        }
        // Vᵀ·p: the products run along the keys.
        for (int i = 0; i < dim; ++i) {
          const float want = one_query ? o.decode(kv.data() + i, p.data(), n, stride, false)
                                       : o.prompt(kv.data() + i, p.data(), n, stride);
          EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want))
              << t.isa << " values dim " << dim << " n " << n << " one_query " << one_query;
        }
      }
}

const KernelTable* table(std::string_view isa) {
  for (const KernelTable* t : available_kernels())
    if (t->isa == isa) return t;
  return nullptr;
}

TEST(KernelOrder, AttentionSumsAsLlamaCpp) {
  const KernelTable* avx2 = table("avx2");
  const KernelTable* avx512 = table("avx512vnni");
  if (!avx2 && !avx512) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512 VNNI";
  if (avx2) expect_attention_orders(*avx2, Orders{8});
  if (avx512) expect_attention_orders(*avx512, Orders{16});
}

TEST(KernelOrder, SoftmaxAndSwigluAsLlamaCpp) {
  const KernelTable* t = table("avx512vnni");
  if (!t) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  for (int n : {2, 5, 16, 37, 64}) {
    std::vector<float> x = random_floats(n, 7 + n, 6.0f), u = random_floats(n, 8 + n);
    x[0] = -INFINITY;  // a masked score
    const float max = *std::max_element(x.begin(), x.end());
    std::vector<float> want = x, got = x;
    const double want_sum = softmax_avx512(want, max);
    EXPECT_EQ(t->softmax_exp(got.data(), n, max), want_sum) << n;
    EXPECT_EQ(got, want) << n;
    // SiLU · u, 16 at a time by the AVX-512 exp, the tail by libm's expf (ggml_silu_f32).
    std::vector<float> g = random_floats(n, 9 + n, 4.0f), want_g = g;
    for (int i = 0; i < n; ++i) {
      const float e = i < n / 16 * 16 ? exp_avx512(-g[i]) : std::exp(-g[i]);
      want_g[i] = g[i] / (1.0f + e) * u[i];
    }
    t->swiglu(g.data(), u.data(), n);
    EXPECT_EQ(g, want_g) << n;
  }
  // The AVX-512 exp is still exp: within 2 ulp over the softmax range.
  for (float v : {-80.0f, -10.5f, -1.0f, -0.001f, 0.0f, 0.7f, 20.0f})
    EXPECT_NEAR(exp_avx512(v), std::exp(double{v}), 2.5e-7 * std::exp(double{v})) << v;
}

}  // namespace
}  // namespace yirage::llm
