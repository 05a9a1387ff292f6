// Top-k tuning: tune::optimize profiles the unfused graph and the cost model's best
// max_candidates candidates; the rest are recorded as not profiled, unless profile_all.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

// exp(x), x f32[4, 8], and four candidates that compute it through a reshape of x first.
ir::KernelGraph exp_graph() {
  ir::KernelGraph g;
  g.mark_output(g.exp(g.input("x", {4, 8}, ir::DType::f32)), "out");
  return g;
}

std::vector<tune::Candidate> reshaped_candidates(const ir::KernelGraph&,
                                                 const backend::DeviceDescription&) {
  std::vector<tune::Candidate> out;
  const std::vector<ir::Dims> shapes = {{32}, {8, 4}, {2, 16}, {16, 2}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    ir::KernelGraph g;
    const ir::TensorRef x = g.input("x", {4, 8}, ir::DType::f32);
    g.mark_output(g.reshape(g.exp(g.reshape(x, shapes[i])), {4, 8}), "out");
    out.push_back({"ranked #" + std::to_string(i), std::move(g), std::nullopt});
  }
  return out;
}

tune::OptimizeResult tune_with(const std::string& name, bool profile_all) {
  tune::OptimizeOptions o;
  o.cache_path = fresh_cache_db(name);
  o.candidates = reshaped_candidates;
  o.profile.min_seconds = 0;
  o.profile.min_repetitions = 1;
  o.profile.warmup = 0;
  o.profile_all = profile_all;
  return tune::optimize(exp_graph(), cpu_backend(), o);
}

TEST(TopK, ProfilesOnlyTheModelsBestAndRecordsTheRest) {
  ASSERT_EQ(tune::OptimizeOptions{}.max_candidates, 2);
  const tune::OptimizeResult r = tune_with("top-k", false);
  std::vector<std::string> labels, statuses;
  for (const tune::CandidateRecord& c : r.entry.candidates) {
    labels.push_back(c.label);
    statuses.push_back(c.status);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"unfused", "ranked #0", "ranked #1", "ranked #2",
                                              "ranked #3"}));
  EXPECT_EQ(statuses, (std::vector<std::string>{"ok", "ok", "ok", "not_profiled", "not_profiled"}));
  for (size_t i = 3; i < r.entry.candidates.size(); ++i) {
    EXPECT_LT(r.entry.candidates[i].seconds, 0);
    EXPECT_FALSE(r.entry.candidates[i].message.empty());
  }
  EXPECT_LT(r.entry.chosen, 3);
}

TEST(TopK, ProfileAllProfilesEveryCandidate) {
  const tune::OptimizeResult r = tune_with("profile-all", true);
  ASSERT_EQ(r.entry.candidates.size(), 5u);
  for (const tune::CandidateRecord& c : r.entry.candidates)
    EXPECT_EQ(c.status, "ok") << c.label << ": " << c.message;
}

}  // namespace
}  // namespace yirage::cpu_test
