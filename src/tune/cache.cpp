// The tuning cache: SQLite in WAL mode, so readers never block the one writer, with a busy
// timeout so that concurrent writers wait instead of failing, and every store in one IMMEDIATE
// transaction so that an entry and its candidates appear together or not at all.
#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "support/error.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

namespace fs = std::filesystem;

// Version 2 added entries.codegen; a version-1 file gains the column on open (its entries, made
// by older builds, have another engine version and are never matched again).
constexpr int kSchemaVersion = 2;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
  id TEXT PRIMARY KEY,
  graph_hash TEXT NOT NULL,
  signature TEXT NOT NULL,
  backend TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  engine_version TEXT NOT NULL,
  codegen TEXT NOT NULL DEFAULT '',
  device_name TEXT NOT NULL,
  original_json TEXT NOT NULL,
  chosen INTEGER NOT NULL,
  chosen_seconds REAL NOT NULL,
  created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates(
  entry_id TEXT NOT NULL,
  idx INTEGER NOT NULL,
  label TEXT NOT NULL,
  status TEXT NOT NULL,
  seconds REAL NOT NULL,
  message TEXT NOT NULL,
  graph_json TEXT NOT NULL,
  PRIMARY KEY(entry_id, idx));
)sql";

uint64_t fnv1a(std::string_view text, uint64_t h) {
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace

std::string CacheKey::id() const {
  std::string joined;
  for (const std::string* f :
       {&graph_hash, &signature, &backend, &fingerprint, &engine_version, &codegen}) {
    joined += *f;
    joined += '\x1f';
  }
  return fmt::format("{:016x}{:016x}", fnv1a(joined, 0xcbf29ce484222325ull),
                     fnv1a(joined, 0x84222325cbf29ce4ull));
}

struct TuningCache::Db {
  sqlite3* handle = nullptr;
  fs::path path;

  [[noreturn]] void failure(std::string_view what) const {
    fail("tuning cache {}: {}: {}", path.string(), what, sqlite3_errmsg(handle));
  }

  void exec(const char* sql, std::string_view what) {
    // Creating the schema or switching to WAL can meet a lock that the busy handler does not
    // cover; such a race is brief, so retry a few times.
    for (int attempt = 0;; ++attempt) {
      const int rc = sqlite3_exec(handle, sql, nullptr, nullptr, nullptr);
      if (rc == SQLITE_OK) return;
      if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && attempt < 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      failure(what);
    }
  }
};

// A prepared statement with typed binds and reads.
class Statement {
 public:
  Statement(TuningCache::Db& db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db.handle, sql, -1, &stmt_, nullptr) != SQLITE_OK)
      db.failure("preparing a statement");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, int v) {
    sqlite3_bind_int(stmt_, i, v);
    return *this;
  }
  // True while there is a row.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    db_.failure("running a statement");
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? std::string(reinterpret_cast<const char*>(t),
                           size_t(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  int integer(int col) const { return sqlite3_column_int(stmt_, col); }
  int changes() const { return sqlite3_changes(db_.handle); }

 private:
  TuningCache::Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

TuningCache::TuningCache(fs::path path) : path_(std::move(path)), db_(new Db) {
  db_->path = path_;
  std::error_code ec;
  if (path_.has_parent_path()) fs::create_directories(path_.parent_path(), ec);
  if (ec) fail("tuning cache {}: cannot create its folder: {}", path_.string(), ec.message());
  if (sqlite3_open_v2(path_.c_str(), &db_->handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    std::string why = db_->handle ? sqlite3_errmsg(db_->handle) : "out of memory";
    sqlite3_close(db_->handle);
    delete db_;
    fail("tuning cache {}: cannot open: {}", path_.string(), why);
  }
  try {
    sqlite3_busy_timeout(db_->handle, 30000);
    db_->exec("PRAGMA journal_mode=WAL;", "switching to WAL mode");
    db_->exec("PRAGMA synchronous=NORMAL;", "setting synchronous mode");
    db_->exec((std::string("BEGIN IMMEDIATE;") + kSchema + "COMMIT;").c_str(),
              "creating the schema");
    // Under a write lock, so that two processes opening an old file upgrade it once.
    db_->exec("BEGIN IMMEDIATE;", "reading the schema version");
    std::optional<std::string> version;
    {
      Statement read(*db_, "SELECT v FROM meta WHERE k = 'schema'");
      if (read.step()) version = read.text(0);
    }
    if (!version) {
      Statement set(*db_, "INSERT OR IGNORE INTO meta(k, v) VALUES('schema', ?)");
      set.bind(1, std::to_string(kSchemaVersion)).step();
    } else if (*version == "1") {
      db_->exec(
          "ALTER TABLE entries ADD COLUMN codegen TEXT NOT NULL DEFAULT ''; "
          "UPDATE meta SET v = '2' WHERE k = 'schema';",
          "upgrading the schema from version 1");
    }
    db_->exec("COMMIT;", "committing the schema version");
    if (version && *version != "1" && *version != std::to_string(kSchemaVersion)) {
      fail("tuning cache {}: schema version {} is not the {} this build reads; remove the file",
           path_.string(), *version, kSchemaVersion);
    }
  } catch (...) {
    sqlite3_close(db_->handle);
    delete db_;
    throw;
  }
}

TuningCache::~TuningCache() {
  sqlite3_close(db_->handle);
  delete db_;
}

fs::path TuningCache::default_path() {
  if (const char* dir = std::getenv("YIRAGE_CACHE_DIR"); dir && *dir)
    return fs::path(dir) / "tuning.sqlite";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "yirage" / "tuning.sqlite";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "yirage" / "tuning.sqlite";
  return fs::temp_directory_path() / "yirage-cache" / "tuning.sqlite";
}

namespace {

constexpr const char* kEntryColumns =
    "id, graph_hash, signature, backend, fingerprint, engine_version, codegen, device_name, "
    "original_json, chosen, chosen_seconds, created";

CacheEntry read_entry(const Statement& s) {
  CacheEntry e;
  e.key = {s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6)};
  e.device_name = s.text(7);
  e.original_json = s.text(8);
  e.chosen = s.integer(9);
  e.chosen_seconds = s.real(10);
  e.created = s.text(11);
  return e;
}

void read_candidates(TuningCache::Db& db, CacheEntry& e) {
  Statement s(db,
              "SELECT label, status, seconds, message, graph_json FROM candidates WHERE "
              "entry_id = ? ORDER BY idx");
  s.bind(1, e.key.id());
  while (s.step()) e.candidates.push_back({s.text(0), s.text(1), s.real(2), s.text(3), s.text(4)});
}

}  // namespace

std::optional<CacheEntry> TuningCache::lookup(const CacheKey& key) {
  // A read transaction, so that the entry and its candidates come from one snapshot.
  db_->exec("BEGIN;", "starting a read");
  try {
    Statement s(*db_, fmt::format("SELECT {} FROM entries WHERE id = ? AND fingerprint = ? AND "
                                  "backend = ? AND engine_version = ?",
                                  kEntryColumns)
                          .c_str());
    s.bind(1, key.id()).bind(2, key.fingerprint).bind(3, key.backend).bind(4, key.engine_version);
    std::optional<CacheEntry> entry;
    if (s.step()) {
      entry = read_entry(s);
      read_candidates(*db_, *entry);
    }
    db_->exec("COMMIT;", "ending a read");
    return entry;
  } catch (...) {
    sqlite3_exec(db_->handle, "ROLLBACK;", nullptr, nullptr, nullptr);
    throw;
  }
}

void TuningCache::store(const CacheEntry& e) {
  const std::string id = e.key.id();
  db_->exec("BEGIN IMMEDIATE;", "starting a write");
  try {
    Statement del(*db_, "DELETE FROM candidates WHERE entry_id = ?");
    del.bind(1, id).step();
    Statement put(*db_, fmt::format("INSERT OR REPLACE INTO entries({}) VALUES(?, ?, ?, ?, ?, ?, "
                                    "?, ?, ?, ?, ?, ?)",
                                    kEntryColumns)
                            .c_str());
    put.bind(1, id)
        .bind(2, e.key.graph_hash)
        .bind(3, e.key.signature)
        .bind(4, e.key.backend)
        .bind(5, e.key.fingerprint)
        .bind(6, e.key.engine_version)
        .bind(7, e.key.codegen)
        .bind(8, e.device_name)
        .bind(9, e.original_json)
        .bind(10, e.chosen)
        .bind(11, e.chosen_seconds)
        .bind(12, e.created.empty() ? now_utc() : e.created)
        .step();
    for (size_t i = 0; i < e.candidates.size(); ++i) {
      const CandidateRecord& c = e.candidates[i];
      Statement add(*db_,
                    "INSERT INTO candidates(entry_id, idx, label, status, seconds, message, "
                    "graph_json) VALUES(?, ?, ?, ?, ?, ?, ?)");
      add.bind(1, id)
          .bind(2, int(i))
          .bind(3, c.label)
          .bind(4, c.status)
          .bind(5, c.seconds)
          .bind(6, c.message)
          .bind(7, c.graph_json)
          .step();
    }
    db_->exec("COMMIT;", "committing a write");
  } catch (...) {
    sqlite3_exec(db_->handle, "ROLLBACK;", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<CacheEntry> TuningCache::list() {
  Statement s(
      *db_, fmt::format("SELECT {} FROM entries ORDER BY created DESC, id", kEntryColumns).c_str());
  std::vector<CacheEntry> entries;
  while (s.step()) entries.push_back(read_entry(s));
  for (CacheEntry& e : entries) {
    Statement c(*db_,
                "SELECT label, status, seconds, message FROM candidates WHERE entry_id = ? "
                "ORDER BY idx");
    c.bind(1, e.key.id());
    while (c.step()) e.candidates.push_back({c.text(0), c.text(1), c.real(2), c.text(3), {}});
  }
  return entries;
}

std::optional<CacheEntry> TuningCache::find(std::string_view prefix) {
  Statement s(*db_, fmt::format("SELECT {} FROM entries WHERE substr(id, 1, ?) = ? ORDER BY id",
                                kEntryColumns)
                        .c_str());
  s.bind(1, int(prefix.size())).bind(2, std::string(prefix));
  std::vector<CacheEntry> found;
  while (s.step()) found.push_back(read_entry(s));
  if (found.size() > 1)
    fail("tuning cache {}: {} entries start with '{}'; give more of the id", path_.string(),
         found.size(), prefix);
  if (found.empty()) return std::nullopt;
  read_candidates(*db_, found[0]);
  return found[0];
}

int TuningCache::clear(std::optional<std::string> id) {
  db_->exec("BEGIN IMMEDIATE;", "starting a write");
  try {
    int removed = 0;
    if (id) {
      Statement c(*db_, "DELETE FROM candidates WHERE entry_id = ?");
      c.bind(1, *id).step();
      Statement e(*db_, "DELETE FROM entries WHERE id = ?");
      e.bind(1, *id).step();
      removed = e.changes();
    } else {
      Statement c(*db_, "DELETE FROM candidates");
      c.step();
      Statement e(*db_, "DELETE FROM entries");
      e.step();
      removed = e.changes();
    }
    db_->exec("COMMIT;", "committing a write");
    return removed;
  } catch (...) {
    sqlite3_exec(db_->handle, "ROLLBACK;", nullptr, nullptr, nullptr);
    throw;
  }
}

const CandidateRecord& CacheEntry::winner() const {
  if (!has_winner())
    fail("tuning cache: entry {} names candidate {} as its winner, but has {} candidates",
         key.id().substr(0, 12), chosen, candidates.size());
  return candidates[size_t(chosen)];
}

}  // namespace yirage::tune
