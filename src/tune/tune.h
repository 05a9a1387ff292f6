// YiRage tuning: measure candidates on the device that will run them, and remember the winner.
//
// This stage closes the pipeline. optimize() takes a kernel graph and a backend, asks the search
// for ranked candidate µGraphs (the unfused graph is always one), adds to each a variant with its
// kernel-level matmuls as library calls when the backend offers them (capabilities
// "library_matmul", labelled "<label> + OpenBLAS 0.3.21"), compiles them on the backend in
// parallel (a candidate that fails to compile is recorded with the compiler's message and
// skipped), checks each one's outputs against the unfused graph's on the same random inputs,
// times the survivors with the profiler, and stores the fastest in the tuning cache with every
// candidate's time. The cache is an SQLite database in WAL mode keyed by (structural graph hash,
// input and output types, backend, device fingerprint, engine version and source hash, code
// generator settings); a second optimize() of the
// same program on the same device is a hit that skips search and profiling, and an entry made on
// a device with another fingerprint, by another build, or under other code-generator settings
// (Backend::codegen_settings) is never used. The profiler warms up, repeats and takes the
// median, and rotates several copies of the inputs so that weights that would not stay in the
// caches in real use are not timed from them; the backend's own clock measures
// (Backend::time: the host's steady clock on cpu, CUDA events over CUDA-graph replays on cuda).
// Only backends whose device says it is tunable are worth tuning (the reference backend is
// not). SQLite stays inside this library.
//
// The cache-trust policy, the same for every front end (CLI, Python, the LLM engine): a winner is
// never returned unproved. The search's candidates carry their proofs; candidates from another
// source are proved before they are compiled; a cached winner is proved again on every hit,
// because the file is shared by every process and build on the machine, and what the key
// identifies is the graph, not the µGraph stored under it. Only the unfused graph itself is
// trusted by its structural hash. Measured times are trusted from the cache as they are.
//
// Candidates are generated code, and a code-generation bug may make one crash or hang. So each
// is checked and profiled in a worker process (worker.cpp says why a process started by exec,
// not fork): a candidate that kills its worker with a signal is recorded as "crashed" with the
// signal's name, one that runs past OptimizeOptions::candidate_seconds_limit as "timed_out", and
// a new worker goes on with the rest. The winner then runs in the caller's process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "ir/ir.h"
#include "search/search.h"

namespace yirage::tune {

// ==== profiler ===================================================================================

struct ProfileOptions {
  int warmup = 2;
  int min_repetitions = 5;
  int max_repetitions = 200;
  double min_seconds = 0.3;  // keep repeating until this much time was measured (or max reps)
  // Copies of the inputs cycled through, so that together they exceed twice the last-level
  // cache (capabilities "l3_bytes", else 32 MiB); at most max_input_sets and max_rotation_bytes.
  bool rotate_inputs = true;
  int max_input_sets = 256;
  int64_t max_rotation_bytes = int64_t(1) << 30;
  uint64_t seed = 0;
  // Launches per timed sample (TimingPlan); 0: as many as the backend's clock needs.
  int launches_per_repetition = 0;
};

struct Profile {
  double median_seconds = 0;
  double min_seconds = 0;
  double mean_seconds = 0;
  int repetitions = 0;  // samples
  int input_sets = 0;
  int launches_per_repetition = 0;  // launches per sample, as the backend ran them
};

// Times launches of `module` (compiled from `graph` on `backend`) on random inputs with the
// backend's own clock (Backend::time): the times are per launch, each sample's time divided by
// its launches.
Profile profile(backend::Backend& backend, backend::Module& module, const ir::KernelGraph& graph,
                const ProfileOptions& options = {});

// ==== tuning cache ===============================================================================

struct CacheKey {
  std::string graph_hash;      // ir::structural_hash_hex
  std::string signature;       // input and output types in canonical order
  std::string backend;         // "cpu"
  std::string fingerprint;     // the device's
  std::string engine_version;  // yirage's version and the hash of the sources it was built from
  std::string codegen;         // Backend::codegen_settings()
  // A 32-hex-digit id of the six fields: the entry's primary key.
  std::string id() const;
};

CacheKey cache_key(const ir::KernelGraph& graph, const backend::Backend& backend);

struct CandidateRecord {
  std::string label;  // "unfused", "search #2 (1 kernel)", ...
  // "ok", "unproved" (not proved equivalent to the graph: never compiled), "compile_error",
  // "mismatch", "non_finite" (inf or NaN where the unfused graph is finite), "run_error",
  // "not_profiled" (ranked below the top-k by the cost model: OptimizeOptions::max_candidates),
  // "crashed" (its worker died of a signal: the message names it), "timed_out" (its worker ran
  // past the limit and was killed), "slower_than_budget"
  std::string status;
  double seconds = -1;  // the profiled median; negative when not profiled
  // Why it was rejected, one line; for a candidate checked against the unfused graph, the result
  // and tolerance of every input distribution it ran on.
  std::string message;
  std::string graph_json;  // the µGraph
};

struct CacheEntry {
  CacheKey key;
  std::string device_name;
  std::string original_json;  // the graph that was optimized
  int chosen = -1;            // index into candidates
  double chosen_seconds = 0;
  std::string created;  // UTC, ISO 8601
  std::vector<CandidateRecord> candidates;

  // Whether `chosen` indexes a candidate (an entry read from a damaged file may not).
  bool has_winner() const { return chosen >= 0 && size_t(chosen) < candidates.size(); }
  // The chosen candidate; throws yirage::Error naming the entry when there is none.
  const CandidateRecord& winner() const;
};

// The cost model's rates measured on one device (calibrate()), stored in the tuning cache under
// (backend, device fingerprint). A search ranks by them where they exist (OptimizeOptions).
struct Calibration {
  std::string backend, fingerprint, device_name;
  std::string created;          // UTC, ISO 8601
  cost::Device rates;           // source "calibration"
  nlohmann::json measurements;  // what was timed: working sets, sizes, seconds
};

class TuningCache {
 public:
  // Opens or creates the database (and its folder). A damaged file, or one that is not a
  // database, is moved aside with a warning and replaced by an empty cache. Throws yirage::Error
  // naming the file when it cannot be opened at all.
  explicit TuningCache(std::filesystem::path path);
  ~TuningCache();
  TuningCache(const TuningCache&) = delete;
  TuningCache& operator=(const TuningCache&) = delete;

  // $YIRAGE_CACHE_DIR/tuning.sqlite, else $XDG_CACHE_HOME/yirage/tuning.sqlite, else
  // ~/.cache/yirage/tuning.sqlite.
  static std::filesystem::path default_path();
  const std::filesystem::path& path() const { return path_; }

  // The entry stored under exactly this key (fingerprint included), with its candidates.
  std::optional<CacheEntry> lookup(const CacheKey& key);
  // Replaces the entry for entry.key, atomically with its candidates.
  void store(const CacheEntry& entry);
  // Every entry, newest first, without candidate graphs.
  std::vector<CacheEntry> list();
  // The entry whose id starts with `prefix`; throws when several match.
  std::optional<CacheEntry> find(std::string_view prefix);
  // Removes every entry (or the one with this id); returns how many went. Calibrations stay.
  int clear(std::optional<std::string> id = std::nullopt);

  // Replaces the calibration of (c.backend, c.fingerprint); sets c.created when empty.
  void store_calibration(const Calibration& c);
  std::optional<Calibration> lookup_calibration(std::string_view backend,
                                                std::string_view fingerprint);
  // Removes the calibration of this device; returns whether there was one.
  bool clear_calibration(std::string_view backend, std::string_view fingerprint);

  struct Db;  // the SQLite connection, opaque outside cache.cpp

 private:
  // Moves a damaged file aside (when it is still the file with this inode), warns, and opens an
  // empty cache in its place.
  void recover(const std::string& why, uint64_t inode);
  // Runs a database operation; when SQLite finds the file damaged, recovers and runs it again on
  // the empty cache.
  template <typename F>
  auto guarded(F&& operation);

  std::filesystem::path path_;
  Db* db_ = nullptr;
};

// ==== calibration ================================================================================

struct CalibrateOptions {
  // One line per measurement, as it is made ("bandwidth l2 (1.0 MiB working set): 80.1 GB/s").
  std::function<void(const std::string&)> progress;
  double seconds_per_measurement = 0.1;  // the profiler's min_seconds for each graph
  int64_t max_dram_bytes = int64_t(1) << 30;
  int64_t max_matmul_dim = 2048;      // the largest square matmul timed per dtype
  double long_enough_seconds = 5e-3;  // a matmul this slow ends its dtype's doubling
};

// Measures the cost model's rates on `backend`'s device through the Backend interface: launch
// overhead (a 16-element kernel), bandwidth per memory level (a stream y = -x whose input and
// output take half of each cache level the capabilities state, l1d_bytes, l2_bytes, l3_bytes, and
// for DRAM four times the largest, at least 64 MiB), peak FLOP rate per dtype (generated square
// matmuls in f32, f16 and bf16, where the backend compiles them). Bandwidths and FLOP rates are
// net of the measured launch. Parallel units come from the capabilities. Does not store: see
// TuningCache::store_calibration.
Calibration calibrate(backend::Backend& backend, const CalibrateOptions& options = {});

// The calibrated rates of `backend`'s device in the cache (default path when empty), if any;
// nullopt, without creating it, where the cache file does not exist.
std::optional<cost::Device> calibrated_rates(const backend::Backend& backend,
                                             const std::filesystem::path& cache_path = {});

// ==== the pipeline ===============================================================================

struct Candidate {
  std::string label;
  ir::KernelGraph graph;
  // The proof that it computes what the graph computes, where its source has one (the search
  // does); optimize() proves a winner that comes without one before returning it.
  std::optional<verify::EquivalenceResult> proof;
};

// Where candidates come from; the default asks search::superoptimize with OptimizeOptions::search.
using CandidateSource = std::function<std::vector<Candidate>(const ir::KernelGraph& graph,
                                                             const backend::DeviceDescription&)>;

enum class TuneStage { search, compile, check, profile };
// "searching", "compiling", "checking", "profiling"
std::string_view stage_name(TuneStage stage);

struct OptimizeOptions {
  std::filesystem::path cache_path;  // empty: TuningCache::default_path()
  bool read_cache = true;            // false: search and profile even when an entry exists
  CandidateSource candidates;        // empty: the search, with `search`
  // The search's options when it is the source; its fingerprint options also prove the winners
  // that come without a proof (cache hits, other sources). Where search.rates is empty, the
  // search ranks by the device's calibration in the cache when there is one
  // (TuningCache::lookup_calibration), else by the capabilities' rough rates.
  search::SearchOptions search = [] {
    search::SearchOptions s;
    s.budget_seconds = 30;
    return s;
  }();
  // Top-k tuning: the cost model's best-ranked `max_candidates` search candidates are compiled and
  // profiled, with the unfused graph (always) and each one's library variant, if any; the rest
  // of the ranking is recorded as "not_profiled". The search ranks at most 7 (the input graph
  // among them), so profile_all = true, or a large max_candidates, measures every one.
  int max_candidates = 2;
  bool profile_all = false;
  // Whether each candidate also runs with its matmuls as library calls where the backend offers
  // them; false measures generated kernels only.
  bool library_variants = true;
  // Whether each candidate with quant_matmuls also runs with their decode prefetch off
  // (ir::QuantMatmulOp::prefetch) where the backend honours it, labelled "<label> + no prefetch".
  bool prefetch_variants = true;
  ProfileOptions profile;
  // Check and profile each candidate in a worker process (worker_command()), so that one that
  // crashes or hangs costs that candidate only; false, or no worker registered, runs them in this
  // process (the log says so).
  bool isolate = true;
  // A worker that spends longer than this on one candidate's check, or on its profile, is killed
  // and the candidate recorded as timed out.
  double candidate_seconds_limit = 60;
  // Progress lines ("cache hit ...", "compiled 3 candidates in 2.1 s", ...); may be empty.
  std::function<void(const std::string&)> log;
  // Called as each stage of a tuning run starts, with the number of candidates it works on (0
  // for the search, which has not found them yet), so that a caller can show where a long run
  // is; not called on a cache hit. May be empty.
  std::function<void(TuneStage stage, int candidates)> progress;
};

struct OptimizeResult {
  bool cache_hit = false;
  ir::KernelGraph chosen;  // with the original graph's inputs, in its input order
  CacheEntry entry;
  // Why `chosen` computes what the graph computes: the search's proof of it, or one made here
  // (a cache hit is proved again rather than trusted from the file). The unfused graph is
  // equivalent by construction, with a bound of 0.
  verify::EquivalenceResult proof;
  // What the search found, when it ran (not on a cache hit, nor with another candidate source).
  std::optional<search::SearchResult> search;
  double search_seconds = 0;  // the candidate source's wall time; 0 on a cache hit
};

// search -> compile -> check -> profile -> select -> cache, or a cache hit; either way the
// winner is proved equivalent to `graph` (a cached winner that fails its proof is tuned again,
// with a warning in the log). Throws yirage::Error when no candidate compiles and runs (the
// messages of each are in the error).
OptimizeResult optimize(const ir::KernelGraph& graph, backend::Backend& backend,
                        const OptimizeOptions& options = {});

// The cached winner for `graph` on `backend`'s device, bound to `graph`'s inputs in its order and
// proved equivalent to it as optimize() proves cache hits; nullopt when the cache has no entry
// for it. Throws yirage::Error when the entry's winner fails its proof.
std::optional<ir::KernelGraph> cached_winner(const ir::KernelGraph& graph,
                                             const backend::Backend& backend,
                                             const std::filesystem::path& cache_path = {});

// ==== choosing the backend by measurement ========================================================

// One backend's part in optimize_on_fastest_backend: its tuning result, or why it has none.
struct BackendTuning {
  std::string backend;
  std::optional<OptimizeResult> result;
  std::string error;  // the one-line reason when tuning failed on this backend
  // Seconds a call spends copying the graph's inputs onto this backend's device and its outputs
  // back, measured on this machine (median of a few copies): 0 where the backend's buffers are
  // host memory, which its modules read in place, or where the caller's data already lives on
  // the device (DataPlacement::device).
  double transfer_seconds = 0;
  // What "auto" compares: the winner's measured time plus the transfers; requires `result`.
  double call_seconds() const { return result.value().entry.chosen_seconds + transfer_seconds; }
};

struct FastestBackendResult {
  std::vector<BackendTuning> backends;  // every available tunable backend, in registry order
  size_t chosen = 0;                    // index into backends: the one with the fastest call
  const BackendTuning& winner() const { return backends.at(chosen); }
};

// Where the caller's inputs live and its outputs are wanted: on the host (numpy arrays, a CLI
// call), so that a device backend pays a copy each way per call, or already on the device.
enum class DataPlacement { host, device };

// What backend "auto" means: optimize() on every available backend whose device is tunable (each
// searched under its own device's description and cached under its own fingerprint, so a later
// call is a cache hit per device), then the backend whose call is fastest: its winner's measured
// time plus, where `data` lives on the host and the backend's buffers do not, the measured time
// of copying the inputs in and the outputs out. A backend on which optimize() throws is kept with
// its error and not chosen. Throws yirage::Error when no backend is available and tunable, or
// when every one failed (with each one's reason).
FastestBackendResult optimize_on_fastest_backend(const ir::KernelGraph& graph,
                                                 const OptimizeOptions& options = {},
                                                 DataPlacement data = DataPlacement::host);

// Seconds to copy `graph`'s inputs from the host onto `backend` and its outputs back, the median
// of a few timed copies after one untimed; 0 where the backend's buffers are host memory.
double host_transfer_seconds(backend::Backend& backend, const ir::KernelGraph& graph);

// ==== candidate isolation ========================================================================

// The argument that makes an executable a tuning worker: `<exe> --yirage-tune-worker <request>`.
inline constexpr std::string_view kWorkerFlag = "--yirage-tune-worker";

// For main() of an executable that tunes (the yirage command, a test binary with backends of its
// own): with kWorkerFlag, serves the request and returns the exit code main should return;
// otherwise registers this executable as the worker (set_worker_command) and returns nullopt.
// A worker is the caller's own binary so that it knows every backend the caller registered.
std::optional<int> serve_as_worker_if_asked(int argc, char** argv);
// The command optimize() starts workers with, the request's path appended; empty: none
// registered, and candidates run in the caller's process.
void set_worker_command(std::vector<std::string> argv);
std::vector<std::string> worker_command();

}  // namespace yirage::tune
