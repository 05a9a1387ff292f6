// Candidate isolation: planted kernels that crash, abort, hang or write out of bounds are each
// recorded with their signal or time-out, the others are still checked and profiled, the winner
// runs in this process, and this process lives on.
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "faulty_backend.h"
#include "reliability_util.h"
#include "support/error.h"
#include "tune/tune.h"
#include "verify/verify.h"

namespace yirage::isolation_test {
namespace {

using reliability_test::add_relu;
using reliability_test::fresh_cache;
using reliability_test::with_extra_node;

tune::OptimizeOptions options_with(std::vector<tune::Candidate> candidates) {
  tune::OptimizeOptions o;
  o.cache_path = fresh_cache();
  o.candidates = [candidates](const ir::KernelGraph&, const backend::DeviceDescription&) {
    return candidates;
  };
  o.max_candidates = 10;
  o.profile.min_seconds = 0;
  o.profile.min_repetitions = 1;
  o.profile.warmup = 0;
  // Small, so that the hang costs the test little; the other candidates take milliseconds.
  o.candidate_seconds_limit = 2;
  return o;
}

std::map<std::string, tune::CandidateRecord> by_label(const tune::CacheEntry& entry) {
  std::map<std::string, tune::CandidateRecord> records;
  for (const tune::CandidateRecord& r : entry.candidates) records[r.label] = r;
  return records;
}

TEST(Isolation, FaultyCandidatesAreRecordedAndTheRestAreTuned) {
  ASSERT_FALSE(tune::worker_command().empty()) << "main registers this binary as the worker";
  backend::Backend& faulty = backend::get_backend("faulty");
  const ir::KernelGraph graph = add_relu();
  tune::OptimizeOptions o =
      options_with({{"trap", with_extra_node(kCrash), std::nullopt},
                    {"hang", with_extra_node(kHang), std::nullopt},
                    {"out of bounds", with_extra_node(kOutOfBounds), std::nullopt},
                    {"abort", with_extra_node(kAbort), std::nullopt},
                    {"sound", with_extra_node("unused"), std::nullopt}});
  const tune::OptimizeResult result = tune::optimize(graph, faulty, o);

  std::map<std::string, tune::CandidateRecord> r = by_label(result.entry);
  EXPECT_EQ(r["trap"].status, "crashed");
  EXPECT_NE(r["trap"].message.find("killed by SIGILL (Illegal instruction) while checking it"),
            std::string::npos)
      << r["trap"].message;
  EXPECT_EQ(r["abort"].status, "crashed");
  EXPECT_NE(r["abort"].message.find("killed by SIGABRT"), std::string::npos) << r["abort"].message;
  EXPECT_EQ(r["out of bounds"].status, "crashed");
  EXPECT_NE(r["out of bounds"].message.find("killed by SIGSEGV"), std::string::npos)
      << r["out of bounds"].message;
  EXPECT_EQ(r["hang"].status, "timed_out");
  EXPECT_NE(r["hang"].message.find("timed out after 2 s"), std::string::npos) << r["hang"].message;
  for (const char* label : {"trap", "abort", "out of bounds", "hang"})
    EXPECT_LT(r[label].seconds, 0) << label;
  // The candidates after the faulty ones were still checked against the unfused graph and timed.
  EXPECT_EQ(r["unfused"].status, "ok");
  EXPECT_EQ(r["sound"].status, "ok");
  EXPECT_NE(r["sound"].message.find("float check"), std::string::npos) << r["sound"].message;
  EXPECT_GE(r["sound"].seconds, 0);
  const std::string chosen = result.entry.candidates.at(size_t(result.entry.chosen)).label;
  EXPECT_TRUE(chosen == "unfused" || chosen == "sound") << chosen;

  // The report is what the cache keeps, and the winner runs here, in the caller's process.
  tune::TuningCache cache(o.cache_path);
  std::optional<tune::CacheEntry> stored = cache.lookup(result.entry.key);
  ASSERT_TRUE(stored);
  EXPECT_EQ(by_label(*stored)["out of bounds"].status, "crashed");
  const std::vector<ir::HostTensor> inputs = {ir::HostTensor(graph.type(graph.inputs()[0])),
                                              ir::HostTensor(graph.type(graph.inputs()[1]))};
  const std::vector<ir::HostTensor> out = backend::run_on(faulty, result.chosen, inputs);
  EXPECT_EQ(out.at(0).bytes, verify::run_reference(graph, inputs).at(0).bytes);
}

TEST(Isolation, AWorkerThatCannotStartFailsEveryCandidateWithItsReason) {
  const std::vector<std::string> saved = tune::worker_command();
  tune::set_worker_command({"/bin/false"});
  tune::OptimizeOptions o = options_with({{"sound", with_extra_node("unused"), std::nullopt}});
  try {
    tune::optimize(add_relu(), backend::get_backend("faulty"), o);
    ADD_FAILURE() << "optimize succeeded without a worker";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tuning worker failed: exited with status 1"),
              std::string::npos)
        << e.what();
  }
  tune::set_worker_command(saved);
}

TEST(Isolation, WithoutAWorkerCandidatesRunInThisProcessAndTheLogSaysSo) {
  const std::vector<std::string> saved = tune::worker_command();
  tune::set_worker_command({});
  tune::OptimizeOptions o = options_with({{"sound", with_extra_node("unused"), std::nullopt}});
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  const tune::OptimizeResult result = tune::optimize(add_relu(), backend::get_backend("faulty"), o);
  tune::set_worker_command(saved);
  EXPECT_EQ(by_label(result.entry)["sound"].status, "ok");
  bool said = false;
  for (const std::string& line : lines)
    said |= line.find("candidates run in this process") != std::string::npos;
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace yirage::isolation_test
