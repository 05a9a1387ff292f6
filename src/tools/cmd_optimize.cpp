// `yirage optimize`: searches a kernel graph for fused µGraphs, proves them, prints the best.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "search/search.h"
#include "support/error.h"
#include "tools/commands.h"
#include "tune/tune.h"

namespace yirage::tools {
namespace {

struct OptimizeOptions {
  std::string file;
  std::string backend = "auto";
  double budget = 60;
  uint64_t max_states = 0;
  uint64_t max_memory_mib = 0;
  uint64_t seed = 0;
  int threads = 0;
  search::Pruner pruner = search::SearchOptions{}.pruner;
  std::string checkpoint;
  std::string out;
  bool json = false;
  bool verbose = false;
  int top_k = tune::OptimizeOptions{}.max_candidates;
  bool profile_all = false;
  bool no_tune = false;  // search only, even on a backend that can run (cmd_cache.cpp tunes)
  bool force = false;
  std::string cache;
  std::string ray;  // a Ray cluster's address: tune there (cmd_optimize_ray.cpp)
};

// The description to search for. Only the description is needed, so a backend that cannot run
// here still works when it can describe its device; "auto" is the first available backend that
// describes a search space, else the first that does at all.
backend::BackendInfo pick_description(const std::string& name) {
  const std::vector<backend::BackendInfo> all = backend::describe_backends();
  auto has_space = [](const backend::BackendInfo& b) {
    return b.device.capabilities.is_object() && b.device.capabilities.contains("search");
  };
  if (name == "auto") {
    for (const auto& b : all)
      if (b.availability.available && has_space(b)) return b;
    for (const auto& b : all)
      if (has_space(b)) return b;
    fail("optimize: no backend describes a search space (capabilities.search)");
  }
  for (const auto& b : all)
    if (b.name == name) return b;
  std::vector<std::string> names;
  for (const auto& b : all) names.push_back(b.name);
  fail("optimize: unknown backend '{}'; known backends: {}", name, fmt::join(names, ", "));
}

// The first Ctrl-C during a search stops it at its next poll (SearchOptions::should_stop), and
// the best result proved so far is printed; the handler resets itself, so a second one ends the
// process as usual. A lock-free atomic is safe to set in a signal handler and to read from the
// search's threads.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);
void on_interrupt(int) {
  interrupted = true;
}

std::string ref_name(const ir::KernelGraph& g, ir::TensorRef t) {
  const ir::Node& n = g.node(t.node);
  return n.outputs.size() == 1 ? n.name : fmt::format("{}:{}", n.name, t.port);
}

std::string block_line(const ir::BlockGraph& body, size_t id) {
  const ir::BlockNode& node = body.nodes()[id];
  std::string detail =
      std::visit(ir::Overloaded{
                     [](const ir::InputIteratorOp& it) {
                       return fmt::format(" operand {} imap [{}] fmap {}", it.operand,
                                          fmt::join(it.imap, ", "), it.fmap);
                     },
                     [](const ir::OutputSaverOp& s) {
                       return fmt::format(" omap [{}]", fmt::join(s.omap, ", "));
                     },
                     [](const ir::AccumulatorOp& a) {
                       return a.eps != 0 ? fmt::format(" eps {}", a.eps) : std::string();
                     },
                     [](const auto&) { return std::string(); },
                 },
                 node.op);
  const char* phase = body.phase(int32_t(id)) == ir::BlockPhase::in_loop     ? "loop"
                      : body.phase(int32_t(id)) == ir::BlockPhase::post_loop ? "post"
                                                                             : "save";
  return fmt::format("      {:>2} {} {}({}){} : {}", id, phase, ir::block_op_label(node.op),
                     fmt::join(node.inputs, ", "), detail, ir::format_type(node.tile));
}

void print_mugraph(const ir::KernelGraph& g) {
  for (const ir::Node& node : g.nodes()) {
    std::vector<std::string> in;
    for (const ir::TensorRef& t : node.inputs) in.push_back(ref_name(g, t));
    std::vector<std::string> types;
    for (const ir::TensorType& t : node.outputs) types.push_back(ir::format_type(t));
    fmt::print("  {} = {}({}) : {}\n", node.name, ir::op_name(node.op), fmt::join(in, ", "),
               fmt::join(types, ", "));
    if (const auto* fused = std::get_if<ir::FusedOp>(&node.op)) {
      const ir::BlockGraph& body = *fused->body;
      fmt::print("    grid [{}], for-loop range {}\n", fmt::join(body.grid().extent, ", "),
                 body.forloop_range());
      for (size_t id = 0; id < body.nodes().size(); ++id) fmt::print("{}\n", block_line(body, id));
    }
  }
  for (const ir::GraphOutput& o : g.outputs())
    fmt::print("  output {} = {}\n", o.name, ref_name(g, o.tensor));
}

std::string pruner_line(const search::SearchStats& s) {
  const std::string cut = fmt::format("{} prefixes cut", s.expr_pruned);
  if (s.pruner == search::Pruner::normal_form)
    return fmt::format("normal_form, {}{}", cut,
                       search::z3_available() ? "" : " (this build has no Z3)");
  const search::Z3PrunerStats& z = s.z3;
  return fmt::format(
      "z3, {}: {} queries, {} from the cache; proved {}, refuted {}, unknown {} (kept); {:.2f} s "
      "in Z3; differs from the normal form on {} proved, {} refuted",
      cut, z.queries, z.cache_hits, z.proved, z.refuted, z.unknown, z.seconds, z.proved_but_cut,
      z.refuted_but_kept);
}

// --ray: the cluster searches and profiles, in a fresh cache of its task's own (so --force has
// nothing to skip there), and merges the winner into o.cache; the local tuned_optimize that
// follows reads it, without --force. --checkpoint names a file on this machine, which a worker
// cannot resume.
void optimize_on_ray(const OptimizeOptions& o, const std::string& backend,
                     const search::SearchOptions& search) {
  if (!o.checkpoint.empty())
    fail("optimize --ray: --checkpoint is a file on this machine; not with --ray");
  TunedOptimizeOptions request;
  request.file = o.file;
  request.backend = backend;
  request.cache = o.cache;
  request.search = search;
  request.top_k = o.top_k;
  request.profile_all = o.profile_all;
  tune_on_ray(o.ray, request);
}

// --ray where nothing is tuned here: there would be no cache entry to read.
[[noreturn]] void optimize_on_ray_refused(const OptimizeOptions& o, const std::string& backend) {
  if (o.no_tune) fail("optimize --ray: --no-tune searches here only; --ray tunes on the cluster");
  fail(
      "optimize --ray: backend '{}' cannot be tuned here; --ray needs a backend this machine "
      "runs and tunes, whose cache entry the cluster fills",
      backend);
}

void optimize(const OptimizeOptions& o) {
  const ir::KernelGraph graph = ir::load_kernel_graph(o.file);
  const backend::BackendInfo info = pick_description(o.backend);
  // A backend that runs here and is worth tuning (cpu, cuda): search, compile, profile, select
  // and cache (tune::optimize). Otherwise the search alone, on the device's description.
  search::SearchOptions options;
  options.budget_seconds = o.budget;
  options.max_states = o.max_states;
  options.max_memory_bytes = o.max_memory_mib << 20;
  options.seed = o.seed;
  options.threads = o.threads;
  options.pruner = o.pruner;
  options.checkpoint_path = o.checkpoint;
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty)
    options.progress = [](const search::SearchProgress& p) {
      fmt::print(stderr,
                 "\r{:.1f}s  {} states ({:.0f}/s)  {} pruned  {} candidates  {} verified   ",
                 p.seconds, p.states, p.states_per_second, p.pruned, p.candidates, p.verified);
      std::fflush(stderr);
    };
  options.should_stop = [] { return interrupted.load(); };
  // "auto" tunes on every backend that can be tuned here and keeps the fastest.
  const bool tune_auto = o.backend == "auto" && info.device.tunable && info.availability.available;
  if (info.device.tunable && info.availability.available && !o.no_tune) {
    if (tty) options.progress = nullptr;  // the tuner's log lines say where it is
    if (!o.ray.empty()) optimize_on_ray(o, tune_auto ? "auto" : info.name, options);
    tuned_optimize({.file = o.file,
                    .backend = tune_auto ? "auto" : info.name,
                    .cache = o.cache,
                    .out = o.out,
                    .search = options,
                    .profile_seed = o.seed,
                    .force = o.force && o.ray.empty(),  // --ray: read what the cluster merged
                    .json = o.json,
                    .verbose = o.verbose,
                    .top_k = o.top_k,
                    .profile_all = o.profile_all});
    return;
  }
  if (!o.ray.empty()) optimize_on_ray_refused(o, info.name);
  // The device's calibration, where the cache holds one, else the capabilities' rough rates.
  if (info.device.tunable) {
    try {
      options.rates = tune::calibrated_rates(backend::find_backend(info.name), o.cache);
    } catch (const std::exception&) {
      // An unreadable cache ranks by the rough rates.
    }
  }
  const backend::Backend& target = backend::find_backend(info.name);
  options.reject_body = [&target](const ir::BlockGraph& body) { return target.reject_body(body); };
  struct sigaction action = {}, previous = {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, &previous);
  const search::SearchResult r = search::superoptimize(graph, info.device, options);
  sigaction(SIGINT, &previous, nullptr);
  if (tty) fmt::print(stderr, "\n");
  const search::Candidate& best = r.ranked.front();
  const bool verified = best.proof.equivalent && best.proof.bound_met && r.float_check.passed;

  if (!o.out.empty()) {
    std::ofstream out(o.out);
    out << ir::to_json(best.mugraph).dump(2) << "\n";
    if (!out) fail("optimize: cannot write {}", o.out);
  }
  if (o.json) {
    nlohmann::json j = {
        {"verified", verified},
        {"kernels", best.kernels},
        {"input_kernels", search::count_kernels(graph)},
        {"estimated_seconds", best.estimated_seconds},
        {"predicted", cost::to_json(best.predicted)},
        {"cost_rates", cost::to_json(r.rates)},
        {"search_seconds", r.stats.seconds},
        {"states", r.stats.states},
        {"pruned", r.stats.pruned},
        {"candidates", r.stats.candidates},
        {"verified_candidates", r.stats.verified},
        {"budget_exhausted", r.stats.budget_exhausted},
        {"memory_bound_hit", r.stats.memory_bound_hit},
        {"memory_held_bytes", r.stats.memory_held_bytes},
        {"backend_rejected", r.stats.backend_rejected},
        {"pruner", search::pruner_name(r.stats.pruner)},
        {"pruned_by_expression", r.stats.expr_pruned},
        {"z3_available", search::z3_available()},
        {"cancelled", r.stats.cancelled},
        {"false_accept_bound", best.proof.false_accept_bound},
        {"proof", best.proof.summary()},
        {"float_check", r.float_check.summary},
        {"backend", info.name},
        {"backend_available", info.availability.available},
        {"device", info.device.name},
        {"notes", r.notes},
        {"ranked", ranked_json(r, graph, true)},
        {"mugraph", ir::to_json(best.mugraph)},
    };
    if (r.stats.pruner == search::Pruner::z3) {
      const search::Z3PrunerStats& z = r.stats.z3;
      j["z3"] = {{"queries", z.queries},
                 {"cache_hits", z.cache_hits},
                 {"proved", z.proved},
                 {"refuted", z.refuted},
                 {"unknown", z.unknown},
                 {"proved_but_cut", z.proved_but_cut},
                 {"refuted_but_kept", z.refuted_but_kept},
                 {"seconds", z.seconds}};
    }
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("graph: {} ({} kernels unfused)\n", o.file, search::count_kernels(graph));
  fmt::print("search space: backend {} ({}){}\n", info.name, info.device.name,
             info.availability.available
                 ? ""
                 : fmt::format("; not available here ({}), but its description is all the "
                               "search needs",
                               info.availability.reason));
  fmt::print("explored: {} states, {} pruned, {} candidates, {} verified, {:.2f} s{}\n",
             r.stats.states, r.stats.pruned, r.stats.candidates, r.stats.verified, r.stats.seconds,
             r.stats.budget_exhausted   ? " (budget exhausted)"
             : r.stats.memory_bound_hit ? " (memory bound reached)"
             : r.stats.cancelled        ? " (interrupted)"
                                        : "");
  fmt::print("pruner: {}\n", pruner_line(r.stats));
  for (const std::string& n : r.notes) fmt::print("note: {}\n", n);
  fmt::print("best: {} kernel{}, estimated {:.3g} s\n", best.kernels, best.kernels == 1 ? "" : "s",
             best.estimated_seconds);
  if (o.verbose) print_predictions(r, graph);
  fmt::print("proof: {}\n", best.proof.summary());
  fmt::print("false-accept bound: {:.3g}\n", best.proof.false_accept_bound);
  fmt::print("{}\n", r.float_check.summary);
  fmt::print("µGraph:\n");
  print_mugraph(best.mugraph);
  if (!o.out.empty()) fmt::print("wrote {}\n", o.out);
}

}  // namespace

nlohmann::json ranked_json(const search::SearchResult& result, const ir::KernelGraph& graph,
                           bool with_mugraphs) {
  const uint64_t input_hash = ir::structural_hash(graph);
  nlohmann::json ranked = nlohmann::json::array();
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    const search::Candidate& c = result.ranked[i];
    nlohmann::json j = {{"rank", i},
                        {"kernels", c.kernels},
                        {"input_graph", ir::structural_hash(c.mugraph) == input_hash &&
                                            c.mugraph.nodes().size() == graph.nodes().size()},
                        {"form", c.form},
                        {"estimated_seconds", c.estimated_seconds},
                        {"predicted", cost::to_json(c.predicted)}};
    if (with_mugraphs) j["mugraph"] = ir::to_json(c.mugraph);
    ranked.push_back(std::move(j));
  }
  return ranked;
}

void print_predictions(const search::SearchResult& result, const ir::KernelGraph& graph) {
  const nlohmann::json ranked = ranked_json(result, graph, false);
  fmt::print("predicted phases (cost model, {} rates), seconds:\n", result.rates.source);
  fmt::print("  {:>4} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "rank", "kernels",
             "launch", "ramp_up", "steady", "ramp_down", "collective", "overlap", "total");
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    const cost::Phases& p = result.ranked[i].predicted;
    fmt::print(
        "  {:>4} {:>7} {:>10.3g} {:>10.3g} {:>10.3g} {:>10.3g} {:>10.3g} {:>10.3g} {:>10.3g}{}\n",
        i, result.ranked[i].kernels, p.launch, p.ramp_up, p.steady, p.ramp_down, p.collective,
        p.overlap, p.total(),
        ranked[i]["input_graph"].get<bool>() ? "  (the unfused graph)"
                                             : "  (" + result.ranked[i].form + ")");
  }
}

void add_optimize_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("optimize", "Search a kernel graph for fused µGraphs and prove them");
  auto options = std::make_shared<OptimizeOptions>();
  command->add_option("file", options->file, "Kernel graph JSON file")->required();
  command
      ->add_option("--backend", options->backend,
                   "Backend to tune on (and whose device sets the search space), or auto: tune on "
                   "every available backend and keep the fastest")
      ->capture_default_str();
  command->add_option("--budget", options->budget, "Search budget in seconds")
      ->capture_default_str();
  command->add_option("--max-states", options->max_states, "Stop after N states (0: no limit)");
  command->add_option("--search-memory", options->max_memory_mib,
                      "Stop the enumeration once it holds this many MiB (0: a quarter of the "
                      "memory available)");
  command->add_option("--seed", options->seed, "Seed (same seed, same result)")
      ->capture_default_str();
  command->add_option("--threads", options->threads, "Search threads (0: all cores)");
  command
      ->add_option_function<std::string>(
          "--pruner",
          [options](const std::string& name) {
            options->pruner = name == "z3" ? search::Pruner::z3 : search::Pruner::normal_form;
          },
          "Abstract-expression pruning: normal_form, or z3 (builds with Z3 only)")
      ->check(CLI::IsMember({"normal_form", "z3"}))
      ->default_str(search::pruner_name(options->pruner));
  command->add_option("--checkpoint", options->checkpoint,
                      "Checkpoint file; resumes from it when it exists");
  command->add_option("--out", options->out, "Write the best µGraph as a kernel graph JSON file");
  command->add_flag("--json", options->json,
                    "Print one JSON object instead of text (with each search candidate's "
                    "predicted phases)");
  command->add_flag("--verbose", options->verbose,
                    "Print each search candidate's predicted phases (launch, ramp-up, steady "
                    "state, ramp-down, collective)");
  command->add_flag("--no-tune", options->no_tune,
                    "Search only: do not compile, profile or cache on a backend that can run");
  command->add_flag("--force", options->force, "Search and profile again despite a cache hit");
  command
      ->add_option("--top-k", options->top_k,
                   "Compile and profile the cost model's best K search candidates (with the "
                   "unfused graph and library variants)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  command->add_flag("--profile-all", options->profile_all,
                    "Compile and profile every search candidate, not only the top K");
  command->add_option("--cache", options->cache,
                      "Tuning database (default $YIRAGE_CACHE_DIR/tuning.sqlite, else the XDG "
                      "cache dir)");
  command->add_option("--ray", options->ray,
                      "Tune on the Ray cluster at this address (ray start's, e.g. 127.0.0.1:6379) "
                      "through the Python package (pip install \"yirage[ray]\"); the winner's "
                      "entry is merged into the tuning cache and reported as a cache hit");
  command->callback([options] { optimize(*options); });
}

}  // namespace yirage::tools
