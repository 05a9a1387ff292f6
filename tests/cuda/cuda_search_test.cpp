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

INSTANTIATE_TEST_SUITE_P(Targets, SearchedOnCuda,
                         ::testing::Combine(::testing::ValuesIn(kTargets),
                                            ::testing::Values(ir::DType::f32, ir::DType::f16)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param),
                                              ir::dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace yirage::backend::cuda
