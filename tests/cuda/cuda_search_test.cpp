// The search's output on the CUDA path: for each search target of docs/suite.md at small shapes
// (tests/search/search_targets.h), the µGraphs superoptimize ranks under a CUDA-shaped device
// description are lowered by the cuda backend. Every ranked candidate compiles with NVRTC for
// sm_80 and sm_90 (in CI, no GPU needed); on a GPU, the best one computes what the reference
// executor computes on fresh random inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "cuda_test_support.h"
#include "search/search.h"
#include "search/search_targets.h"
#include "support/error.h"

namespace yirage::backend::cuda {
namespace {

constexpr const char* kTargets[] = {"rmsnorm_linear", "gated_mlp", "gemm_layernorm", "gqa",
                                    "lora",           "ntrans",    "gemm_softmax"};

search::SearchResult search_for_gpu(const std::string& target, ir::DType dtype) {
  search::SearchOptions options;
  options.budget_seconds = 120;
  options.threads = 2;
  options.seed = 7;
  return search::superoptimize(search::testing::small_target(target, dtype),
                               search::testing::cuda_like_device(), options);
}

class SearchedOnCuda : public ::testing::TestWithParam<std::tuple<const char*, ir::DType>> {};

TEST_P(SearchedOnCuda, RankedMuGraphsCompile) {
  const auto [target, dtype] = GetParam();
  std::string reason;
  ASSERT_TRUE(nvrtc_available(&reason)) << "this test needs NVRTC: " << reason;
  const search::SearchResult r = search_for_gpu(target, dtype);
  ASSERT_FALSE(r.ranked.empty()) << target;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Program program = lower(r.ranked[i].mugraph);
    for (const KernelLaunch& k : program.kernels)
      for (const char* arch : {"sm_80", "sm_90"}) {
        try {
          EXPECT_FALSE(compile_cuda(k.source, arch, k.name).cubin.empty());
        } catch (const Error& e) {
          ADD_FAILURE() << target << " candidate " << i << ": " << e.what() << "\n" << k.source;
        }
      }
  }
}

TEST_P(SearchedOnCuda, BestMatchesReferenceOnGpu) {
  CUDA_OR_SKIP(cuda);
  const auto [target, dtype] = GetParam();
  const search::SearchResult r = search_for_gpu(target, dtype);
  ASSERT_FALSE(r.ranked.empty()) << target;
  cuda_testing::expect_matches(r.ranked.front().mugraph, *cuda, cuda_testing::fresh_seed(),
                               fmt::format("{} ({} kernels)", target, r.ranked.front().kernels));
}

// Attention whose scores do not fit a block: the search walks the keys with the online softmax
// (the chunk's max subtracted, both accumulators rescaled to the running max), and the cuda
// lowering compiles it.
TEST(SafeSoftmaxOnCuda, SearchedOnlineAttentionCompiles) {
  std::string reason;
  ASSERT_TRUE(nvrtc_available(&reason)) << "this test needs NVRTC: " << reason;
  backend::DeviceDescription device = search::testing::cuda_like_device();
  device.capabilities["search"]["max_tile_bytes_in_loop"] = 32 * 1024;
  device.capabilities["search"]["max_tile_bytes_total"] = 64 * 1024;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16}) {
    ir::KernelGraph g;
    auto q = g.input("Q", {2, 64, 16}, t);
    auto k = g.input("K", {2, 16, 2048}, t);  // a K tile of all keys alone fills the block
    auto v = g.input("V", {2, 2048, 16}, t);
    g.mark_output(g.matmul(g.softmax(g.matmul(q, k), -1), v), "out");
    search::SearchOptions options;
    options.threads = 2;
    options.seed = 7;
    const search::SearchResult r = search::superoptimize(g, device, options);
    int online = 0;
    for (const search::Candidate& c : r.ranked) {
      bool rescaled = false;
      for (const ir::Node& n : c.mugraph.nodes())
        if (const auto* f = std::get_if<ir::FusedOp>(&n.op))
          for (const ir::BlockNode& b : f->body->nodes())
            if (const auto* a = std::get_if<ir::AccumulatorOp>(&b.op))
              rescaled |= a->fn == ir::AccumFn::rescaled_sum;
      if (!rescaled) continue;
      ++online;
      for (const KernelLaunch& kernel : lower(c.mugraph).kernels)
        for (const char* arch : {"sm_80", "sm_90"}) {
          try {
            EXPECT_FALSE(compile_cuda(kernel.source, arch, kernel.name).cubin.empty());
          } catch (const Error& e) {
            ADD_FAILURE() << ir::dtype_name(t) << ": " << e.what() << "\n" << kernel.source;
          }
        }
    }
    EXPECT_GT(online, 0) << ir::dtype_name(t) << ": " << ::testing::PrintToString(r.notes);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SearchedOnCuda,
                         ::testing::Combine(::testing::ValuesIn(kTargets),
                                            ::testing::Values(ir::DType::f32, ir::DType::f16)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param),
                                              ir::dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace yirage::backend::cuda
