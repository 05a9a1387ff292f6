// The seven search targets at small shapes: a verified µGraph within the kernel limit, under a
// CPU description and a CUDA-like one, that passes the float check.
#include <gtest/gtest.h>

#include "search/search.h"
#include "search_targets.h"

namespace yirage::search {
namespace {

struct Target {
  const char* name;
  int max_kernels;
};

constexpr Target kTargets[] = {
    {"rmsnorm_linear", 1}, {"gated_mlp", 1}, {"gemm_layernorm", 1}, {"gqa", 2},
    {"lora", 2},           {"ntrans", 2},    {"gemm_softmax", 2}};

class TargetTest : public ::testing::TestWithParam<std::tuple<Target, bool>> {};

TEST_P(TargetTest, FindsVerifiedMugraphWithinKernelLimit) {
  const auto [target, cuda] = GetParam();
  const ir::KernelGraph graph = testing::small_target(target.name);
  SearchOptions options;
  options.budget_seconds = 120;
  options.threads = 2;
  options.seed = 7;
  const SearchResult r = superoptimize(
      graph, cuda ? testing::cuda_like_device() : testing::cpu_like_device(), options);
  ASSERT_FALSE(r.ranked.empty());
  const Candidate& best = r.ranked.front();
  for (const std::string& n : r.notes) std::cerr << "note: " << n << "\n";
  EXPECT_LE(best.kernels, target.max_kernels) << ir::to_json(best.mugraph).dump(1);
  EXPECT_TRUE(best.proof.equivalent);
  EXPECT_TRUE(best.proof.bound_met);
  EXPECT_LE(best.proof.false_accept_bound, 1e-9);
  EXPECT_TRUE(r.float_check.passed) << r.float_check.summary;
  EXPECT_FALSE(r.stats.budget_exhausted);
  EXPECT_GT(r.stats.states, 0u);
  EXPECT_GE(r.stats.verified, 1u);
  std::cerr << target.name << (cuda ? " cuda" : " cpu") << ": kernels " << best.kernels
            << " states " << r.stats.states << " pruned " << r.stats.pruned << " candidates "
            << r.stats.candidates << " verified " << r.stats.verified << " seconds "
            << r.stats.seconds << "\n";
}

INSTANTIATE_TEST_SUITE_P(Targets, TargetTest,
                         ::testing::Combine(::testing::ValuesIn(kTargets), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_cuda" : "_cpu");
                         });

}  // namespace
}  // namespace yirage::search
