// The tuning cache's key: the engine version names the sources the build came from, the backend's
// code-generator settings are part of the key (an entry tuned under other settings misses), and
// a file written by a build with the previous schema is upgraded in place.
#include <sqlite3.h>

#include <atomic>
#include <regex>

#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "cpu_test_util.h"
#include "support/version.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

namespace fs = std::filesystem;

// Only the unfused graph competes, so each optimize() that misses the cache is quick; `searches`
// counts the misses.
tune::OptimizeOptions unfused_only(const fs::path& db, std::atomic<int>& searches) {
  tune::OptimizeOptions o;
  o.cache_path = db;
  o.profile.min_seconds = 0.001;
  o.profile.min_repetitions = 1;
  o.candidates = [&searches](const ir::KernelGraph&, const backend::DeviceDescription&) {
    ++searches;
    return std::vector<tune::Candidate>{};
  };
  return o;
}

TEST(CacheKey, EngineVersionNamesTheSourceHash) {
  const ir::KernelGraph g = ir::testing::rmsnorm_linear_kernel(ir::DType::f32);
  const tune::CacheKey key = tune::cache_key(g, cpu_backend());
  EXPECT_TRUE(
      std::regex_match(key.engine_version, std::regex(std::string(kVersion) + "\\+[0-9a-f]{12}")))
      << key.engine_version;
  EXPECT_NE(key.codegen.find("threads="), std::string::npos) << key.codegen;
  EXPECT_NE(key.codegen.find("compiler="), std::string::npos) << key.codegen;
}

TEST(CacheKey, OtherCodegenSettingsMissTheCache) {
  const fs::path db = fresh_cache_db("key-settings");
  const ir::KernelGraph g = ir::testing::rmsnorm_linear_kernel(ir::DType::f32);
  std::unique_ptr<backend::Backend> one = backend::create_backend("cpu", {.threads = 1});
  std::unique_ptr<backend::Backend> two = backend::create_backend("cpu", {.threads = 2});
  ASSERT_NE(one->codegen_settings(), two->codegen_settings());
  std::atomic<int> searches{0};
  EXPECT_FALSE(tune::optimize(g, *one, unfused_only(db, searches)).cache_hit);
  EXPECT_FALSE(tune::optimize(g, *two, unfused_only(db, searches)).cache_hit)
      << "an entry tuned with 1 thread was reused with 2";
  EXPECT_TRUE(tune::optimize(g, *one, unfused_only(db, searches)).cache_hit);
  EXPECT_EQ(searches, 2);
  EXPECT_NE(tune::cache_key(g, *one).id(), tune::cache_key(g, *two).id());
}

// A file as the schema-1 builds wrote it, with one entry.
void write_schema_1_file(const fs::path& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* sql = R"sql(
    CREATE TABLE meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
    INSERT INTO meta VALUES('schema', '1');
    CREATE TABLE entries(id TEXT PRIMARY KEY, graph_hash TEXT NOT NULL, signature TEXT NOT NULL,
      backend TEXT NOT NULL, fingerprint TEXT NOT NULL, engine_version TEXT NOT NULL,
      device_name TEXT NOT NULL, original_json TEXT NOT NULL, chosen INTEGER NOT NULL,
      chosen_seconds REAL NOT NULL, created TEXT NOT NULL);
    CREATE TABLE candidates(entry_id TEXT NOT NULL, idx INTEGER NOT NULL, label TEXT NOT NULL,
      status TEXT NOT NULL, seconds REAL NOT NULL, message TEXT NOT NULL,
      graph_json TEXT NOT NULL, PRIMARY KEY(entry_id, idx));
    INSERT INTO entries VALUES('old', 'h', 's', 'cpu', 'fp', '0.1.0', 'dev', '{}', 0, 1.0, 'then');
  )sql";
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

TEST(TuningCache, UpgradesASchema1File) {
  const fs::path path = fresh_cache_db("key-schema1");
  write_schema_1_file(path);
  tune::TuningCache cache(path);
  const std::vector<tune::CacheEntry> old = cache.list();
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].key.codegen, "");
  tune::CacheEntry e;
  e.key = {"h", "s", "cpu", "fp", "0.2.0+abc", "threads=2"};
  e.device_name = "dev";
  e.original_json = "{}";
  e.chosen = 0;
  e.candidates = {{"unfused", "ok", 1.0, "", "{}"}};
  cache.store(e);
  ASSERT_TRUE(cache.lookup(e.key));
  EXPECT_EQ(cache.lookup(e.key)->key.codegen, "threads=2");
  tune::CacheKey other = e.key;
  other.codegen = "threads=4";
  EXPECT_FALSE(cache.lookup(other));
  tune::TuningCache reopened(path);  // the upgrade happened once; a second open reads version 3
  EXPECT_EQ(reopened.list().size(), 2u);
}

}  // namespace
}  // namespace yirage::cpu_test
