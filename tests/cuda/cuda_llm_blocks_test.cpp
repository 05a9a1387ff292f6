// On a GPU (skipped without one, unless YIRAGE_REQUIRE_CUDA=1): each block graph of the engine
// (llm/fused_blocks.h) at SmolLM2's widths, as built and as tune::optimize chose it for the cuda
// backend, against the reference executor on real GGUF blocks (random quants, finite scales) and
// fresh random activations, tame ([-1, 1]) and of the size a model's hidden states have (±0.01,
// where the H100 run found a NaN). quant_matmul quantizes its activations as ggml does on both
// sides, so what differs is the order of float sums, and where a block normalizes before its
// product (rmsnorm+qkv), that order can move a normalized activation across a rounding boundary
// of its 8-bit quantization: one such flip moves its row's outputs by about one part in 10^3
// (an H100 run of 2026-12-06 saw 1.5e-4 over 16 rows at ±0.01, every other block at ~1e-7). The
// outputs are held to 1e-3 (relative L2), which a wrong nibble, scale or row (errors of order 1)
// still fails; the op test (cuda_llm_ops_test.cpp) holds the product alone to 1e-5.
// The engine test (cuda_llm_engine_test.cpp) compares whole models; this one says which block
// departs.
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_support.h"
#include "llm_shapes.h"
#include "tune/tune.h"

namespace yirage::backend {
namespace {

using cuda_testing::cuda_or_skip;
using cuda_testing::fresh_seed;
using cuda_testing::quant_weight;
using cuda_testing::relative_l2;

ir::QuantFormat format_of(llm::GgmlType type) {
  return type == llm::GgmlType::Q4_0   ? ir::QuantFormat::q4_0
         : type == llm::GgmlType::Q4_1 ? ir::QuantFormat::q4_1
                                       : ir::QuantFormat::q8_0;
}

// Weights ("output" is the head) as GGUF blocks, norm gains in [0.5, 1.5], activations in [-1, 1].
std::vector<ir::HostTensor> block_inputs(const ir::KernelGraph& g, const cuda_llm::ModelShape& m,
                                         std::mt19937_64& rng, float range) {
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef in : g.inputs()) {
    const ir::TensorType& type = g.type(in);
    const std::string& name = g.node(in.node).name;
    if (type.dtype == ir::DType::u8) {
      const ir::QuantFormat f = format_of(name == "output" ? m.head : m.matrices);
      inputs.push_back(
          quant_weight(f, type.dims[0], type.dims[1] / ir::quant_block_bytes(f) * 32, rng));
    } else {
      inputs.emplace_back(type);
      const bool gain = name.ends_with("norm");
      ir::fill_random(inputs.back(), rng, gain ? 0.5f : -range, gain ? 1.5f : range);
    }
  }
  return inputs;
}

TEST(CudaLlmBlocks, EachBlockGraphAsBuiltAndAsTunedMatchesTheReference) {
  Backend* cuda = cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const cuda_llm::ModelShape m = cuda_llm::model_shapes().front();
  tune::OptimizeOptions options;
  options.cache_path = ::testing::TempDir() + "/cuda_llm_blocks.sqlite";
  options.read_cache = false;
  options.search.budget_seconds = 5;
  options.max_candidates = 3;
  for (const llm::NamedGraph& block :
       llm::fused_block_graphs(m.config, cuda_llm::shaped_weights(m))) {
    const tune::OptimizeResult tuned = tune::optimize(block.graph, *cuda, options);
    for (float range : {1.0f, 0.01f}) {
      const std::vector<ir::HostTensor> inputs = block_inputs(block.graph, m, rng, range);
      const std::vector<ir::HostTensor> expected = verify::run_reference(block.graph, inputs);
      for (const auto& [how, graph] :
           {std::pair<std::string, const ir::KernelGraph*>{"as built", &block.graph},
            {"as tuned (" + tuned.entry.winner().label + ")", &tuned.chosen}}) {
        const std::vector<ir::HostTensor> actual = run_on(*cuda, *graph, inputs);
        ASSERT_EQ(actual.size(), expected.size());
        for (size_t o = 0; o < expected.size(); ++o) {
          const double error = relative_l2(actual[o], expected[o]);
          int64_t bad_actual = 0, bad_expected = 0;
          for (int64_t i = 0; i < expected[o].size(); ++i) {
            bad_actual += !std::isfinite(actual[o].get(i));
            bad_expected += !std::isfinite(expected[o].get(i));
          }
          EXPECT_EQ(bad_expected, 0) << block.name << " range " << range << ": the reference";
          EXPECT_EQ(bad_actual, 0) << block.name << " " << how << " range " << range;
          std::printf("%s, %s, range %g, output %zu: relative L2 %.3g\n", block.name.c_str(),
                      how.c_str(), range, o, error);
          EXPECT_LE(error, 1e-3) << m.name << ": " << block.name << " " << how << " output " << o
                                 << ", seed " << seed;
        }
      }
    }
  }
}

}  // namespace
}  // namespace yirage::backend
