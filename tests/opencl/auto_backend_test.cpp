// Backend "auto" with two backends that run here, cpu and opencl: both are tuned, the one whose
// call is fastest (winner plus host transfers) is chosen, and the cache holds one entry per
// device, which a second call hits on both. OpenCL's buffers are not host memory, so a call
// there pays its copies; the cpu backend's are, so it pays none.
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "search/search_targets.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

// Every backend tuned (or found in the cache), the host-memory one paying no transfers, the
// device one paying some, and the least winner-plus-transfers chosen.
void expect_fastest_call_chosen(const FastestBackendResult& fastest, bool cache_hit) {
  std::map<std::string, const BackendTuning*> by_name;
  for (const BackendTuning& b : fastest.backends) {
    ASSERT_TRUE(b.result) << b.backend << ": " << b.error;
    EXPECT_EQ(b.result->cache_hit, cache_hit) << b.backend;
    by_name[b.backend] = &b;
  }
  ASSERT_TRUE(by_name.contains("cpu") && by_name.contains("opencl"));
  const BackendTuning &cpu = *by_name["cpu"], &opencl = *by_name["opencl"];
  EXPECT_EQ(cpu.transfer_seconds, 0);
  EXPECT_GT(opencl.transfer_seconds, 0);
  EXPECT_EQ(opencl.call_seconds(), opencl.result->entry.chosen_seconds + opencl.transfer_seconds);
  const std::string expected = cpu.call_seconds() <= opencl.call_seconds() ? "cpu" : "opencl";
  EXPECT_EQ(fastest.winner().backend, expected)
      << "cpu " << cpu.call_seconds() << " s, opencl " << opencl.call_seconds() << " s";
}

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
  expect_fastest_call_chosen(first, /*cache_hit=*/false);

  TuningCache cache(options.cache_path);
  for (const char* name : {"cpu", "opencl"}) {
    const backend::Backend& b = backend::get_backend(name);
    const std::optional<CacheEntry> entry = cache.lookup(cache_key(graph, b));
    ASSERT_TRUE(entry) << name;
    EXPECT_EQ(entry->key.fingerprint, b.device().fingerprint) << name;
  }

  const FastestBackendResult second = optimize_on_fastest_backend(graph, options);
  expect_fastest_call_chosen(second, /*cache_hit=*/true);

  // With the data already on the device, nobody pays transfers.
  const FastestBackendResult on_device =
      optimize_on_fastest_backend(graph, options, DataPlacement::device);
  for (const BackendTuning& b : on_device.backends) EXPECT_EQ(b.transfer_seconds, 0) << b.backend;
}

}  // namespace
}  // namespace yirage::tune
