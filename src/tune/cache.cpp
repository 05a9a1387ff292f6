// The tuning cache: SQLite in WAL mode, so readers never block the one writer, with a busy
// timeout so that concurrent writers wait instead of failing, and every store in one IMMEDIATE
// transaction so that an entry and its candidates appear together or not at all. synchronous=FULL
// syncs the log at every commit, so that a committed entry survives power loss as well as a
// killed process; tuning commits once per optimize() miss, so the sync costs nothing that
// matters. A file that is not a database or is damaged (SQLite reports SQLITE_NOTADB or
// SQLITE_CORRUPT, or PRAGMA integrity_check on opening finds a fault) is never trusted: it is moved
// aside with a one-line warning and an empty cache takes its place.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "support/error.h"
#include "support/warn.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

namespace fs = std::filesystem;

// Version 2 added entries.codegen, version 3 entries.checksum; an older file gains the columns on
// open (its entries, made by older builds, have another engine version and are never matched
// again).
constexpr int kSchemaVersion = 3;

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
  checksum TEXT NOT NULL DEFAULT '',
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
CREATE TABLE IF NOT EXISTS calibrations(
  backend TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  device_name TEXT NOT NULL,
  rates_json TEXT NOT NULL,
  measurements_json TEXT NOT NULL,
  created TEXT NOT NULL,
  PRIMARY KEY(backend, fingerprint));
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

// A damaged file or one that is not a database: the cache moves it aside and starts again.
struct CorruptFile : Error {
  using Error::Error;
};

// SQLITE_ERROR too: this file's SQL is fixed and tested, so a statement that fails to prepare (no
// such table or column) means that the file's schema is not the one this code wrote.
bool is_corruption(int code) {
  code &= 0xff;  // the primary code of an extended one
  return code == SQLITE_CORRUPT || code == SQLITE_NOTADB || code == SQLITE_ERROR;
}

// The file's inode, 0 when it does not exist: so that a process that finds the file damaged
// moves aside that file, never the fresh one another process put in its place meanwhile.
uint64_t inode_of(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_ino) : 0;
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
    if (is_corruption(sqlite3_errcode(handle)))
      throw CorruptFile(fmt::format("{}: {}", what, sqlite3_errmsg(handle)));
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

namespace {

// PRAGMA integrity_check: the structure of every page, and every index against its table, which
// quick_check skips (a damaged index would make lookups miss or find the wrong rows). A cache is
// kilobytes to a few megabytes, so this costs milliseconds per open. Throws CorruptFile with its
// first finding.
void integrity_check(TuningCache::Db& db) {
  Statement check(db, "PRAGMA integrity_check(1)");
  const std::string verdict = check.step() ? check.text(0) : "no result";
  if (verdict != "ok") throw CorruptFile(fmt::format("integrity_check: {}", verdict));
}

void create_or_upgrade_schema(TuningCache::Db& db) {
  db.exec((std::string("BEGIN IMMEDIATE;") + kSchema + "COMMIT;").c_str(), "creating the schema");
  // Under a write lock, so that two processes opening an old file upgrade it once.
  db.exec("BEGIN IMMEDIATE;", "reading the schema version");
  std::optional<std::string> version;
  {
    Statement read(db, "SELECT v FROM meta WHERE k = 'schema'");
    if (read.step()) version = read.text(0);
  }
  if (!version) {
    Statement set(db, "INSERT OR IGNORE INTO meta(k, v) VALUES('schema', ?)");
    set.bind(1, std::to_string(kSchemaVersion)).step();
  } else if (*version == "1" || *version == "2") {
    if (*version == "1")
      db.exec("ALTER TABLE entries ADD COLUMN codegen TEXT NOT NULL DEFAULT '';",
              "upgrading the schema from version 1");
    db.exec(
        "ALTER TABLE entries ADD COLUMN checksum TEXT NOT NULL DEFAULT ''; "
        "UPDATE meta SET v = '3' WHERE k = 'schema';",
        "upgrading the schema to version 3");
  }
  db.exec("COMMIT;", "committing the schema version");
  // Another build's schema, or a damaged value: either way the file is not one this build can
  // trust, and a cache can always be rebuilt.
  if (version && *version != "1" && *version != "2" && *version != std::to_string(kSchemaVersion))
    throw CorruptFile(fmt::format("schema version '{}' is not one this build reads (1 to {})",
                                  *version, kSchemaVersion));
}

// Opens, checks and sets up the database; throws CorruptFile for a damaged file, yirage::Error
// for anything else.
TuningCache::Db* open_database(const fs::path& path) {
  auto db = std::make_unique<TuningCache::Db>();
  db->path = path;
  if (sqlite3_open_v2(path.c_str(), &db->handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    std::string why = db->handle ? sqlite3_errmsg(db->handle) : "out of memory";
    sqlite3_close(db->handle);
    fail("tuning cache {}: cannot open: {}", path.string(), why);
  }
  try {
    sqlite3_busy_timeout(db->handle, 30000);
    integrity_check(*db);
    db->exec("PRAGMA journal_mode=WAL;", "switching to WAL mode");
    db->exec("PRAGMA synchronous=FULL;", "setting synchronous mode");
    create_or_upgrade_schema(*db);
  } catch (...) {
    sqlite3_close(db->handle);
    throw;
  }
  return db.release();
}

// Renames the damaged file (and its log) to "<file>.corrupt-<time>-<pid>"; returns the new name.
// When the file is no longer the one found damaged (`inode`), another process has already moved
// it and made a new one: that one stays.
std::optional<fs::path> move_aside(const fs::path& path, uint64_t inode) {
  if (inode_of(path) != inode) return std::nullopt;
  std::string stamp = now_utc();
  std::erase(stamp, ':');
  const fs::path aside = fs::path(path.string() + fmt::format(".corrupt-{}-{}", stamp, getpid()));
  std::error_code ec;
  fs::rename(path, aside, ec);
  if (ec)
    fail("tuning cache {}: damaged, and cannot be moved aside: {}", path.string(), ec.message());
  fs::rename(path.string() + "-wal", aside.string() + "-wal", ec);
  fs::remove(path.string() + "-shm", ec);
  return aside;
}

}  // namespace

TuningCache::TuningCache(fs::path path) : path_(std::move(path)) {
  std::error_code ec;
  if (path_.has_parent_path()) fs::create_directories(path_.parent_path(), ec);
  if (ec) fail("tuning cache {}: cannot create its folder: {}", path_.string(), ec.message());
  const uint64_t inode = inode_of(path_);
  try {
    db_ = open_database(path_);
  } catch (const CorruptFile& e) {
    recover(e.what(), inode);
  }
}

void TuningCache::recover(const std::string& why, uint64_t inode) {
  if (db_) sqlite3_close(db_->handle);
  delete db_;
  db_ = nullptr;
  const std::optional<fs::path> aside = move_aside(path_, inode);
  if (aside)
    warn(fmt::format("tuning cache {} is damaged ({}); moved it to {} and started an empty one",
                     path_.string(), why, aside->string()));
  db_ = open_database(path_);
}

template <typename F>
auto TuningCache::guarded(F&& operation) {
  const uint64_t inode = inode_of(path_);
  try {
    return operation();
  } catch (const CorruptFile& e) {
    sqlite3_exec(db_->handle, "ROLLBACK;", nullptr, nullptr, nullptr);
    recover(e.what(), inode);
    return operation();
  }
}

TuningCache::~TuningCache() {
  if (db_) sqlite3_close(db_->handle);
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
    "original_json, chosen, chosen_seconds, created, checksum";

// Over every field of the entry and of its candidates: SQLite checks its pages' structure, not
// the bytes of the values in them, so damage inside a stored graph would otherwise be read back
// as a different graph.
std::string checksum_of(const CacheEntry& e) {
  std::string joined = e.key.id();
  for (const std::string* f : {&e.device_name, &e.original_json, &e.created}) joined += '\x1f' + *f;
  joined += fmt::format("\x1f{}\x1f{:a}", e.chosen, e.chosen_seconds);
  for (const CandidateRecord& c : e.candidates)
    joined += fmt::format("\x1e{}\x1f{}\x1f{:a}\x1f{}\x1f{}", c.label, c.status, c.seconds,
                          c.message, c.graph_json);
  return fmt::format("{:016x}{:016x}", fnv1a(joined, 0xcbf29ce484222325ull),
                     fnv1a(joined, 0x84222325cbf29ce4ull));
}

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

// The entry's stored checksum (column 12 of kEntryColumns).
std::string stored_checksum(const Statement& s) {
  return s.text(12);
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
  return guarded([&] {
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
        if (stored_checksum(s) != checksum_of(*entry)) {
          warn(
              fmt::format("tuning cache {}: entry {} fails its checksum; it is ignored and tuned "
                          "again",
                          path_.string(), key.id().substr(0, 12)));
          entry.reset();
        }
      }
      db_->exec("COMMIT;", "ending a read");
      return entry;
    } catch (...) {
      sqlite3_exec(db_->handle, "ROLLBACK;", nullptr, nullptr, nullptr);
      throw;
    }
  });
}

void TuningCache::store(const CacheEntry& e) {
  CacheEntry stamped = e;
  if (stamped.created.empty()) stamped.created = now_utc();
  return guarded([&] {
    const std::string id = e.key.id();
    db_->exec("BEGIN IMMEDIATE;", "starting a write");
    try {
      Statement del(*db_, "DELETE FROM candidates WHERE entry_id = ?");
      del.bind(1, id).step();
      Statement put(*db_, fmt::format("INSERT OR REPLACE INTO entries({}) VALUES(?, ?, ?, ?, ?, ?, "
                                      "?, ?, ?, ?, ?, ?, ?)",
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
          .bind(12, stamped.created)
          .bind(13, checksum_of(stamped))
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
  });
}

std::vector<CacheEntry> TuningCache::list() {
  return guarded([&] {
    Statement s(
        *db_,
        fmt::format("SELECT {} FROM entries ORDER BY created DESC, id", kEntryColumns).c_str());
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
  });
}

std::optional<CacheEntry> TuningCache::find(std::string_view prefix) {
  return guarded([&]() -> std::optional<CacheEntry> {
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
  });
}

int TuningCache::clear(std::optional<std::string> id) {
  return guarded([&] {
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
  });
}

void TuningCache::store_calibration(const Calibration& c) {
  guarded([&] {
    Statement s(
        *db_,
        "INSERT OR REPLACE INTO calibrations(backend, fingerprint, device_name, rates_json, "
        "measurements_json, created) VALUES(?, ?, ?, ?, ?, ?)");
    s.bind(1, c.backend)
        .bind(2, c.fingerprint)
        .bind(3, c.device_name)
        .bind(4, cost::to_json(c.rates).dump())
        .bind(5, c.measurements.dump())
        .bind(6, c.created.empty() ? now_utc() : c.created)
        .step();
  });
}

std::optional<Calibration> TuningCache::lookup_calibration(std::string_view backend,
                                                           std::string_view fingerprint) {
  return guarded([&]() -> std::optional<Calibration> {
    Statement s(*db_,
                "SELECT device_name, rates_json, measurements_json, created FROM calibrations "
                "WHERE backend = ? AND fingerprint = ?");
    s.bind(1, std::string(backend)).bind(2, std::string(fingerprint));
    if (!s.step()) return std::nullopt;
    Calibration c;
    c.backend = backend;
    c.fingerprint = fingerprint;
    c.device_name = s.text(0);
    c.created = s.text(3);
    try {
      c.rates = cost::device_from_json(nlohmann::json::parse(s.text(1)));
      c.measurements = nlohmann::json::parse(s.text(2));
    } catch (const std::exception& e) {
      warn(fmt::format("tuning cache {}: the calibration of {} {} is unreadable ({}); ignored",
                       path_.string(), backend, fingerprint, e.what()));
      return std::nullopt;
    }
    return c;
  });
}

bool TuningCache::clear_calibration(std::string_view backend, std::string_view fingerprint) {
  return guarded([&] {
    Statement s(*db_, "DELETE FROM calibrations WHERE backend = ? AND fingerprint = ?");
    s.bind(1, std::string(backend)).bind(2, std::string(fingerprint)).step();
    return s.changes() > 0;
  });
}

const CandidateRecord& CacheEntry::winner() const {
  if (!has_winner())
    fail("tuning cache: entry {} names candidate {} as its winner, but has {} candidates",
         key.id().substr(0, 12), chosen, candidates.size());
  return candidates[size_t(chosen)];
}

}  // namespace yirage::tune
