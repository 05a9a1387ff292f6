// quant_matmul: GGUF weight blocks multiplied in place, as ggml computes it. The reference
// executor against a float matmul of the dequantized weight, the cpu backend's SIMD lowering
// against the reference at every tile shape, and the rules and errors of the op.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "test_util.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

using ir::DType;
using ir::KernelGraph;
using ir::QuantFormat;
using ir::TensorRef;
using test_util::error_of;

// Weight blocks with the scales a real model has (d ≈ 0.01, m ≈ -0.1) instead of fill_random's
// bytes, so that the float comparison below is meaningful.
ir::HostTensor model_like_weight(QuantFormat format, int64_t rows, int64_t k, uint64_t seed) {
  const int64_t block_bytes = ir::quant_block_bytes(format), blocks = k / ir::kQuantBlock;
  ir::HostTensor w({DType::u8, {rows, blocks * block_bytes}});
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.005f, 0.02f), offset(-0.15f, -0.05f);
  if (ir::quant_reads_float_activations(format)) {  // 16-bit floats of a trained layer's size
    std::uniform_real_distribution<float> value(-0.05f, 0.05f);
    for (int64_t i = 0; i < rows * k; ++i) {
      const uint16_t bits =
          format == QuantFormat::bf16 ? ir::f32_to_bf16(value(rng)) : ir::f32_to_f16(value(rng));
      std::memcpy(w.bytes.data() + 2 * i, &bits, 2);
    }
    return w;
  }
  for (int64_t b = 0; b < rows * blocks; ++b) {
    std::byte* block = w.bytes.data() + b * block_bytes;
    const uint16_t d = ir::f32_to_f16(scale(rng)), m = ir::f32_to_f16(offset(rng));
    std::memcpy(block, &d, 2);
    const int64_t header = format == QuantFormat::q4_1 ? 4 : 2;
    if (format == QuantFormat::q4_1) std::memcpy(block + 2, &m, 2);
    for (int64_t i = header; i < block_bytes; ++i) block[i] = std::byte(byte(rng));
  }
  return w;
}

TEST(QuantMatmul, ReferenceIsTheDequantizedProductUpToActivationRounding) {
  for (QuantFormat format : {QuantFormat::q4_0, QuantFormat::q4_1, QuantFormat::q8_0,
                             QuantFormat::f16, QuantFormat::bf16}) {
    const int64_t m = 3, n = 7, k = 96;
    KernelGraph g;
    TensorRef x = g.input("x", {m, k}, DType::f32);
    TensorRef w = g.input("w", {n, k / 32 * ir::quant_block_bytes(format)}, DType::u8);
    g.mark_output(g.quant_matmul(x, w, format), "y");
    std::mt19937_64 rng(7);
    ir::HostTensor xv({DType::f32, {m, k}});
    ir::fill_random(xv, rng, -1.0f, 1.0f);
    const ir::HostTensor wv = model_like_weight(format, n, k, 11);
    const ir::HostTensor y = verify::run_reference(g, {xv, wv})[0];
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double wi = ir::quant_element(format, wv.bytes.data() + c * wv.type.dims[1], i);
          exact += wi * xv.get(r * k + i);
          magnitude += std::fabs(wi * xv.get(r * k + i));
        }
        // Each activation moves by at most half a step of max|x|/127 per block; 16-bit float
        // weights read the activations as they are, so only the float sum's rounding is left.
        const double bound =
            ir::quant_reads_float_activations(format) ? 1e-6 * magnitude : 0.01 * magnitude;
        EXPECT_NEAR(y.get(r * n + c), exact, bound + 1e-6)
            << ir::quant_format_name(format) << " y[" << r << "][" << c << "]";
      }
  }
}

// The cpu backend lowers the GGUF block formats only: a 16-bit float weight is a one-line error
// naming the node, and its capabilities say which formats it reads.
TEST(QuantMatmul, TheCpuBackendRefusesSixteenBitFloatWeightsNamingTheNode) {
  backend::Backend& cpu = cpu_backend();
  const nlohmann::json formats = cpu.device().capabilities.at("quant_matmul_formats");
  EXPECT_EQ(formats, nlohmann::json({"q4_0", "q4_1", "q8_0"}));
  for (QuantFormat format : {QuantFormat::f16, QuantFormat::bf16}) {
    KernelGraph g;
    TensorRef x = g.input("x", {2, 64}, DType::f32);
    TensorRef w = g.input("w", {3, 2 * ir::quant_block_bytes(format)}, DType::u8);
    g.mark_output(g.quant_matmul(x, w, format), "y");
    const std::string error = error_of([&] { cpu.compile(g); });
    EXPECT_THAT(error, ::testing::HasSubstr("(quant_matmul)"));
    EXPECT_THAT(error, ::testing::HasSubstr(std::string(ir::quant_format_name(format)) +
                                            " weights are not lowered"));
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// Activation rows 1 (decoding: the prefetching band), 6 (tiles of 4 × 4 plus tails), 15 and 16
// (tiles of 3 × 8 plus tails); weight rows 70 and 9 (tiles per thread plus single rows); products
// of one activation tensor grouped.
TEST(QuantMatmul, CpuLoweringMatchesTheReferenceAtEveryTileShape) {
  for (QuantFormat format : {QuantFormat::q4_0, QuantFormat::q4_1, QuantFormat::q8_0}) {
    const int64_t bytes = ir::quant_block_bytes(format);
    auto decode = [&](bool prefetch) {
      KernelGraph g;
      TensorRef one = g.input("one", {1, 128}, DType::f32);
      TensorRef tall = g.input("tall", {70, 4 * bytes}, DType::u8);
      TensorRef other = g.input("other", {9, 4 * bytes}, DType::u8);
      g.mark_output(g.add_node(ir::QuantMatmulOp{format, prefetch}, {one, tall})[0], "decode");
      g.mark_output(g.add_node(ir::QuantMatmulOp{format, prefetch}, {one, other})[0],
                    "decode_grouped");
      return g;
    };
    const KernelGraph g = decode(true), off = decode(false);
    SCOPED_TRACE(std::string(ir::quant_format_name(format)));
    check_against_reference(off, 9, "quant_matmul without prefetch");
    // Several activation rows: 6 in 4 × 4 tiles plus tails, 15 and 16 in 3 × 8 tiles plus tails
    // (yr_quant_matmul.inc), each with and without prefetch.
    for (const bool prefetch : {true, false}) {
      KernelGraph rows;
      TensorRef tall = rows.input("tall", {70, 4 * bytes}, DType::u8);
      TensorRef other = rows.input("other", {9, 4 * bytes}, DType::u8);
      for (const int64_t m : {6, 15, 16}) {
        TensorRef x = rows.input(fmt::format("x{}", m), {m, 128}, DType::f32);
        rows.mark_output(rows.add_node(ir::QuantMatmulOp{format, prefetch}, {x, tall})[0],
                         fmt::format("tall{}", m));
        rows.mark_output(rows.add_node(ir::QuantMatmulOp{format, prefetch}, {x, other})[0],
                         fmt::format("other{}", m));
      }
      check_against_reference(rows, 10, prefetch ? "rows with prefetch" : "rows");
    }
    EXPECT_NE(ir::structural_hash(off), ir::structural_hash(g));
    const KernelGraph parsed = ir::parse_kernel_graph(ir::to_json(off).dump());
    EXPECT_FALSE(std::get<ir::QuantMatmulOp>(parsed.nodes()[3].op).prefetch);
    EXPECT_EQ(ir::structural_hash(parsed), ir::structural_hash(off));
    EXPECT_EQ(ir::to_json(g).dump().find("prefetch"), std::string::npos);
  }
}

// Where the backend honours the choice, every candidate with quant_matmuls is also measured with
// their prefetch off, and the cached winner is whichever was faster here.
TEST(QuantMatmul, TheTunerMeasuresEachCandidateWithoutPrefetch) {
  ASSERT_EQ(cpu_backend().device().capabilities.value("quant_matmul_prefetch", false), true);
  KernelGraph g;
  TensorRef x = g.input("x", {1, 256}, DType::f32);
  TensorRef w = g.input("w", {64, 8 * ir::quant_block_bytes(QuantFormat::q4_1)}, DType::u8);
  g.mark_output(g.quant_matmul(x, w, QuantFormat::q4_1), "y");
  tune::OptimizeOptions o;
  o.cache_path = fresh_cache_db("prefetch");
  o.profile.min_seconds = 0.01;
  o.profile.min_repetitions = 3;
  o.candidates = [](const KernelGraph&, const backend::DeviceDescription&) {
    return std::vector<tune::Candidate>{};
  };
  const tune::OptimizeResult r = tune::optimize(g, cpu_backend(), o);
  ASSERT_EQ(r.entry.candidates.size(), 2u);
  EXPECT_EQ(r.entry.candidates[0].label, "unfused");
  const tune::CandidateRecord& variant = r.entry.candidates[1];
  EXPECT_EQ(variant.label, "unfused + no prefetch");
  EXPECT_EQ(variant.status, "ok") << variant.message;
  EXPECT_GT(variant.seconds, 0);
  EXPECT_NE(variant.graph_json.find("\"prefetch\":false"), std::string::npos) << variant.graph_json;
  std::optional<KernelGraph> winner = tune::cached_winner(g, cpu_backend(), o.cache_path);
  ASSERT_TRUE(winner);
  EXPECT_EQ(ir::structural_hash(*winner), ir::structural_hash(r.chosen));

  o.prefetch_variants = false;
  o.cache_path = fresh_cache_db("prefetch-off");
  EXPECT_EQ(tune::optimize(g, cpu_backend(), o).entry.candidates.size(), 1u);
}

TEST(QuantMatmul, ShapeRulesNameTheProblem) {
  KernelGraph g;
  TensorRef x = g.input("x", {2, 40}, DType::f32);
  TensorRef x64 = g.input("x64", {2, 64}, DType::f32);
  TensorRef w = g.input("w", {8, 40}, DType::u8);
  TensorRef wf = g.input("wf", {8, 40}, DType::f32);
  EXPECT_THAT(error_of([&] { g.quant_matmul(x, w, QuantFormat::q4_1); }),
              ::testing::HasSubstr("last dim 40 is not a multiple of 32"));
  EXPECT_THAT(error_of([&] { g.quant_matmul(x64, w, QuantFormat::q8_0); }),
              ::testing::HasSubstr("weight rows of 40 bytes; K = 64 in q8_0 takes 2 blocks of 34"));
  EXPECT_THAT(error_of([&] { g.quant_matmul(x64, wf, QuantFormat::q4_1); }),
              ::testing::HasSubstr("must be u8"));
  EXPECT_EQ(g.type(g.quant_matmul(x64, w, QuantFormat::q4_1)),
            (ir::TensorType{DType::f32, {2, 8}}));
}

TEST(QuantMatmul, JsonNamesTheFormatAndRejectsAnUnknownOne) {
  const std::string text = R"({"schema": "yirage.kernel_graph", "version": 1,
    "nodes": [{"name": "x", "op": "input", "dtype": "f32", "shape": [1, 32]},
              {"name": "w", "op": "input", "dtype": "u8", "shape": [4, 20]},
              {"name": "y", "op": "quant_matmul", "format": "FORMAT", "inputs": ["x", "w"]}],
    "outputs": [{"tensor": "y"}]})";
  auto with = [&](const std::string& format) {
    std::string t = text;
    t.replace(t.find("FORMAT"), 6, format);
    return t;
  };
  const KernelGraph g = ir::parse_kernel_graph(with("q4_1"));
  EXPECT_EQ(std::get<ir::QuantMatmulOp>(g.nodes()[2].op).format, QuantFormat::q4_1);
  EXPECT_THAT(error_of([&] { ir::parse_kernel_graph(with("q4_0")); }),
              ::testing::HasSubstr("weight rows of 20 bytes; K = 32 in q4_0 takes 1 blocks of 18"));
  EXPECT_THAT(error_of([&] { ir::parse_kernel_graph(with("q5_k")); }),
              ::testing::HasSubstr("unknown quantized format \"q5_k\""));
}

// The JSON file is also the parser fuzzer's seed for the op (scripts/fuzz.sh).
TEST(QuantMatmul, TheJsonExampleRunsOnTheCpuBackend) {
  const KernelGraph g =
      ir::load_kernel_graph(std::string(YIRAGE_SOURCE_DIR) + "/tests/data/quant_matmul.json");
  check_against_reference(g, 3, "quant_matmul.json");
}

}  // namespace
}  // namespace yirage::cpu_test
