// The forward pass against the plain reference of llm_tiny_model.h, the KV cache against full
// recomputation, the kernels against the scalar ones, and config validation.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "llm/cpu_blocks.h"
#include "llm/llm.h"
#include "llm_test_backend.h"
#include "llm_tiny_model.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using test_util::error_of;
using test_util::random_floats;
using testing::GgufWriter;
using ::testing::HasSubstr;
using testing::kTinyPrompt;
using testing::reference_logits;
using testing::TinyLlama;
using testing::write_tiny_llama;

// max |a − b| over all logits, and the largest |b| (the logit scale).
std::pair<double, double> compare(std::span<const float> got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return {diff, scale};
}

struct ForwardCase {
  const char* name;
  uint32_t matrix_type;
  uint32_t embd_type;
  bool tied;
  double tolerance;  // of the logit scale
};

class Forward : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(Forward, MatchesReferenceAtEveryPosition) {
  const ForwardCase& p = GetParam();
  TinyLlama m;
  m.matrix_type = p.matrix_type;
  m.embd_type = p.embd_type;
  m.tied = p.tied;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  GgufFile file = GgufFile::from_memory(bytes);
  const auto want = reference_logits(file, kTinyPrompt);
  // The quantized types run as superoptimized block graphs unless turned off; the float types
  // always take the hand-written kernels, which say why.
  const bool quantized = p.matrix_type == 2 || p.matrix_type == 3 || p.matrix_type == 8;
  for (bool fused : {true, false}) {
    for (int threads : {1, 3}) {
      LlamaModel model(file, ModelOptions{.threads = threads,
                                          .context_length = 64,
                                          .fused_blocks = fused,
                                          .backend = testing::cpu_backend()});
      if (fused && quantized)
        EXPECT_EQ(model.hot_path(), "fused kernel graphs on the cpu backend");
      else if (fused)
        EXPECT_THAT(model.hot_path(), HasSubstr("quant_matmul does not read"));
      else
        EXPECT_THAT(model.hot_path(), HasSubstr("fused blocks turned off"));
      model.forward(kTinyPrompt, /*all_logits=*/true);
      const std::vector<float>& rows = model.all_logits_rows();
      for (size_t t = 0; t < kTinyPrompt.size(); ++t) {
        auto [diff, scale] = compare(std::span(rows).subspan(t * m.n_vocab, m.n_vocab), want[t]);
        EXPECT_LE(diff, p.tolerance * scale)
            << "position " << t << ", " << threads << " threads, " << model.hot_path();
        EXPECT_GT(scale, 1.0);  // the model is not degenerate
      }
    }
  }
}

// The first model on a device optimizes each block graph and says so, one progress line per
// graph; the next finds every winner in the tuning cache.
TEST(Model, FusedBlocksAreOptimizedOnceAndThenCached) {
  // A cache of its own, empty at the start.
  std::string dir = (std::filesystem::temp_directory_path() / "yirage-llm-cache-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const char* previous = std::getenv("YIRAGE_CACHE_DIR");
  const std::string saved = previous ? previous : "";
  setenv("YIRAGE_CACHE_DIR", dir.c_str(), 1);
  TinyLlama m;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  GgufFile file = GgufFile::from_memory(bytes);
  auto open = [&] {
    std::vector<std::string> lines;
    ModelOptions options{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()};
    options.progress = [&](const std::string& line) { lines.push_back(line); };
    LlamaModel model(file, options);
    EXPECT_EQ(model.hot_path(), "fused kernel graphs on the cpu backend");
    return lines;
  };
  const std::vector<std::string> first = open();
  ASSERT_EQ(first.size(), 9u);
  EXPECT_THAT(first[0], HasSubstr("[1/9] rmsnorm+qkv, 64 rows:"));
  EXPECT_THAT(first[8], HasSubstr("[9/9] final norm + lm head:"));
  for (const std::string& line : first) EXPECT_THAT(line, HasSubstr("optimized in"));
  for (const std::string& line : open()) EXPECT_THAT(line, HasSubstr("cached"));
  if (previous)
    setenv("YIRAGE_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("YIRAGE_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// F32 weights take f32 activations: only the f16 rounding of the KV cache remains, so the bound is
// tight. Quantized weights also quantize activations to 8 bits.
INSTANTIATE_TEST_SUITE_P(
    Types, Forward,
    ::testing::Values(ForwardCase{"f32", 0, 0, false, 2e-3}, ForwardCase{"f16", 1, 0, true, 2e-3},
                      ForwardCase{"bf16", 30, 0, true, 2e-3}, ForwardCase{"q4_0", 2, 8, true, 0.03},
                      ForwardCase{"q8_0", 8, 8, true, 0.03}, ForwardCase{"q4_1", 3, 8, true, 0.03},
                      ForwardCase{"q4_1_untied", 3, 8, false, 0.03}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Model, KvCacheDecodeEqualsFullRecompute) {
  TinyLlama m;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  GgufFile file = GgufFile::from_memory(bytes);
  LlamaModel full(
      file, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  full.forward(kTinyPrompt, true);
  LlamaModel step(
      file, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  // A prefill of 5, then one token at a time.
  step.forward(std::span(kTinyPrompt).first(5));
  for (size_t t = 5; t < kTinyPrompt.size(); ++t) {
    std::span<const float> logits = step.forward(std::span(kTinyPrompt).subspan(t, 1));
    for (int i = 0; i < m.n_vocab; ++i)
      ASSERT_NEAR(logits[i], full.all_logits_rows()[t * m.n_vocab + i], 1e-4)
          << "position " << t << ", logit " << i;
  }
  EXPECT_EQ(step.position(), static_cast<int>(kTinyPrompt.size()));
  // Truncating and replaying gives the same logits again.
  step.truncate(7);
  std::span<const float> again = step.forward(std::span(kTinyPrompt).subspan(7, 1));
  for (int i = 0; i < m.n_vocab; ++i)
    ASSERT_NEAR(again[i], full.all_logits_rows()[7 * m.n_vocab + i], 1e-4);
}

TEST(Model, ContextOverflowAndBadTokensAreErrors) {
  TinyLlama m;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  GgufFile file = GgufFile::from_memory(bytes);
  LlamaModel model(
      file, ModelOptions{.threads = 1, .context_length = 8, .backend = testing::cpu_backend()});
  EXPECT_THAT(error_of([&] { model.forward(kTinyPrompt); }), HasSubstr("context full"));
  EXPECT_THAT(error_of([&] { model.forward(std::vector<TokenId>{5000}); }),
              HasSubstr("token id 5000 is outside the vocabulary of 265"));
  EXPECT_THAT(error_of([&] { model.forward(std::vector<TokenId>{}); }), HasSubstr("no tokens"));
  EXPECT_THAT(error_of([&] { model.truncate(3); }), HasSubstr("the cache holds 0"));
}

TEST(Model, AModelLargerThanItsMemoryBudgetIsRefusedWithTheNumbers) {
  TinyLlama m;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  GgufFile file = GgufFile::from_memory(bytes);
  // The KV cache alone: 2 (keys, values) × 2 layers × 64 tokens × 2 kv heads × 16 dims × 4 bytes.
  const uint64_t kv = 2 * 2 * 64 * 2 * 16 * 4;
  const std::string error = error_of([&] {
    LlamaModel model(file,
                     ModelOptions{.threads = 1, .context_length = 64, .memory_budget_bytes = kv});
  });
  EXPECT_THAT(error, HasSubstr("the model needs"));
  EXPECT_THAT(error, HasSubstr("of KV cache for 64 tokens"));
  EXPECT_THAT(error, HasSubstr(fmt::format("({} bytes) of its memory budget", kv)));
  EXPECT_EQ(error.find('\n'), std::string::npos);
  // With room for the weights too, it loads.
  LlamaModel fits(file, ModelOptions{.threads = 1,
                                     .context_length = 64,
                                     .memory_budget_bytes = 1 << 30,
                                     .fused_blocks = false});
  EXPECT_EQ(fits.context_length(), 64);
}

TEST(Config, ReadsTheTinyModel) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});
  const LlamaConfig c = LlamaConfig::from_gguf(GgufFile::from_memory(bytes));
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.n_vocab, 265);
  EXPECT_TRUE(c.tied_embeddings);
}

TEST(Config, BadShapesAreOneLineErrors) {
  TinyLlama heads;
  heads.n_head = 5;  // 64 is not a multiple of 5
  EXPECT_THAT(error_of([&] {
                const auto bytes = write_tiny_llama(heads);
                LlamaConfig::from_gguf(GgufFile::from_memory(bytes));
              }),
              HasSubstr("embedding_length 64 is not a multiple of llama.attention.head_count 5"));
  TinyLlama kv;
  kv.n_head_kv = 3;
  EXPECT_THAT(error_of([&] {
                const auto bytes = write_tiny_llama(kv);
                LlamaConfig::from_gguf(GgufFile::from_memory(bytes));
              }),
              HasSubstr("head_count 4 is not a multiple of llama.attention.head_count_kv 3"));
  TinyLlama q5_0;
  q5_0.matrix_type = 6;  // Q5_0 has a dequantizer but no matmul kernel
  EXPECT_THAT(error_of([&] {
                const auto bytes = write_tiny_llama(q5_0);
                GgufFile file = GgufFile::from_memory(bytes);
                LlamaModel model(file, ModelOptions{.threads = 1,
                                                    .context_length = 8,
                                                    .backend = testing::cpu_backend()});
              }),
              HasSubstr("tensor blk.0.attn_q.weight: no matmul kernel for weights of type Q5_0"));
}

TEST(Config, HugeDimensionsAndWrongArchitectureAreRejected) {
  auto minimal = [](const std::string& arch, uint32_t layers) {
    GgufWriter w;
    w.string("general.architecture", arch);
    w.scalar<uint32_t>("llama.block_count", GgufWriter::U32, layers);
    w.scalar<uint32_t>("llama.embedding_length", GgufWriter::U32, 64);
    return w.finish();
  };
  {
    const auto bytes = minimal("gpt2", 2);
    EXPECT_THAT(error_of([&] { LlamaConfig::from_gguf(GgufFile::from_memory(bytes)); }),
                HasSubstr("general.architecture is 'gpt2'"));
  }
  {
    const auto bytes = minimal("llama", 4000000000u);
    EXPECT_THAT(error_of([&] { LlamaConfig::from_gguf(GgufFile::from_memory(bytes)); }),
                HasSubstr("llama.block_count = 4000000000 is out of range"));
  }
  {
    const auto bytes = minimal("llama", 2);  // no feed_forward_length
    EXPECT_THAT(error_of([&] { LlamaConfig::from_gguf(GgufFile::from_memory(bytes)); }),
                HasSubstr("llama.feed_forward_length"));
  }
}

TEST(Config, MissingTensorIsNamed) {
  TinyLlama m;
  m.n_layer = 1;
  const std::vector<std::byte> bytes = write_tiny_llama(m);
  // A config claiming two layers for a file that holds one.
  LlamaConfig c = LlamaConfig::from_gguf(GgufFile::from_memory(bytes));
  c.n_layer = 2;
  EXPECT_THAT(error_of([&] { LlamaWeights::from_gguf(GgufFile::from_memory(bytes), c); }),
              HasSubstr("blk.1.attn_norm.weight"));
}

// --- kernels ---

class Kernels : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Kernels, EveryIsaAgreesWithScalarIncludingTileEdges) {
  const uint32_t type = GetParam();
  const GgmlType gtype = static_cast<GgmlType>(type);
  for (auto [rows, k, n] : {std::tuple{13, 96, 7}, std::tuple{4, 32, 1}, std::tuple{9, 64, 5}}) {
    const std::vector<float> wf = random_floats(static_cast<size_t>(rows) * k, 10 + rows);
    const std::vector<std::byte> w = testing::encode(wf, type);
    const size_t row_bytes = w.size() / rows;
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * k, 20 + n);
    Activations act;
    quantize_activations(activation_kind(gtype, "w"), x.data(), n, k, act);
    std::vector<float> want(static_cast<size_t>(n) * rows), got(want.size());
    gemm_for(scalar_kernels(), gtype)(k, w.data(), row_bytes, rows, act, 0, n, want.data(), rows);
    // The scalar kernel against dequantized weights and activations in double.
    std::vector<float> wd(wf.size());
    dequantize(gtype, w, wd, "w");
    for (int c = 0; c < n; ++c)
      for (int r = 0; r < rows; ++r) {
        double ref = 0;
        for (int i = 0; i < k; ++i) {
          const double xi =
              act.f != nullptr ? x[c * k + i] : act.qs[c * k + i] * double{act.d[(c * k + i) / 32]};
          ref += double{wd[r * k + i]} * xi;
        }
        // Q4_1 kernels use Q8_1's s = d·Σq rounded through f16 (as ggml stores it) for the
        // offset term m·Σx: allow that rounding, |m·s|·2⁻¹¹ per block.
        double slack = 0;
        if (gtype == GgmlType::Q4_1) {
          for (int b = 0; b < k / 32; ++b) {
            uint16_t m;
            std::memcpy(&m, w.data() + r * row_bytes + b * 20 + 2, 2);
            slack += std::abs(f16_to_f32(m) * act.s[(c * k) / 32 + b]) / 2048;
          }
        }
        EXPECT_NEAR(want[c * rows + r], ref, 1e-4 * (1 + std::abs(ref)) + slack) << r << "," << c;
      }
    for (const KernelTable* table : available_kernels()) {
      std::fill(got.begin(), got.end(), NAN);
      gemm_for(*table, gtype)(k, w.data(), row_bytes, rows, act, 0, n, got.data(), rows);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << table->isa << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Kernels, ::testing::Values(0u, 1u, 2u, 3u, 8u, 30u));

TEST(Kernels, AttentionHelpersAgreeWithScalar) {
  // Head dims 20 (no multiple of 16), 64 and 128; 70 keys span more than one group of 64.
  for (int dim : {20, 64, 128})
    for (int n : {11, 70})
      for (bool one_query : {false, true}) {
        const int stride = dim + 4;
        const std::vector<float> q = random_floats(dim, 1), kv = random_floats(n * stride, 2);
        const std::vector<float> p = random_floats(n, 3);
        std::vector<float> want(n), got(n), acc_want(dim, 0.5f), acc_got(dim, 0.5f);
        scalar_kernels().attn_scores(q.data(), contiguous_rows(kv.data(), stride), n, dim,
                                     one_query, want.data());
        scalar_kernels().attn_accumulate(p.data(), contiguous_rows(kv.data(), stride), n, dim,
                                         one_query, acc_want.data());
        for (const KernelTable* t : available_kernels()) {
          t->attn_scores(q.data(), contiguous_rows(kv.data(), stride), n, dim, one_query,
                         got.data());
          std::fill(acc_got.begin(), acc_got.end(), 0.5f);
          t->attn_accumulate(p.data(), contiguous_rows(kv.data(), stride), n, dim, one_query,
                             acc_got.data());
          for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << t->isa << " " << dim;
          for (int i = 0; i < dim; ++i)
            EXPECT_NEAR(acc_got[i], acc_want[i], 1e-4) << t->isa << " " << dim;
        }
      }
}

TEST(Kernels, AttentionThroughABlockTableGivesTheContiguousBits) {
  // The same 70 rows stored as blocks of 16 in a shuffled pool: every table sums in the same
  // order as over the contiguous rows, so a paged cache changes no bit of the attention.
  const int dim = 64, n = 70, block = 16, stride = dim + 4;
  const std::vector<float> q = random_floats(dim, 11), kv = random_floats(n * stride, 12);
  const std::vector<float> p = random_floats(n, 13);
  const std::vector<int32_t> table = {3, 0, 4, 1, 2};  // block i of the sequence lives in table[i]
  std::vector<float> pool(table.size() * block * stride);
  for (int j = 0; j < n; ++j)
    std::copy_n(kv.data() + j * stride, stride,
                pool.data() + (table[j / block] * block + j % block) * stride);
  const KvRows paged{pool.data(), table.data(), block, size_t{block} * stride, size_t{stride}};
  for (const KernelTable* t : available_kernels())
    for (bool one_query : {false, true}) {
      std::vector<float> want(n), got(n), acc_want(dim, 0.5f), acc_got(dim, 0.5f);
      t->attn_scores(q.data(), contiguous_rows(kv.data(), stride), n, dim, one_query, want.data());
      t->attn_scores(q.data(), paged, n, dim, one_query, got.data());
      t->attn_accumulate(p.data(), contiguous_rows(kv.data(), stride), n, dim, one_query,
                         acc_want.data());
      t->attn_accumulate(p.data(), paged, n, dim, one_query, acc_got.data());
      EXPECT_EQ(got, want) << t->isa << " one_query " << one_query;
      EXPECT_EQ(acc_got, acc_want) << t->isa << " one_query " << one_query;
    }
}

TEST(Kernels, SoftmaxAndSwigluGiveTheSameBitsOnScalarAndAvx2) {
  for (int n : {2, 5, 16, 37, 64}) {
    std::vector<float> x = random_floats(n, 7 + n), u = random_floats(n, 8 + n);
    for (float& v : x) v *= 6;  // exp arguments from about −25 to 0 after the max
    x[0] = -INFINITY;           // a masked score
    const float max = *std::max_element(x.begin(), x.end());
    std::vector<float> want = x, want_g = x;
    const double want_sum = scalar_kernels().softmax_exp(want.data(), n, max);
    want_g[0] = 3;
    std::vector<float> got_g0 = want_g;
    scalar_kernels().swiglu(want_g.data(), u.data(), n);
    double ref = 0;
    for (int i = 1; i < n; ++i) ref += std::exp(double{x[i]} - max);
    EXPECT_NEAR(want_sum, ref, 1e-5 * ref);
    EXPECT_EQ(want[0], 0.0f);
    EXPECT_NEAR(want_g[0], 3 / (1 + std::exp(-3.0)) * u[0], 1e-5);
    for (const KernelTable* t : available_kernels()) {
      // The AVX-512 table takes ggml's AVX-512 forms instead (llm_kernel_order_test.cpp).
      if (t->isa == "avx512vnni") continue;
      std::vector<float> got = x, got_g = got_g0;
      EXPECT_EQ(t->softmax_exp(got.data(), n, max), want_sum) << t->isa << " n=" << n;
      EXPECT_EQ(got, want) << t->isa;
      t->swiglu(got_g.data(), u.data(), n);
      EXPECT_EQ(got_g, want_g) << t->isa;
    }
  }
  // ggml's exp is within 2 ulp of the true value over the softmax range.
  for (float v : {-80.0f, -10.5f, -1.0f, -0.001f, 0.0f, 0.7f, 20.0f})
    EXPECT_NEAR(ggml_expf(v), std::exp(double{v}), 2.5e-7 * std::exp(double{v})) << v;
}

TEST(Kernels, F16RoundingAndQuantizationGiveTheSameBitsOnEveryIsa) {
  // Random values at several magnitudes, with f16's edges: halfway cases, subnormals, overflow.
  std::vector<float> x = random_floats(32 * 7 + 5, 11);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i % 40) - 20);
  const std::vector<float> edges{
      0.0f,     -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 6.1e-5f, 5.96e-8f,
      2.98e-8f, 3e-8f, 65504.0f,           65520.0f,           1e6f,    -1e6f};
  std::copy(edges.begin(), edges.end(), x.begin());
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block
  std::vector<float> want = x;
  scalar_kernels().round_f16(want.data(), want.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(want[i], f16_to_f32(f32_to_f16(x[i]))) << i;
  const size_t blocks = x.size() / 32;
  Activations q1, q0;
  quantize_activations(ActivationKind::Q8_1, x.data(), 1, static_cast<int>(blocks * 32), q1);
  quantize_activations(ActivationKind::Q8_0, x.data(), 1, static_cast<int>(blocks * 32), q0);
  for (const KernelTable* t : available_kernels()) {
    std::vector<float> got = x;
    t->round_f16(got.data(), got.size());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << t->isa << " " << x[i];
    Activations a1, a0;
    quantize_activations(ActivationKind::Q8_1, x.data(), 1, static_cast<int>(blocks * 32), a1, *t);
    quantize_activations(ActivationKind::Q8_0, x.data(), 1, static_cast<int>(blocks * 32), a0, *t);
    EXPECT_EQ(a1.qs, q1.qs) << t->isa;
    EXPECT_EQ(a1.d, q1.d) << t->isa;
    EXPECT_EQ(a1.s, q1.s) << t->isa;
    EXPECT_EQ(a0.qs, q0.qs) << t->isa;
    EXPECT_EQ(a0.d, q0.d) << t->isa;
    EXPECT_EQ(a0.s, std::vector<float>(blocks, 0.0f)) << t->isa;
  }
}

TEST(Kernels, ActivationQuantizationFollowsGgml) {
  std::vector<float> x = random_floats(64, 5);
  x[3] = 0;
  std::fill(x.begin() + 32, x.end(), 0.0f);  // an all-zero block gets d = 0, not NaN
  Activations a;
  quantize_activations(ActivationKind::Q8_1, x.data(), 1, 64, a);
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[i]));
  EXPECT_FLOAT_EQ(a.d[0], f16_to_f32(f32_to_f16(amax / 127)));
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(a.qs[i] * amax / 127, x[i], amax / 127 / 2 + 1e-6);
    sum += a.qs[i];
  }
  EXPECT_NEAR(a.s[0], sum * amax / 127, std::abs(sum * amax / 127) * 1e-3 + 1e-6);
  EXPECT_EQ(a.d[1], 0.0f);
  EXPECT_EQ(a.qs[40], 0);
  EXPECT_THAT(error_of([&] { quantize_activations(ActivationKind::Q8_0, x.data(), 1, 40, a); }),
              HasSubstr("not a multiple of 32"));
  EXPECT_THAT(error_of([] { activation_kind(GgmlType::Q6_K, "blk.0.ffn_down.weight"); }),
              HasSubstr("blk.0.ffn_down.weight: no matmul kernel for weights of type Q6_K"));
}

TEST(Kernels, RmsNormScalesToUnitRms) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 1};
  std::vector<float> y(4);
  rms_norm(x.data(), w.data(), 1, 4, 0, y.data());
  const double s = 1 / std::sqrt((1 + 4 + 9 + 16) / 4.0);
  EXPECT_NEAR(y[0], 1 * s, 1e-6);
  EXPECT_NEAR(y[2], 6 * s, 1e-6);
}

}  // namespace
}  // namespace yirage::llm
