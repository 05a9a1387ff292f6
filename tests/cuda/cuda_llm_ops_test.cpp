// On a GPU (skipped without one, unless YIRAGE_REQUIRE_CUDA=1): quant_matmul over Q4_0, Q4_1 and
// Q8_0 blocks, embedding and rope in both conventions against the reference executor, on fresh
// random inputs with outputs poisoned before each launch (backend::run_on). The weights are real
// GGUF blocks (random quants, finite f16 scales), the activations span ranges from small to large,
// and the row counts cover decode (1), a batch that is not a multiple of the kernel's group of
// rows (5), and a prompt (64), at the widths of SmolLM2 and Llama-3-8B.
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_support.h"
#include "ir/ir.h"
#include "paged_attention_cases.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

using cuda_testing::cuda_or_skip;
using cuda_testing::fresh_seed;
using cuda_testing::quant_weight;
using cuda_testing::relative_l2;

void expect_close(const std::vector<ir::HostTensor>& actual,
                  const std::vector<ir::HostTensor>& expected, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t o = 0; o < expected.size(); ++o) {
    int64_t bad = 0;
    for (int64_t i = 0; i < expected[o].size(); ++i) bad += !std::isfinite(actual[o].get(i));
    EXPECT_EQ(bad, 0) << what << " output " << o << ": elements not finite (unwritten?)";
    EXPECT_LE(relative_l2(actual[o], expected[o]), tolerance) << what << " output " << o;
  }
}

TEST(CudaLlmOps, QuantMatmulMatchesTheReference) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t n, k;
  };
  for (ir::QuantFormat format :
       {ir::QuantFormat::q4_0, ir::QuantFormat::q4_1, ir::QuantFormat::q8_0, ir::QuantFormat::f16,
        ir::QuantFormat::bf16})
    // bf16 at 16 and 64 rows takes tensor cores in groups of 8, 16 and 32 weight rows a block
    // (1024, 1536 and 4104 rows on the H100's 132 multiprocessors; 4104 leaves a part group).
    for (Shape s : {Shape{1536, 576}, Shape{576, 1536}, Shape{1024, 4096}, Shape{100, 14336},
                    Shape{4104, 1024}})
      for (int64_t m : {1, 5, 16, 64})
        for (float range : {1.0f, 1000.0f}) {
          ir::KernelGraph g;
          const ir::TensorRef x = g.input("x", {m, s.k}, ir::DType::f32);
          const ir::TensorRef w =
              g.input("w", {s.n, s.k / 32 * ir::quant_block_bytes(format)}, ir::DType::u8);
          g.mark_output(g.quant_matmul(x, w, format), "y");
          std::vector<ir::HostTensor> inputs;
          inputs.emplace_back(g.type(x));
          ir::fill_random(inputs.back(), rng, -range, range);
          inputs.push_back(quant_weight(format, s.n, s.k, rng));
          const std::string what =
              fmt::format("{} {}x{}x{} range {} seed {}", ir::quant_format_name(format), m, s.n,
                          s.k, range, seed);
          // The activations' quantization is exact; only the order of the blocks' float sum
          // differs from the reference, over at most 448 blocks. 16-bit float weights sum every
          // product in float, up to 14336 of them, in another order than the reference's.
          const double tolerance = ir::quant_reads_float_activations(format) ? 1e-4 : 1e-5;
          expect_close(run_on(*cuda, g, inputs), verify::run_reference(g, inputs), tolerance, what);
        }
}

TEST(CudaLlmOps, EmbeddingMatchesTheReference) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (ir::DType dtype : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    ir::KernelGraph g;
    const ir::TensorRef table = g.input("table", {49152, 576}, dtype);
    const ir::TensorRef ids = g.input("ids", {3, 7}, ir::DType::i32);
    g.mark_output(g.embedding(table, ids), "x");
    std::vector<ir::HostTensor> inputs;
    inputs.emplace_back(g.type(table));
    ir::fill_random(inputs.back(), rng, -100.0f, 100.0f);
    inputs.emplace_back(g.type(ids));
    std::uniform_int_distribution<int32_t> id(0, 49151);
    for (int64_t i = 0; i < inputs.back().size(); ++i) inputs.back().set_i32(i, id(rng));
    inputs.back().set_i32(0, 49151);  // the last row too
    // A gather copies: exact in every dtype.
    expect_close(run_on(*cuda, g, inputs), verify::run_reference(g, inputs), 0.0,
                 fmt::format("embedding {} seed {}", ir::dtype_name(dtype), seed));
  }
}

// Where the reference executor raises (an id outside the table, a negative position), a kernel
// cannot: the rows it would have written are NaN, so that no check of the output passes them.
TEST(CudaLlmOps, IdsOutsideTheTableAndNegativePositionsWriteNaN) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  ir::KernelGraph g;
  const ir::TensorRef table = g.input("table", {10, 64}, ir::DType::f32);
  const ir::TensorRef ids = g.input("ids", {3}, ir::DType::i32);
  const ir::TensorRef x = g.input("x", {2, 4, 64}, ir::DType::f32);
  const ir::TensorRef pos = g.input("positions", {2}, ir::DType::i32);
  g.mark_output(g.embedding(table, ids), "rows");
  g.mark_output(g.rope(x, pos), "rotated");
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef in : {table, ids, x, pos}) inputs.emplace_back(g.type(in));
  std::mt19937_64 rng(fresh_seed());
  ir::fill_random(inputs[0], rng);
  ir::fill_random(inputs[2], rng);
  inputs[1].set_i32(0, 3);
  inputs[1].set_i32(1, 10);  // one past the table
  inputs[1].set_i32(2, -1);
  inputs[3].set_i32(0, 5);
  inputs[3].set_i32(1, -2);
  const std::vector<ir::HostTensor> out = run_on(*cuda, g, inputs);
  for (int64_t d = 0; d < 64; ++d) {
    EXPECT_EQ(out[0].get(d), inputs[0].get(3 * 64 + d));
    EXPECT_TRUE(std::isnan(out[0].get(64 + d)));
    EXPECT_TRUE(std::isnan(out[0].get(128 + d)));
  }
  for (int64_t i = 0; i < 4 * 64; ++i) {
    EXPECT_TRUE(std::isfinite(out[1].get(i)));
    EXPECT_TRUE(std::isnan(out[1].get(4 * 64 + i)));
  }
}

TEST(CudaLlmOps, RopeInBothConventionsMatchesTheReference) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (ir::RopeStyle style : {ir::RopeStyle::interleaved, ir::RopeStyle::neox})
    for (ir::DType dtype : {ir::DType::f32, ir::DType::bf16})
      for (double theta : {10000.0, 500000.0}) {
        ir::KernelGraph g;
        const ir::TensorRef x = g.input("x", {2, 17, 8, 128}, dtype);
        const ir::TensorRef pos = g.input("positions", {17}, ir::DType::i32);
        g.mark_output(g.rope(x, pos, theta, style), "y");
        std::vector<ir::HostTensor> inputs;
        inputs.emplace_back(g.type(x));
        ir::fill_random(inputs.back(), rng, -10.0f, 10.0f);
        inputs.emplace_back(g.type(pos));
        std::uniform_int_distribution<int32_t> position(0, 131071);  // long contexts too
        for (int64_t i = 0; i < inputs.back().size(); ++i) inputs.back().set_i32(i, position(rng));
        const double tolerance = dtype == ir::DType::f32 ? 1e-6 : 8e-3;
        expect_close(run_on(*cuda, g, inputs), verify::run_reference(g, inputs), tolerance,
                     fmt::format("rope {} {} theta {} seed {}", ir::rope_style_name(style),
                                 ir::dtype_name(dtype), theta, seed));
      }
}

// paged_attention at the engine's shapes (SmolLM2: 9 heads over 3 of 64; Llama-3-8B: 32 over 8 of
// 128), random block tables, prompt chunks and decode rows side by side, a padding row, and
// ranges where scores reach the thousands (exp without the max subtracted would overflow).
// Against the dense computation over the gathered keys; the pool must come back with exactly
// the appends, as the reference stores them.
TEST(CudaLlmOps, PagedAttentionMatchesTheDenseComputation) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  namespace pa = paged_attention_cases;
  const uint64_t seed = fresh_seed();
  struct Heads {
    int64_t heads, kv_heads, d;
  };
  for (Heads h : {Heads{4, 2, 8}, Heads{9, 3, 64}, Heads{32, 8, 128}})
    for (int64_t sequences : {1, 7})
      for (float range : {1.0f, 8.0f}) {
        const pa::Batch b = pa::random_batch(h.heads, h.kv_heads, h.d, sequences, 16, 8, seed);
        const ir::KernelGraph g = pa::graph_of(b);
        const std::vector<ir::HostTensor> in = pa::inputs_of(g, b, seed + 1, range);
        const std::vector<ir::HostTensor> want = pa::expected_of(b, in);
        const std::vector<ir::HostTensor> got = run_on(*cuda, g, in);
        const std::string what =
            fmt::format("{} heads over {} of {}, {} sequences, range {}, seed {}", h.heads,
                        h.kv_heads, h.d, sequences, range, seed);
        EXPECT_LE(pa::max_relative_error(got[0], want[0]), 1e-4) << what;
        EXPECT_EQ(got[1].bytes, want[1].bytes) << what;
      }
}

// One buffer bound to the pool's input and output (as the engine binds it) gives what two do, and
// a row whose table leaves the pool writes NaN and stores nothing.
TEST(CudaLlmOps, PagedAttentionInPlaceAndBadRows) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  namespace pa = paged_attention_cases;
  pa::Batch b = pa::mixed_batch(32, 8, 128);
  const ir::KernelGraph g = pa::graph_of(b);
  const std::vector<ir::HostTensor> in = pa::inputs_of(g, b, fresh_seed(), 1.0f);
  const std::vector<ir::HostTensor> want = pa::expected_of(b, in);
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Buffer*> inputs;
  for (const ir::HostTensor& t : in) {
    buffers.push_back(cuda->allocate(t.bytes.size()));
    buffers.back()->write(t.bytes);
    inputs.push_back(buffers.back().get());
  }
  std::unique_ptr<Buffer> out = cuda->allocate(want[0].bytes.size());
  std::vector<Buffer*> outputs{out.get(), buffers[3].get()};
  cuda->compile(g)->launch(inputs, outputs);
  cuda->synchronize();
  ir::HostTensor got_out(want[0].type), got_pool(want[1].type);
  out->read(got_out.bytes);
  buffers[3]->read(got_pool.bytes);
  EXPECT_LE(pa::max_relative_error(got_out, want[0]), 1e-4);
  EXPECT_EQ(got_pool.bytes, want[1].bytes);

  pa::Batch bad = b;
  bad.tables[3][2] = int32_t(b.blocks);                       // row 3 reads past the pool
  bad.positions[5] = int32_t(b.max_blocks * b.block_tokens);  // row 5 past its table
  const std::vector<ir::HostTensor> bad_in = pa::inputs_of(g, bad, 9, 1.0f);
  const std::vector<ir::HostTensor> got = run_on(*cuda, g, bad_in);
  for (int64_t e = 0; e < b.heads * b.d; ++e) {
    EXPECT_TRUE(std::isnan(got[0].get(3 * b.heads * b.d + e)));
    EXPECT_TRUE(std::isnan(got[0].get(5 * b.heads * b.d + e)));
    EXPECT_TRUE(std::isfinite(got[0].get(e)));
  }
  // Row 3's append (its last block is in the pool) happened; row 5's did not.
  ir::HostTensor pool = bad_in[3];
  EXPECT_EQ(got[1].bytes.size(), pool.bytes.size());
  const int64_t row5_slot = pa::pool_index(b, 1, 0, 0, 0);
  for (int64_t e = 0; e < b.d; ++e)
    EXPECT_EQ(got[1].get(row5_slot + e), pool.get(row5_slot + e)) << "row 5 stored a key";
}

}  // namespace
}  // namespace yirage::backend
