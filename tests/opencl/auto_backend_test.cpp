// Backend "auto" with two backends that run here, cpu and opencl: both are tuned, the one whose
// winner measured fastest is chosen, and the cache holds one entry per device, which a second
// call hits on both.
#include <filesystem>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "search/search_targets.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

TEST(AutoBackend, ChoosesTheFastestAndCachesOneEntryPerDevice) {
  bool cpu = false, opencl = false;
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    cpu |= info.name == "cpu" && info.availability.available;
    opencl |= info.name == "opencl" && info.availability.available;
  }
  if (!cpu || !opencl) GTEST_SKIP() << "needs both the cpu and the opencl backend";

  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "yirage_auto";
  std::filesystem::remove_all(dir);
  OptimizeOptions options;
  options.cache_path = dir / "tuning.sqlite";
  options.search.budget_seconds = 5;
  options.search.threads = 2;
  options.profile.min_seconds = 0.02;
  options.isolate = false;
  const ir::KernelGraph graph = search::testing::small_target("ntrans");

  const FastestBackendResult first = optimize_on_fastest_backend(graph, options);
  std::map<std::string, double> seconds;
  for (const BackendTuning& b : first.backends) {
    ASSERT_TRUE(b.result) << b.backend << ": " << b.error;
    EXPECT_FALSE(b.result->cache_hit) << b.backend;
    seconds[b.backend] = b.result->entry.chosen_seconds;
  }
  ASSERT_TRUE(seconds.contains("cpu") && seconds.contains("opencl"));
  const std::string expected = seconds["cpu"] <= seconds["opencl"] ? "cpu" : "opencl";
  EXPECT_EQ(first.winner().backend, expected)
      << "cpu " << seconds["cpu"] << " s, opencl " << seconds["opencl"] << " s";

  TuningCache cache(options.cache_path);
  for (const char* name : {"cpu", "opencl"}) {
    const backend::Backend& b = backend::get_backend(name);
    const std::optional<CacheEntry> entry = cache.lookup(cache_key(graph, b));
    ASSERT_TRUE(entry) << name;
    EXPECT_EQ(entry->key.fingerprint, b.device().fingerprint) << name;
  }

  const FastestBackendResult second = optimize_on_fastest_backend(graph, options);
  for (const BackendTuning& b : second.backends) {
    ASSERT_TRUE(b.result) << b.backend << ": " << b.error;
    EXPECT_TRUE(b.result->cache_hit) << b.backend;
  }
  EXPECT_EQ(second.winner().backend, first.winner().backend);
}

}  // namespace
}  // namespace yirage::tune
