// The pipeline: cache lookup, then search -> compile -> check -> profile -> select -> store.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "search/search.h"
#include "support/error.h"
#include "support/source_hash.h"
#include "support/version.h"
#include "support/warn.h"
#include "tune/evaluate.h"
#include "tune/tune.h"
#include "tune/tuning_lock.h"
#include "tune/worker.h"

namespace yirage::tune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string signature_of(const ir::KernelGraph& graph) {
  std::vector<std::string> parts;
  for (ir::TensorRef in : ir::canonical_input_order(graph))
    parts.push_back(ir::format_type(graph.type(in)));
  std::vector<std::string> outs;
  for (const ir::GraphOutput& o : graph.outputs())
    outs.push_back(ir::format_type(graph.type(o.tensor)));
  return fmt::format("({}) -> ({})", fmt::join(parts, ", "), fmt::join(outs, ", "));
}

std::vector<Candidate> candidates_of(const search::SearchResult& result) {
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    const search::Candidate& c = result.ranked[i];
    candidates.push_back({fmt::format("search #{} ({}, {} kernel{}, estimated {:.3g} s)", i, c.form,
                                      c.kernels, c.kernels == 1 ? "" : "s", c.estimated_seconds),
                          c.mugraph, c.proof});
  }
  return candidates;
}

// The unfused graph computes what it computes: no trial is needed and nothing can be wrong.
verify::EquivalenceResult proof_by_identity() {
  verify::EquivalenceResult proof;
  proof.equivalent = proof.bound_met = true;
  proof.per_trial_bound = proof.false_accept_bound = 0;
  proof.assumptions = {
      "nothing: the winner is the graph itself, unfused, up to schedule choices (library "
      "matmuls, quant_matmul prefetch) that do not change what it computes"};
  return proof;
}

// Schedule choices aside (a variant with prefetch off or a library matmul computes the same
// function, and reproving it as a different graph took 12 s at SmolLM2's LM head on every cache
// hit).
bool is_the_graph_itself(const ir::KernelGraph& candidate, const ir::KernelGraph& graph) {
  return candidate.nodes().size() == graph.nodes().size() &&
         ir::structural_hash(ir::without_schedule_choices(candidate)) ==
             ir::structural_hash(ir::without_schedule_choices(graph));
}

// A proof for a candidate that came without one: by identity when it is the graph itself, else
// by the fingerprint check with the search's options.
verify::EquivalenceResult prove(const ir::KernelGraph& graph, const ir::KernelGraph& candidate,
                                const verify::FingerprintOptions& options) {
  if (is_the_graph_itself(candidate, graph)) return proof_by_identity();
  // By parts: a cached µGraph around an LLM block's quant_matmuls is proved in seconds where the
  // whole-graph fingerprint takes minutes (verify/by_parts.cpp).
  return verify::check_equivalent_by_parts(graph, candidate, options);
}

bool proved(const verify::EquivalenceResult& proof) {
  return proof.equivalent && proof.bound_met;
}

// Rebuilds `g` so that its inputs come in `order` (indices into g.inputs()).
ir::KernelGraph reorder_inputs(const ir::KernelGraph& g, const std::vector<size_t>& order) {
  const std::vector<ir::TensorRef> inputs = g.inputs();
  ir::KernelGraph out;
  std::map<int32_t, int32_t> node_map;
  for (size_t i : order) {
    const ir::Node& n = g.node(inputs[i].node);
    node_map[inputs[i].node] = out.input(n.name, n.outputs[0].dims, n.outputs[0].dtype).node;
  }
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const ir::Node& n = g.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(n.op)) continue;
    std::vector<ir::TensorRef> operands;
    for (ir::TensorRef t : n.inputs) operands.push_back({node_map.at(t.node), t.port});
    node_map[int32_t(id)] = out.add_node(n.op, operands, n.name).at(0).node;
  }
  for (const ir::GraphOutput& o : g.outputs())
    out.mark_output({node_map.at(o.tensor.node), o.tensor.port}, o.name);
  return out;
}

// The winner stored for `original`, with inputs in `graph`'s order: both have the same structural
// hash, so their inputs correspond by canonical position; the winner keeps the original's input
// names.
ir::KernelGraph bind_to(const ir::KernelGraph& graph, const ir::KernelGraph& original,
                        const ir::KernelGraph& winner) {
  const std::vector<ir::TensorRef> g_canon = ir::canonical_input_order(graph);
  const std::vector<ir::TensorRef> o_canon = ir::canonical_input_order(original);
  std::map<std::string, size_t> winner_index;
  const std::vector<ir::TensorRef> w_inputs = winner.inputs();
  for (size_t i = 0; i < w_inputs.size(); ++i) winner_index[winner.node(w_inputs[i].node).name] = i;
  std::map<int32_t, size_t> canon_of_g;
  for (size_t c = 0; c < g_canon.size(); ++c) canon_of_g[g_canon[c].node] = c;
  std::vector<size_t> order;
  bool identity = true;
  for (ir::TensorRef in : graph.inputs()) {
    const size_t c = canon_of_g.at(in.node);
    const std::string& name = original.node(o_canon.at(c).node).name;
    auto it = winner_index.find(name);
    if (it == winner_index.end())
      fail("tuning cache: the cached µGraph has no input '{}'; clear the entry", name);
    identity = identity && it->second == order.size();
    order.push_back(it->second);
  }
  return identity ? winner : reorder_inputs(winner, order);
}

// The library leaf the backend offers for kernel-level matmuls (capabilities "library_matmul",
// backend.h): its name and dtypes; nullopt when it offers none.
struct LibraryOffer {
  std::string name;
  std::set<ir::DType> dtypes;
};

std::optional<LibraryOffer> library_offer(const backend::DeviceDescription& device) {
  const nlohmann::json& lib = device.capabilities.value("library_matmul", nlohmann::json());
  if (!lib.is_object() || !lib.contains("name") || !lib["name"].is_string()) return std::nullopt;
  LibraryOffer offer{lib["name"].get<std::string>(), {}};
  for (const nlohmann::json& d : lib.value("dtypes", nlohmann::json::array()))
    if (std::optional<ir::DType> dtype =
            d.is_string() ? ir::parse_dtype(d.get<std::string>()) : std::nullopt)
      offer.dtypes.insert(*dtype);
  if (offer.dtypes.empty()) return std::nullopt;
  return offer;
}

// After the candidates, a variant of each that `variant_of` gives (nullopt: none), labelled
// "<label> + <suffix>". A variant runs the same operations in the same order, so the base
// candidate's proof holds for it.
void add_variants(
    std::vector<Candidate>& candidates, std::string_view suffix,
    const std::function<std::optional<ir::KernelGraph>(const ir::KernelGraph&)>& variant_of) {
  const size_t base = candidates.size();
  for (size_t i = 0; i < base; ++i)
    if (std::optional<ir::KernelGraph> v = variant_of(candidates[i].graph))
      candidates.push_back(
          {fmt::format("{} + {}", candidates[i].label, suffix), *v, candidates[i].proof});
}

// Where the backend offers a library matmul, a variant of each candidate with each kernel-level
// matmul whose operands and result have an offered dtype as a library call, labelled
// "<label> + <library>": the tuner measures library leaves against generated GEMMs instead of
// guessing which wins at these shapes on this machine. Fused kernels keep their generated
// matmuls.
void add_library_variants(std::vector<Candidate>& candidates,
                          const backend::DeviceDescription& device) {
  const std::optional<LibraryOffer> offer = library_offer(device);
  if (!offer) return;
  add_variants(candidates, offer->name, [&](const ir::KernelGraph& g) {
    return ir::with_ops_rewritten(g, [&](const ir::Node& n, ir::Op& op) {
      auto* m = std::get_if<ir::MatmulOp>(&op);
      if (!m || m->library) return false;
      bool offered = offer->dtypes.contains(n.outputs[0].dtype);
      for (ir::TensorRef t : n.inputs) offered = offered && offer->dtypes.contains(g.type(t).dtype);
      m->library = offered;
      return offered;
    });
  });
}

// Where the backend honours the choice, a variant of each candidate with its quant_matmuls'
// decode prefetch off, labelled "<label> + no prefetch": whether asking for the next weight tile
// early helps depends on the host's core and memory (ops.h), so it is measured.
void add_prefetch_variants(std::vector<Candidate>& candidates,
                           const backend::DeviceDescription& device) {
  const nlohmann::json& caps = device.capabilities;
  if (!caps.is_object() || caps.value("quant_matmul_prefetch", false) != true) return;
  add_variants(candidates, "no prefetch", [](const ir::KernelGraph& g) {
    return ir::with_ops_rewritten(g, [](const ir::Node&, ir::Op& op) {
      auto* q = std::get_if<ir::QuantMatmulOp>(&op);
      if (!q || !q->prefetch) return false;
      q->prefetch = false;
      return true;
    });
  });
}

// The entry's winner bound to `graph`; nullopt, with a warning, when the entry cannot be read
// (no chosen candidate, JSON that does not parse or does not fit the graph): such an entry is
// never trusted, and tuning again replaces it.
std::optional<ir::KernelGraph> readable_winner(const ir::KernelGraph& graph,
                                               const CacheEntry& entry,
                                               const std::filesystem::path& cache_path) {
  try {
    if (!entry.has_winner())
      fail("its chosen candidate {} is not among its {}", entry.chosen, entry.candidates.size());
    return bind_to(graph, ir::parse_kernel_graph(entry.original_json),
                   ir::parse_kernel_graph(entry.winner().graph_json));
  } catch (const std::exception& e) {
    warn(fmt::format("tuning cache {}: entry {} is unreadable ({}); tuning again",
                     cache_path.string(), entry.key.id().substr(0, 12), e.what()));
    return std::nullopt;
  }
}

// Whether the cached winner compiles on `backend`, tried once here so that a winner whose
// kernels no longer build or load (a cached object deleted or damaged, a compiler gone) is tuned
// again, with a warning, rather than handed to the caller to fail on. On backends with an object
// cache this is a load of the cached binary.
bool loads_here(backend::Backend& backend, const ir::KernelGraph& winner, const CacheEntry& entry,
                const std::filesystem::path& cache_path) {
  try {
    backend.compile(winner);
    return true;
  } catch (const std::exception& e) {
    warn(
        fmt::format("tuning cache {}: the winner of entry {} does not compile or load on '{}' "
                    "({}); tuning again",
                    cache_path.string(), entry.key.id().substr(0, 12), backend.name(), e.what()));
    return false;
  }
}

// Checks and profiles the compiled candidates: in worker processes when isolation is on and a
// worker is registered, else in this process (said in the log), where a crash is the caller's.
// `on_profiling` is called with the number that passed the check as the profiles begin.
std::map<size_t, Evaluation> evaluate_candidates(
    backend::Backend& backend, const ir::KernelGraph& graph, const std::vector<Candidate>& ordered,
    const std::vector<std::unique_ptr<backend::Module>>& modules,
    const std::vector<size_t>& compiled, const OptimizeOptions& options,
    const std::function<void(const std::string&)>& log,
    const std::function<void(size_t)>& on_profiling) {
  const std::vector<std::string> command = worker_command();
  if (options.isolate && !command.empty())
    return evaluate_in_workers(command, backend, graph, ordered, compiled, options, on_profiling);
  if (options.isolate)
    log("candidates run in this process: no tuning worker is registered "
        "(tune::serve_as_worker_if_asked)");
  Evaluator evaluator(backend, graph, options.profile);
  std::map<size_t, Evaluation> evaluations;
  size_t passed = 0;
  for (size_t i : compiled) {
    evaluations[i] = evaluator.check(ordered[i].graph);
    passed += evaluations[i].status == "ok" ? 1 : 0;
  }
  on_profiling(passed);
  for (auto& [i, e] : evaluations)
    if (e.status == "ok") e.profile = evaluator.profile(ordered[i].graph, *modules[i]);
  return evaluations;
}

}  // namespace

std::string_view stage_name(TuneStage stage) {
  switch (stage) {
    case TuneStage::search: return "searching";
    case TuneStage::compile: return "compiling";
    case TuneStage::check: return "checking";
    case TuneStage::profile: return "profiling";
  }
  return "?";
}

CacheKey cache_key(const ir::KernelGraph& graph, const backend::Backend& backend) {
  return {ir::structural_hash_hex(graph),
          signature_of(graph),
          std::string(backend.name()),
          backend.device().fingerprint,
          fmt::format("{}+{}", kVersion, kSourceHash),
          backend.codegen_settings()};
}

std::optional<ir::KernelGraph> cached_winner(const ir::KernelGraph& graph,
                                             const backend::Backend& backend,
                                             const std::filesystem::path& cache_path) {
  TuningCache cache(cache_path.empty() ? TuningCache::default_path() : cache_path);
  std::optional<CacheEntry> entry = cache.lookup(cache_key(graph, backend));
  if (!entry) return std::nullopt;
  std::optional<ir::KernelGraph> winner = readable_winner(graph, *entry, cache.path());
  if (!winner) return std::nullopt;
  if (const verify::EquivalenceResult proof =
          prove(graph, *winner, search::SearchOptions{}.fingerprint);
      !proved(proof))
    fail(
        "tuning cache {}: the winner {} of entry {} does not provably compute what the graph "
        "computes ({}); tune the graph again to replace it",
        cache.path().string(), entry->winner().label, entry->key.id().substr(0, 12),
        proof.summary());
  return winner;
}

namespace {

// The cache's entry for `key` as a result, when it holds one whose winner loads here and proves
// again: proved rather than trusted, since any process may have written the file.
std::optional<OptimizeResult> cached_result(const ir::KernelGraph& graph, backend::Backend& backend,
                                            TuningCache& cache, const CacheKey& key,
                                            const OptimizeOptions& options,
                                            const std::function<void(const std::string&)>& log) {
  std::optional<CacheEntry> entry = cache.lookup(key);
  std::optional<ir::KernelGraph> winner =
      entry ? readable_winner(graph, *entry, cache.path()) : std::nullopt;
  if (!winner) return std::nullopt;
  const auto proof_start = Clock::now();
  verify::EquivalenceResult proof = prove(graph, *winner, options.search.fingerprint);
  const double proof_seconds = seconds_since(proof_start);
  if (!proved(proof)) {
    log(fmt::format(
        "warning: cache entry {} in {}: its winner {} fails its proof ({}); tuning again to "
        "replace it",
        key.id().substr(0, 12), cache.path().string(), entry->winner().label, proof.summary()));
    return std::nullopt;
  }
  if (!loads_here(backend, *winner, *entry, cache.path())) return std::nullopt;
  log(fmt::format(
      "cache hit: entry {} in {} ({}, {:.3f} ms), proved again in {:.2f} s; search and profiling "
      "skipped",
      key.id().substr(0, 12), cache.path().string(), entry->winner().label,
      entry->chosen_seconds * 1e3, proof_seconds));
  OptimizeResult result;
  result.cache_hit = true;
  result.chosen = std::move(*winner);
  result.proof = std::move(proof);
  result.entry = std::move(*entry);
  return result;
}

}  // namespace

OptimizeResult optimize(const ir::KernelGraph& graph, backend::Backend& backend,
                        const OptimizeOptions& options) {
  const std::function<void(const std::string&)> log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  auto progress = [&](TuneStage stage, size_t candidates) {
    if (options.progress) options.progress(stage, int(candidates));
  };
  TuningCache cache(options.cache_path.empty() ? TuningCache::default_path() : options.cache_path);
  const CacheKey key = cache_key(graph, backend);
  if (options.read_cache) {
    if (std::optional<OptimizeResult> hit = cached_result(graph, backend, cache, key, options, log))
      return std::move(*hit);
    log(fmt::format("cache miss: no entry {} for device {} in {}", key.id().substr(0, 12),
                    key.fingerprint, cache.path().string()));
  }
  const TuningLock tuning(
      cache.path(), key.id(),
      [&] {
        log(fmt::format("waiting for another process or thread tuning entry {} in {}",
                        key.id().substr(0, 12), cache.path().string()));
      },
      options.search.should_stop);
  if (tuning.waited() && options.read_cache) {
    if (std::optional<OptimizeResult> hit = cached_result(graph, backend, cache, key, options, log))
      return std::move(*hit);
  }
  OptimizeResult result;

  // 1. Candidates, the unfused graph first.
  const backend::DeviceDescription device = backend.device();
  auto start = Clock::now();
  progress(TuneStage::search, 0);
  std::vector<Candidate> candidates;
  if (options.candidates) {
    candidates = options.candidates(graph, device);
  } else {
    search::SearchOptions search_options = options.search;
    if (!search_options.rates) {
      if (std::optional<Calibration> c =
              cache.lookup_calibration(backend.name(), device.fingerprint)) {
        search_options.rates = c->rates;
        log(fmt::format("ranking by the calibration of {} made {}", device.fingerprint,
                        c->created));
      }
    }
    if (!search_options.reject_body)
      search_options.reject_body = [&backend](const ir::BlockGraph& body) {
        return backend.reject_body(body);
      };
    result.search = search::superoptimize(graph, device, search_options);
    candidates = candidates_of(*result.search);
    // Where a slow tuning spends its time, so that the next one knows what to bound.
    const search::SearchStats& st = result.search->stats;
    const auto by_parts =
        std::count_if(result.search->ranked.begin(), result.search->ranked.end(),
                      [](const search::Candidate& c) { return c.proof.parts > 0; });
    log(fmt::format(
        "search: {:.2f} s: enumeration {:.2f} s, {} proof{} {:.2f} s ({} candidate{} proved by "
        "parts), float checks {:.2f} s ({} reference run{})",
        st.seconds, st.enumerate_seconds, st.proofs, st.proofs == 1 ? "" : "s", st.prove_seconds,
        by_parts, by_parts == 1 ? "" : "s", st.float_check_seconds, st.reference_runs,
        st.reference_runs == 1 ? "" : "s"));
    for (size_t i = 0; i < result.search->ranked.size(); ++i)
      if (result.search->ranked[i].proof.parts > 0)
        log(fmt::format("  search #{}: proved over {} fused kernel region(s); {}", i,
                        result.search->ranked[i].proof.parts,
                        result.search->ranked[i].float_check.summary));
  }
  result.search_seconds = seconds_since(start);
  // Top-k: the unfused graph, then the model's best max_candidates (all with profile_all); the
  // others are recorded, not compiled.
  std::vector<Candidate> ordered{{"unfused", graph, proof_by_identity()}};
  std::vector<Candidate> skipped;
  for (Candidate& c : candidates) {
    if (is_the_graph_itself(c.graph, graph)) continue;  // the unfused graph again
    if (!options.profile_all && int(ordered.size()) > options.max_candidates)
      skipped.push_back(std::move(c));
    else
      ordered.push_back(std::move(c));
  }
  if (!skipped.empty())
    log(
        fmt::format("profiling the cost model's top {} of {} search candidates ({} not profiled; "
                    "--profile-all profiles every one)",
                    ordered.size() - 1, ordered.size() - 1 + skipped.size(), skipped.size()));
  // Every candidate is proved before it may win: the search's come with their proofs, others
  // (another candidate source) are proved here, and an unproved one is recorded, not compiled.
  for (Candidate& c : ordered)
    if (!c.proof) c.proof = prove(graph, c.graph, options.search.fingerprint);
  if (options.library_variants) add_library_variants(ordered, device);
  if (options.prefetch_variants) add_prefetch_variants(ordered, device);
  log(fmt::format("{} candidates in {:.2f} s", ordered.size(), seconds_since(start)));

  // 2. Compile them in parallel; each failure is recorded, never fatal.
  start = Clock::now();
  progress(TuneStage::compile,
           size_t(std::count_if(ordered.begin(), ordered.end(),
                                [](const Candidate& c) { return proved(*c.proof); })));
  std::vector<std::future<std::unique_ptr<backend::Module>>> compiles;
  for (const Candidate& c : ordered)
    compiles.push_back(std::async(std::launch::async, [&backend, &c] {
      return proved(*c.proof) ? backend.compile(c.graph) : nullptr;
    }));
  std::vector<std::unique_ptr<backend::Module>> modules;
  std::vector<CandidateRecord> records;
  for (size_t i = 0; i < ordered.size(); ++i) {
    CandidateRecord r{ordered[i].label, "ok", -1, {}, ir::to_json(ordered[i].graph).dump()};
    try {
      modules.push_back(compiles[i].get());
      if (!proved(*ordered[i].proof)) {
        r.status = "unproved";
        r.message = ordered[i].proof->summary();
      }
    } catch (const std::exception& e) {
      modules.push_back(nullptr);
      r.status = "compile_error";
      r.message = e.what();
    }
    records.push_back(std::move(r));
  }
  log(fmt::format("compiled {} candidates in {:.2f} s", ordered.size(), seconds_since(start)));

  // 3. Check each compiled candidate against the unfused graph and profile the survivors, in
  // worker processes where a crash or a hang costs one candidate only; 4. select the fastest.
  std::vector<size_t> compiled;
  for (size_t i = 0; i < ordered.size(); ++i)
    if (modules[i]) compiled.push_back(i);
  progress(TuneStage::check, compiled.size());
  const std::map<size_t, Evaluation> evaluations =
      evaluate_candidates(backend, graph, ordered, modules, compiled, options, log,
                          [&](size_t passed) { progress(TuneStage::profile, passed); });
  int best = -1;
  for (const auto& [i, e] : evaluations) {
    records[i].status = e.status;
    if (!e.message.empty()) records[i].message = e.message;
    if (!e.profile) continue;
    const Profile& p = *e.profile;
    records[i].seconds = p.median_seconds;
    log(fmt::format("  {:<50} {:10.3f} ms (median of {} samples of {} launch{}, {} input sets)",
                    records[i].label, p.median_seconds * 1e3, p.repetitions,
                    p.launches_per_repetition, p.launches_per_repetition == 1 ? "" : "es",
                    p.input_sets));
    if (best < 0 || p.median_seconds < records[size_t(best)].seconds) best = int(i);
  }
  for (const CandidateRecord& r : records)
    if (r.status == "crashed" || r.status == "timed_out")
      log(fmt::format("  {:<50} {}: {}", r.label, r.status, r.message));
  if (best < 0) {
    std::vector<std::string> why;
    for (const CandidateRecord& r : records)
      why.push_back(fmt::format("{}: {}", r.label, r.message));
    fail("optimize: no candidate compiled and ran on backend '{}': {}", backend.name(),
         fmt::join(why, "; "));
  }

  // 6. Store.
  CacheEntry entry;
  entry.key = key;
  entry.device_name = device.name;
  entry.original_json = ir::to_json(graph).dump();
  entry.chosen = best;
  entry.chosen_seconds = records[size_t(best)].seconds;
  entry.candidates = std::move(records);
  for (const Candidate& c : skipped)
    entry.candidates.push_back({c.label, "not_profiled", -1,
                                "ranked below the top-k by the cost model (max_candidates)",
                                ir::to_json(c.graph).dump()});
  cache.store(entry);
  log(fmt::format("chose {} ({:.3f} ms); stored as entry {} in {}",
                  entry.candidates[size_t(best)].label, entry.chosen_seconds * 1e3,
                  key.id().substr(0, 12), cache.path().string()));
  result.chosen = ordered[size_t(best)].graph;
  result.proof = *ordered[size_t(best)].proof;
  result.entry = std::move(entry);
  return result;
}

}  // namespace yirage::tune
