// `yirage cache list|show|clear`: the tuning cache; and the profiled `yirage optimize` path that
// fills it (tune::optimize), which cmd_optimize.cpp hands over to for backends that can run and
// are worth tuning (DeviceDescription::tunable).
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"
#include "tools/commands.h"
#include "tune/tune.h"

namespace yirage::tools {
namespace {

namespace fs = std::filesystem;

fs::path cache_path(const std::string& option) {
  return option.empty() ? tune::TuningCache::default_path() : fs::path(option);
}

std::string format_seconds(double s) {
  return s < 0 ? std::string("-") : fmt::format("{:.3f} ms", s * 1e3);
}

void list(const std::string& path) {
  tune::TuningCache cache(cache_path(path));
  std::vector<tune::CacheEntry> entries = cache.list();
  fmt::print("tuning cache: {} ({} entr{})\n", cache.path().string(), entries.size(),
             entries.size() == 1 ? "y" : "ies");
  if (entries.empty()) return;
  fmt::print("{:<12}  {:<9}  {:<16}  {:<16}  {:>12}  {:<20}  {}\n", "id", "backend", "device",
             "graph", "time", "created", "chosen");
  for (const tune::CacheEntry& e : entries) {
    const std::string chosen = e.has_winner() ? e.winner().label : "?";
    fmt::print("{:<12}  {:<9}  {:<16}  {:<16}  {:>12}  {:<20}  {}\n", e.key.id().substr(0, 12),
               e.key.backend, e.key.fingerprint, e.key.graph_hash, format_seconds(e.chosen_seconds),
               e.created, chosen);
  }
}

void show(const std::string& path, const std::string& id) {
  tune::TuningCache cache(cache_path(path));
  std::optional<tune::CacheEntry> e = cache.find(id);
  if (!e) fail("cache show: no entry with id '{}' in {}", id, cache.path().string());
  fmt::print("id:          {}\n", e->key.id());
  fmt::print("graph hash:  {}\n", e->key.graph_hash);
  fmt::print("signature:   {}\n", e->key.signature);
  fmt::print("backend:     {}\n", e->key.backend);
  fmt::print("device:      {} (fingerprint {})\n", e->device_name, e->key.fingerprint);
  fmt::print("engine:      {}\n", e->key.engine_version);
  fmt::print("codegen:     {}\n", e->key.codegen.empty() ? "-" : e->key.codegen);
  fmt::print("created:     {}\n", e->created);
  fmt::print("candidates:\n");
  for (size_t i = 0; i < e->candidates.size(); ++i) {
    const tune::CandidateRecord& c = e->candidates[i];
    fmt::print("  {} {:<50} {:<14} {:>12}{}\n", int(i) == e->chosen ? '*' : ' ', c.label, c.status,
               format_seconds(c.seconds), c.message.empty() ? "" : "  " + c.message);
  }
}

void clear(const std::string& path, const std::string& id) {
  tune::TuningCache cache(cache_path(path));
  std::optional<std::string> full;
  if (!id.empty()) {
    std::optional<tune::CacheEntry> e = cache.find(id);
    if (!e) fail("cache clear: no entry with id '{}' in {}", id, cache.path().string());
    full = e->key.id();
  }
  const int removed = cache.clear(full);
  fmt::print("removed {} entr{} from {}\n", removed, removed == 1 ? "y" : "ies",
             cache.path().string());
}

}  // namespace

void add_cache_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("cache", "List, show or clear the tuning cache");
  command->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto id = std::make_shared<std::string>();
  const std::string help =
      "Tuning database (default $YIRAGE_CACHE_DIR/tuning.sqlite, else the XDG cache dir)";
  CLI::App* list_cmd = command->add_subcommand("list", "One line per cached graph");
  list_cmd->add_option("--cache", *path, help);
  list_cmd->callback([path] { list(*path); });
  CLI::App* show_cmd = command->add_subcommand("show", "An entry with every candidate's time");
  show_cmd->add_option("id", *id, "Entry id or a unique prefix of it")->required();
  show_cmd->add_option("--cache", *path, help);
  show_cmd->callback([path, id] { show(*path, *id); });
  CLI::App* clear_cmd = command->add_subcommand("clear", "Remove every entry, or one");
  clear_cmd->add_option("--id", *id, "Remove only this entry (id or unique prefix)");
  clear_cmd->add_option("--cache", *path, help);
  clear_cmd->callback([path, id] { clear(*path, *id); });
}

void tuned_optimize(const TunedOptimizeOptions& o) {
  const ir::KernelGraph graph = ir::load_kernel_graph(o.file);
  tune::OptimizeOptions options;
  options.cache_path = cache_path(o.cache);
  options.read_cache = !o.force;
  options.search = o.search;
  options.profile.seed = o.profile_seed;
  if (o.top_k) options.max_candidates = *o.top_k;
  options.profile_all = o.profile_all;
  std::vector<std::string> lines;
  options.log = [&](const std::string& line) {
    if (o.json)
      lines.push_back(line);
    else
      fmt::print("{}\n", line);
  };
  tune::OptimizeResult r;
  nlohmann::json backends = nlohmann::json::array();
  if (o.backend == "auto") {
    // Every tunable backend tunes it; the log lines name each one's best and the choice.
    tune::FastestBackendResult fastest = tune::optimize_on_fastest_backend(graph, options);
    for (const tune::BackendTuning& b : fastest.backends)
      backends.push_back(b.result ? nlohmann::json{{"backend", b.backend},
                                                   {"fingerprint", b.result->entry.key.fingerprint},
                                                   {"chosen", b.result->entry.winner().label},
                                                   {"seconds", b.result->entry.chosen_seconds},
                                                   {"transfer_seconds", b.transfer_seconds},
                                                   {"cache_hit", b.result->cache_hit}}
                                  : nlohmann::json{{"backend", b.backend}, {"error", b.error}});
    r = std::move(*fastest.backends[fastest.chosen].result);
    if (!o.json)
      fmt::print("backend: {}\n", describe_backend(backend::get_backend(r.entry.key.backend)));
  } else {
    backend::Backend& backend = select_backend(o.backend);
    if (!o.json) fmt::print("backend: {}\n", describe_backend(backend));
    r = tune::optimize(graph, backend, options);
  }
  const bool proved = r.proof.equivalent && r.proof.bound_met;
  const tune::CandidateRecord& chosen = r.entry.winner();
  if (!o.out.empty()) {
    ir::save_kernel_graph(r.chosen, o.out);
    if (!o.json) fmt::print("wrote {}\n", o.out);
  }
  if (o.json) {
    nlohmann::json candidates = nlohmann::json::array();
    for (const tune::CandidateRecord& c : r.entry.candidates)
      candidates.push_back({{"label", c.label},
                            {"status", c.status},
                            {"seconds", c.seconds},
                            {"message", c.message}});
    nlohmann::json j = {
        {"cache_hit", r.cache_hit},
        {"entry", r.entry.key.id()},
        {"backend", r.entry.key.backend},
        {"fingerprint", r.entry.key.fingerprint},
        {"chosen", chosen.label},
        {"chosen_seconds", r.entry.chosen_seconds},
        {"candidates", candidates},
        {"log", lines},
        {"verified", proved},
        {"proof", r.proof.summary()},
        {"false_accept_bound", r.proof.false_accept_bound},
        {"search_seconds", r.search_seconds},
        {"notes", r.search ? r.search->notes : std::vector<std::string>{}},
        {"ranked", r.search ? ranked_json(*r.search, graph, false) : nlohmann::json::array()},
        {"mugraph", ir::to_json(r.chosen)}};
    if (o.backend == "auto") j["backends"] = backends;
    fmt::print("{}\n", j.dump());
    return;
  }
  if (o.verbose && r.search) print_predictions(*r.search, graph);
  fmt::print("{}: {} ({})\n", r.cache_hit ? "cached winner" : "winner", chosen.label,
             format_seconds(r.entry.chosen_seconds));
  fmt::print("proof: {}\n", r.proof.summary());
}

std::optional<ir::KernelGraph> cached_winner_for(const ir::KernelGraph& graph,
                                                 backend::Backend& backend) {
  const fs::path path = tune::TuningCache::default_path();
  if (!backend.device().tunable || !fs::exists(path)) return std::nullopt;
  return tune::cached_winner(graph, backend, path);
}

}  // namespace yirage::tools
