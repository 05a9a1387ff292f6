// The tuning cache's durability: processes tuning at once never fail on contention, writers
// killed at random points lose nothing they committed, a damaged file is moved aside and rebuilt,
// and an entry that cannot be trusted or used is tuned again. The writers are forked from this
// test process, which has no other threads when they start, and do only SQLite work before they
// exit or are killed.
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "faulty_backend.h"
#include "reliability_util.h"
#include "tune/tune.h"

namespace yirage::reliability_test {
namespace {

namespace fs = std::filesystem;

std::string integrity_of(const fs::path& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open";
  }
  std::string verdict = "no result";
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    verdict = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return verdict;
}

tune::CacheEntry entry_named(const std::string& name) {
  tune::CacheEntry e;
  e.key = {name, "(f32[2]) -> (f32[2])", "faulty", "faulty-1", "test", ""};
  e.device_name = "faulty test device";
  e.original_json = "{\"graph\": \"" + name + "\"}";
  e.chosen = 1;
  e.chosen_seconds = 0.25;
  e.candidates = {{"unfused", "ok", 0.5, "", "{\"a\": 1}"}, {"search #0", "ok", 0.25, "", "{}"}};
  return e;
}

bool loads_intact(tune::TuningCache& cache, const std::string& name) {
  const tune::CacheEntry want = entry_named(name);
  std::optional<tune::CacheEntry> got = cache.lookup(want.key);
  return got && got->original_json == want.original_json && got->candidates.size() == 2 &&
         got->candidates[1].label == "search #0" && got->chosen_seconds == 0.25;
}

tune::OptimizeOptions quick_tuning(const fs::path& cache, int64_t rows) {
  tune::OptimizeOptions o;
  o.cache_path = cache;
  o.candidates = [rows](const ir::KernelGraph&, const backend::DeviceDescription&) {
    return std::vector<tune::Candidate>{{"sound", with_extra_node("unused", rows), std::nullopt}};
  };
  o.profile.min_seconds = 0;
  o.profile.min_repetitions = 1;
  o.profile.warmup = 0;
  return o;
}

TEST(CacheDurability, EightProcessesTuningOverlappingGraphsAtOnce) {
  const fs::path cache = fresh_cache();
  constexpr int kProcesses = 8, kGraphs = 4;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int failures = 0;
      for (int k = 0; k < 3; ++k) {  // graphs p, p+1, p+2: each is tuned by several at once
        const int64_t rows = 2 + (p + k) % kGraphs;
        try {
          tune::optimize(add_relu(rows), backend::get_backend("faulty"), quick_tuning(cache, rows));
        } catch (const std::exception& e) {
          fprintf(stderr, "process %d, graph %d: %s\n", p, int(rows), e.what());
          ++failures;
        }
      }
      _exit(failures);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(integrity_of(cache), "ok");
  for (int64_t rows = 2; rows < 2 + kGraphs; ++rows) {
    tune::OptimizeOptions o = quick_tuning(cache, rows);
    EXPECT_TRUE(tune::optimize(add_relu(rows), backend::get_backend("faulty"), o).cache_hit)
        << rows;
  }
}

// A writer stores entries "<iteration>-<n>" for n = 0, 1, ... and reports each n on `report` once
// store() has returned; it runs until it is killed.
[[noreturn]] void write_until_killed(const fs::path& cache, int iteration, int report) {
  try {
    tune::TuningCache c(cache);
    for (int n = 0;; ++n) {
      c.store(entry_named(fmt::format("{}-{}", iteration, n)));
      if (write(report, &n, sizeof n) != sizeof n) _exit(3);
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "writer %d: %s\n", iteration, e.what());
    _exit(2);
  }
}

TEST(CacheDurability, WritersKilledAtRandomPointsLoseNothingCommitted) {
  const fs::path cache = fresh_cache();
  std::mt19937 rng(42);
  std::vector<std::string> committed;
  constexpr int kIterations = 200;
  for (int i = 0; i < kIterations; ++i) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      write_until_killed(cache, i, fds[1]);
    }
    close(fds[1]);
    // Anywhere from before the open (which takes a few milliseconds) to a few commits in.
    usleep(std::uniform_int_distribution<useconds_t>(0, 25000)(rng));
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer " << i << " ended before the kill: " << status;
    int n = 0;
    while (read(fds[0], &n, sizeof n) == sizeof n) committed.push_back(fmt::format("{}-{}", i, n));
    close(fds[0]);
  }
  EXPECT_EQ(integrity_of(cache), "ok");
  tune::TuningCache c(cache);
  int lost = 0;
  for (const std::string& name : committed) lost += loads_intact(c, name) ? 0 : 1;
  EXPECT_EQ(lost, 0) << "of " << committed.size() << " committed entries";
  EXPECT_GT(committed.size(), 0u) << "no writer got to commit: the kills test only the open";
  RecordProperty("committed_entries", int(committed.size()));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A cache with entries "a", "b", "c", checkpointed so that the file holds them all.
std::string valid_cache_bytes() {
  const fs::path path = fresh_cache();
  {
    tune::TuningCache c(path);
    for (const char* name : {"a", "b", "c"}) c.store(entry_named(name));
  }  // the last connection to close checkpoints the log into the file and removes it
  return read_file(path);
}

size_t files_moved_aside(const fs::path& cache) {
  size_t n = 0;
  for (const fs::directory_entry& f : fs::directory_iterator(cache.parent_path()))
    n += f.path().filename().string().find(".corrupt-") != std::string::npos ? 1 : 0;
  return n;
}

TEST(CacheDurability, ADamagedFileIsMovedAsideWithAWarningAndRebuilt) {
  const std::string valid = valid_cache_bytes();
  ASSERT_GT(valid.size(), 4096u);
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"garbage header", std::string(100, '\x5a') + valid.substr(100)},
      {"not a database", "this is not an SQLite file\n"},
      {"truncated", valid.substr(0, valid.size() / 2 + 17)}};
  for (const auto& [what, bytes] : damaged) {
    const fs::path path = fresh_cache();
    write_file(path, bytes);
    testing::internal::CaptureStderr();
    std::optional<tune::TuningCache> c;
    ASSERT_NO_THROW(c.emplace(path)) << what;
    const std::string warning = testing::internal::GetCapturedStderr();
    EXPECT_NE(warning.find("yirage: warning: tuning cache " + path.string() + " is damaged"),
              std::string::npos)
        << what << ": " << warning;
    EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1) << what << ": " << warning;
    EXPECT_EQ(files_moved_aside(path), 1u) << what;
    EXPECT_FALSE(c->lookup(entry_named("a").key)) << what;  // a new, empty cache
    c->store(entry_named("d"));
    EXPECT_TRUE(loads_intact(*c, "d")) << what;
    EXPECT_EQ(integrity_of(path), "ok") << what;
  }
}

TEST(CacheDurability, FuzzedFilesAreNeverACrashAndNeverTrusted) {
  const std::string valid = valid_cache_bytes();
  std::mt19937 rng(7);
  for (int variant = 0; variant < 60; ++variant) {
    std::string bytes = valid;
    if (variant % 3 == 0) {
      bytes.resize(std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng));
    } else {
      const int flips = std::uniform_int_distribution<int>(1, 16)(rng);
      for (int f = 0; f < flips; ++f)
        bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng)] ^=
            char(std::uniform_int_distribution<int>(1, 255)(rng));
    }
    const fs::path path = fresh_cache();
    write_file(path, bytes);
    testing::internal::CaptureStderr();
    try {
      tune::TuningCache c(path);
      // What comes back is either what was stored or nothing: damage is never read as an entry.
      for (const char* name : {"a", "b", "c"}) {
        std::optional<tune::CacheEntry> got = c.lookup(entry_named(name).key);
        if (got) {
          EXPECT_TRUE(loads_intact(c, name)) << "variant " << variant << ", " << name;
        }
      }
      c.store(entry_named("d"));
      EXPECT_TRUE(loads_intact(c, "d")) << "variant " << variant;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "variant " << variant << ": " << e.what();
    }
    testing::internal::GetCapturedStderr();
    EXPECT_EQ(integrity_of(path), "ok") << "variant " << variant;
  }
}

TEST(CacheDurability, AnEntryWhoseValuesWereDamagedFailsItsChecksum) {
  const fs::path path = fresh_cache();
  tune::TuningCache c(path);
  c.store(entry_named("a"));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  // A change SQLite's own checks cannot see: a valid page holding other bytes.
  ASSERT_EQ(sqlite3_exec(db, "UPDATE candidates SET graph_json = '{\"b\": 1}' WHERE idx = 1",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(c.lookup(entry_named("a").key));
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("fails its checksum"), std::string::npos) << warning;
}

TEST(CacheDurability, AWinnerThatNoLongerLoadsIsTunedAgainWithAWarning) {
  const fs::path cache = fresh_cache();
  backend::Backend& faulty = backend::get_backend("faulty");
  ASSERT_FALSE(tune::optimize(add_relu(), faulty, quick_tuning(cache, 4)).cache_hit);
  ASSERT_TRUE(tune::optimize(add_relu(), faulty, quick_tuning(cache, 4)).cache_hit);
  isolation_test::fail_next_compiles(1);  // the cached winner's binary fails to load once
  testing::internal::CaptureStderr();
  const tune::OptimizeResult again = tune::optimize(add_relu(), faulty, quick_tuning(cache, 4));
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(again.cache_hit);
  EXPECT_NE(warning.find("does not compile or load on 'faulty'"), std::string::npos) << warning;
  EXPECT_NE(warning.find("tuning again"), std::string::npos) << warning;
  EXPECT_TRUE(tune::optimize(add_relu(), faulty, quick_tuning(cache, 4)).cache_hit);
}

TEST(CacheDurability, AnUnreadableWinnerIsTunedAgainWithAWarning) {
  const fs::path cache = fresh_cache();
  backend::Backend& faulty = backend::get_backend("faulty");
  tune::OptimizeResult first = tune::optimize(add_relu(), faulty, quick_tuning(cache, 4));
  tune::CacheEntry entry = first.entry;
  entry.candidates[size_t(entry.chosen)].graph_json = "{\"schema\": \"not a graph\"}";
  tune::TuningCache(cache).store(entry);
  testing::internal::CaptureStderr();
  const tune::OptimizeResult again = tune::optimize(add_relu(), faulty, quick_tuning(cache, 4));
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(again.cache_hit);
  EXPECT_NE(warning.find("is unreadable"), std::string::npos) << warning;
}

}  // namespace
}  // namespace yirage::reliability_test
