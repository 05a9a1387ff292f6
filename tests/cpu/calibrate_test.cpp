// Calibration (tune::calibrate): the cost model's rates measured on the cpu backend, stored in the
// tuning cache under the device's fingerprint, and read back by tune::optimize's search.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

namespace fs = std::filesystem;

TEST(Calibrate, MeasuresRatesAndRoundTripsThroughTheCache) {
  backend::Backend& cpu = cpu_backend();
  tune::CalibrateOptions quick;
  quick.seconds_per_measurement = 0.01;
  quick.max_dram_bytes = int64_t(16) << 20;
  quick.max_matmul_dim = 256;
  std::vector<std::string> lines;
  quick.progress = [&](const std::string& line) { lines.push_back(line); };
  const tune::Calibration c = tune::calibrate(cpu, quick);
  EXPECT_EQ(c.backend, "cpu");
  EXPECT_EQ(c.fingerprint, cpu.device().fingerprint);
  EXPECT_EQ(c.rates.source, "calibration");
  EXPECT_GT(c.rates.launch_seconds, 0);
  EXPECT_GT(c.rates.dram_bytes_per_second, 0);
  EXPECT_GT(c.rates.flops_per_second, 0);
  EXPECT_GT(c.rates.flops_per_second_by_dtype.at(ir::DType::f32), 0);
  for (const cost::MemoryLevel& l : c.rates.levels)
    EXPECT_GT(l.bytes_per_second, c.rates.dram_bytes_per_second) << l.name;
  EXPECT_TRUE(c.measurements.contains("bandwidth"));
  EXPECT_TRUE(c.measurements["bandwidth"].contains("dram"));
  // Progress: the launch, one line per level, one per dtype.
  EXPECT_GE(lines.size(), 3u);

  const fs::path db = fresh_cache_db("calibration");
  tune::TuningCache cache(db);
  EXPECT_FALSE(cache.lookup_calibration("cpu", c.fingerprint));
  cache.store_calibration(c);
  const std::optional<tune::Calibration> back = cache.lookup_calibration("cpu", c.fingerprint);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->created.empty());
  EXPECT_DOUBLE_EQ(back->rates.dram_bytes_per_second, c.rates.dram_bytes_per_second);
  EXPECT_EQ(back->rates.levels.size(), c.rates.levels.size());
  EXPECT_FALSE(cache.lookup_calibration("cpu", "another device"));
  EXPECT_TRUE(tune::calibrated_rates(cpu, db));
  EXPECT_TRUE(cache.clear_calibration("cpu", c.fingerprint));
  EXPECT_FALSE(tune::calibrated_rates(cpu, db));
  // A cache that does not exist is not created by asking.
  EXPECT_FALSE(tune::calibrated_rates(cpu, db.parent_path() / "absent.sqlite"));
  EXPECT_FALSE(fs::exists(db.parent_path() / "absent.sqlite"));
}

// A stored calibration is what tune::optimize's search ranks by: at a thousandth of the rough
// DRAM rate, every candidate's predicted time grows, memory being what they all move.
TEST(Calibrate, OptimizeRanksByTheStoredCalibration) {
  backend::Backend& cpu = cpu_backend();
  const ir::KernelGraph g = small_workload("rmsnorm_linear", ir::DType::f32);
  auto run = [&](const fs::path& db, std::vector<std::string>& log) {
    tune::OptimizeOptions o;
    o.cache_path = db;
    o.search.budget_seconds = 5;
    o.profile.min_seconds = 0.01;
    o.profile.min_repetitions = 3;
    o.log = [&](const std::string& line) { log.push_back(line); };
    return tune::optimize(g, cpu, o);
  };
  std::vector<std::string> rough_log, calibrated_log;
  const tune::OptimizeResult rough = run(fresh_cache_db("rough"), rough_log);
  ASSERT_TRUE(rough.search);
  EXPECT_EQ(rough.search->rates.source, "capabilities");

  const fs::path db = fresh_cache_db("calibrated");
  tune::Calibration c;
  c.backend = "cpu";
  c.fingerprint = cpu.device().fingerprint;
  c.device_name = cpu.device().name;
  c.rates = cost::device_from_capabilities(cpu.device().capabilities, c.device_name);
  c.rates.source = "calibration";
  c.rates.dram_bytes_per_second /= 1000;
  c.rates.levels.clear();
  tune::TuningCache(db).store_calibration(c);
  const tune::OptimizeResult calibrated = run(db, calibrated_log);
  ASSERT_TRUE(calibrated.search);
  EXPECT_EQ(calibrated.search->rates.source, "calibration");
  EXPECT_DOUBLE_EQ(calibrated.search->rates.dram_bytes_per_second, c.rates.dram_bytes_per_second);
  bool said = false;
  for (const std::string& line : calibrated_log)
    said |= line.starts_with("ranking by the calibration");
  EXPECT_TRUE(said);
  EXPECT_GT(calibrated.search->ranked.front().estimated_seconds,
            100 * rough.search->ranked.front().estimated_seconds);
}

}  // namespace
}  // namespace yirage::cpu_test
