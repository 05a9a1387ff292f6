// Tuning one graph once per cache file: the lock tune::optimize holds while it tunes a key.
#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "cpu_test_util.h"
#include "tune/tune.h"
#include "tune/tuning_lock.h"

namespace yirage::cpu_test {
namespace {

namespace fs = std::filesystem;

TEST(TuningLock, ASecondHolderOfTheKeyWaitsForTheFirst) {
  const fs::path db = fresh_cache_db("tuning_lock");
  // The second reports once it is waiting or, where it was not kept waiting, holding the key.
  std::promise<void> second_asked;
  std::future<bool> second_waited;
  {
    const tune::TuningLock first(db, "key A");
    ASSERT_TRUE(first.held());
    EXPECT_FALSE(first.waited());
    second_waited = std::async(std::launch::async, [&] {
      std::once_flag reported;
      auto report = [&] { std::call_once(reported, [&] { second_asked.set_value(); }); };
      const tune::TuningLock second(db, "key A", report);
      report();
      return second.held() && second.waited();
    });
    second_asked.get_future().wait();
    const tune::TuningLock other_key(db, "key B");
    EXPECT_TRUE(other_key.held());
    EXPECT_FALSE(other_key.waited());
  }
  EXPECT_TRUE(second_waited.get());  // acquired once the first let go
}

TEST(TuningLock, AWaitEndsWhenTheCallerAsksToStop) {
  const fs::path db = fresh_cache_db("tuning_lock_stop");
  const tune::TuningLock first(db, "key A");
  int asked = 0;
  const tune::TuningLock second(db, "key A", {}, [&] { return ++asked == 3; });
  EXPECT_EQ(asked, 3);
  EXPECT_TRUE(second.waited());
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(first.held());
}

TEST(TuningLock, TwoThreadsOptimizingOneGraphSearchAndProfileItOnce) {
  const fs::path db = fresh_cache_db("tuning_lock_optimize");
  std::atomic<int> searches{0};
  tune::OptimizeOptions o;
  o.cache_path = db;
  o.profile.min_seconds = 0.01;
  o.profile.min_repetitions = 3;
  o.library_variants = false;
  o.candidates = [&searches](const ir::KernelGraph&, const backend::DeviceDescription&) {
    ++searches;
    return std::vector<tune::Candidate>{
        {"fused", ir::testing::rmsnorm_linear_ugraph(ir::DType::f32), std::nullopt}};
  };
  const ir::KernelGraph g = ir::testing::rmsnorm_linear_kernel(ir::DType::f32);
  std::vector<std::string> waiting;
  std::mutex lines;
  o.log = [&](const std::string& line) {
    std::lock_guard lock(lines);
    if (line.starts_with("waiting for another")) waiting.push_back(line);
  };
  auto run = [&] { return tune::optimize(g, cpu_backend(), o); };
  std::future<tune::OptimizeResult> a = std::async(std::launch::async, run);
  std::future<tune::OptimizeResult> b = std::async(std::launch::async, run);
  const tune::OptimizeResult ra = a.get(), rb = b.get();
  EXPECT_EQ(searches, 1);
  EXPECT_NE(ra.cache_hit, rb.cache_hit);  // one tuned, the other found its entry
  EXPECT_EQ(ra.entry.key.id(), rb.entry.key.id());
  EXPECT_LE(waiting.size(), 1u);
}

}  // namespace
}  // namespace yirage::cpu_test
