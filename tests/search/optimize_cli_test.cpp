// `yirage optimize` driven as a user would: the JSON report, --out, and its errors.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "search/search.h"
#include "search_targets.h"

namespace yirage::search {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code;
  std::string out, err;
};

class OptimizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("yirage_optimize_cli_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_graph(const std::string& name) {
    const std::string file = path(name + ".json");
    std::ofstream(file) << ir::to_json(testing::small_target(name)).dump(1);
    return file;
  }

  // `env`: variable assignments for the command, such as "YIRAGE_CACHE_DIR='/tmp/x'".
  CliResult yirage(const std::string& args, const std::string& env = "") {
    const std::string err = path("err");
    const std::string command = fmt::format("{} '{}' {} 2>'{}'", env, YIRAGE_BINARY, args, err);
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("popen failed");
    CliResult r{-1, {}, {}};
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) r.out.append(buffer, n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::stringstream text;
    text << std::ifstream(err).rdbuf();
    r.err = text.str();
    return r;
  }

  fs::path dir_;
};

TEST_F(OptimizeCli, JsonReportAndOutFileThatRuns) {
  const std::string graph = write_graph("gated_mlp");
  const std::string out = path("best.json");
  const CliResult r = yirage(fmt::format(
      "optimize '{}' --no-tune --backend cpu --budget 60 --seed 1 --json --out '{}'", graph, out));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"verified", "kernels", "search_seconds", "states", "pruned", "candidates",
                          "false_accept_bound", "mugraph"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["verified"].get<bool>());
  EXPECT_EQ(j["kernels"].get<int>(), 1);
  EXPECT_LE(j["false_accept_bound"].get<double>(), 1e-9);
  EXPECT_GT(j["states"].get<uint64_t>(), 0u);
  // Every ranked candidate carries the cost model's phases, which add up to its estimate.
  ASSERT_FALSE(j["ranked"].empty());
  for (const nlohmann::json& c : j["ranked"]) {
    const nlohmann::json& p = c.at("predicted");
    for (const char* phase : {"launch", "ramp_up", "steady", "ramp_down", "collective"})
      EXPECT_GE(p.at(phase).get<double>(), 0) << phase;
    EXPECT_DOUBLE_EQ(p["total"].get<double>(), c["estimated_seconds"].get<double>());
    EXPECT_NEAR(p["launch"].get<double>() + p["ramp_up"].get<double>() + p["steady"].get<double>() +
                    p["ramp_down"].get<double>() + p["collective"].get<double>() -
                    p["overlap"].get<double>(),
                p["total"].get<double>(), 1e-12);
  }
  EXPECT_EQ(j["cost_rates"]["source"], "capabilities");
  // The written µGraph is a kernel graph `yirage run` accepts.
  const CliResult run = yirage(fmt::format("run '{}' --backend reference --seed 2", out));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("out: f32[8, 32]"), std::string::npos) << run.out;
}

// Backend auto reports, for every backend it tuned on, the host copies a call would pay there:
// none where its buffers are host memory, measured where they are not; and it chose the least
// winner-plus-copies.
TEST_F(OptimizeCli, AutoCountsHostTransfers) {
  const std::string graph = write_graph("ntrans");
  const CliResult r = yirage(fmt::format("optimize '{}' --backend auto --budget 5 --json", graph),
                             fmt::format("YIRAGE_CACHE_DIR='{}'", dir_.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["backends"].empty()) << r.out;
  double best = 0;
  std::string best_name;
  for (const nlohmann::json& b : j["backends"]) {
    if (b.contains("error")) continue;
    const double transfer = b.at("transfer_seconds").get<double>();
    if (b["backend"] == "cpu") {
      EXPECT_EQ(transfer, 0);
    } else if (b["backend"] == "opencl") {
      EXPECT_GT(transfer, 0);
    }
    const double call = b.at("seconds").get<double>() + transfer;
    if (best_name.empty() || call < best) {
      best = call;
      best_name = b["backend"];
    }
  }
  EXPECT_EQ(j["backend"], best_name) << r.out;
}

TEST_F(OptimizeCli, TextReportSaysWhatItExplored) {
  const std::string graph = write_graph("gqa");
  const CliResult r =
      yirage(fmt::format("optimize '{}' --no-tune --backend cpu --budget 60", graph));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* text : {"explored:", "pruned", "verified", "false-accept bound:", "float check",
                           "µGraph:", "fused"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
}

TEST_F(OptimizeCli, VerboseReportShowsPredictedPhases) {
  const std::string graph = write_graph("rmsnorm_linear");
  const CliResult r =
      yirage(fmt::format("optimize '{}' --no-tune --backend cpu --budget 60 --verbose", graph));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* text : {"predicted phases (cost model, capabilities rates)", "ramp_up", "steady",
                           "ramp_down", "collective"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
}

// The report names the pruner; asking for Z3 in a build without it is an error, not a fallback.
TEST_F(OptimizeCli, ReportsThePrunerAndRefusesAMissingZ3) {
  const std::string graph = write_graph("gemm_layernorm");
  const CliResult r = yirage(fmt::format("optimize '{}' --no-tune --backend cpu --json", graph));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pruner"], "normal_form");
  EXPECT_GT(j["pruned_by_expression"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["z3_available"], z3_available());
  const CliResult z3 =
      yirage(fmt::format("optimize '{}' --no-tune --backend cpu --json --pruner z3", graph));
  if (z3_available()) {
    ASSERT_EQ(z3.exit_code, 0) << z3.out << z3.err;
    const nlohmann::json jz = nlohmann::json::parse(z3.out);
    EXPECT_EQ(jz["pruner"], "z3");
    EXPECT_EQ(jz["kernels"], j["kernels"]);
    EXPECT_GT(jz["z3"]["queries"].get<uint64_t>(), 0u);
  } else {
    EXPECT_EQ(z3.exit_code, 1);
    EXPECT_NE(z3.err.find("Z3"), std::string::npos) << z3.err;
  }
}

// The reference backend is the literal executor, not worth tuning: optimize searches on its
// device description and prints the search's report (as --no-tune does), and writes no cache.
TEST_F(OptimizeCli, TheReferenceBackendIsSearchedNotTuned) {
  const std::string graph = write_graph("gated_mlp");
  const std::string cache = path("tuning.sqlite");
  const CliResult r = yirage(fmt::format(
      "optimize '{}' --backend reference --budget 60 --json --cache '{}'", graph, cache));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["backend"], "reference");
  EXPECT_TRUE(j.contains("verified")) << r.out;
  EXPECT_FALSE(j.contains("cache_hit")) << r.out;  // the tuned report's
  EXPECT_FALSE(fs::exists(cache));
}

// Nor does `yirage run` on it look in the tuning cache: a file that is no database is never
// opened.
TEST_F(OptimizeCli, RunOnTheReferenceBackendLeavesTheTuningCacheAlone) {
  const std::string graph = write_graph("lora");
  std::ofstream(path("tuning.sqlite")) << "not a database";
  const CliResult r = yirage(fmt::format("run '{}' --backend reference --seed 1", graph),
                             fmt::format("YIRAGE_CACHE_DIR='{}'", dir_.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("cached"), std::string::npos) << r.out;
}

// `yirage calibrate` stores the device's rates in the tuning cache; `yirage backends` then says
// the device is calibrated, and the search ranks by those rates.
TEST_F(OptimizeCli, CalibrateIsStoredReportedAndRankedBy) {
  const std::string env = fmt::format("YIRAGE_CACHE_DIR='{}'", dir_.string());
  const std::string graph = write_graph("rmsnorm_linear");
  const CliResult before =
      yirage(fmt::format("optimize '{}' --no-tune --backend cpu --json", graph), env);
  ASSERT_EQ(before.exit_code, 0) << before.err;
  EXPECT_EQ(nlohmann::json::parse(before.out)["cost_rates"]["source"], "capabilities");
  EXPECT_FALSE(fs::exists(dir_ / "tuning.sqlite"));  // asking did not create the cache

  const CliResult c = yirage("calibrate --backend cpu --quick --json", env);
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["rates"]["source"], "calibration");
  EXPECT_GT(j["rates"]["dram_bytes_per_second"].get<double>(), 0);
  EXPECT_NE(c.err.find("launch overhead"), std::string::npos) << c.err;  // progress
  EXPECT_NE(c.err.find("bandwidth dram"), std::string::npos) << c.err;

  const CliResult backends = yirage("backends --json", env);
  ASSERT_EQ(backends.exit_code, 0) << backends.err;
  for (const nlohmann::json& b : nlohmann::json::parse(backends.out))
    EXPECT_EQ(b["calibrated"].is_null(), b["name"] != "cpu") << b["name"];
  const CliResult table = yirage("backends", env);
  EXPECT_NE(table.out.find("calibrated: yes"), std::string::npos) << table.out;

  const CliResult after =
      yirage(fmt::format("optimize '{}' --no-tune --backend cpu --json", graph), env);
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(nlohmann::json::parse(after.out)["cost_rates"]["source"], "calibration");
  const CliResult cleared = yirage("calibrate --backend cpu --clear", env);
  EXPECT_NE(cleared.out.find("removed"), std::string::npos) << cleared.out;
}

// Top-k tuning is the default; --profile-all compiles and profiles every search candidate.
TEST_F(OptimizeCli, ProfileAllLeavesNoCandidateUnprofiled) {
  const std::string graph = write_graph("gated_mlp");
  const CliResult r = yirage(
      fmt::format("optimize '{}' --backend cpu --budget 20 --profile-all --json --cache '{}'",
                  graph, path("tuning.sqlite")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const nlohmann::json& c : j["candidates"]) EXPECT_NE(c["status"], "not_profiled") << c;
  EXPECT_FALSE(j["ranked"].empty());
  const CliResult bad = yirage(fmt::format("optimize '{}' --backend cpu --top-k 0", graph));
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(OptimizeCli, UnknownBackendIsAOneLineError) {
  const std::string graph = write_graph("lora");
  const CliResult r = yirage(fmt::format("optimize '{}' --backend nosuch", graph));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("yirage: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace yirage::search
