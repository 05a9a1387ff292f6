// The search driver: partitions, block-level work items on threads, lazy verification, ranking.
//
// Work items are (fusion group, operand presentation, block configuration) triples in a fixed
// order; threads take them by index and store each result in its slot, so the merged result does
// not depend on which thread ran what. Partitions are then chosen best-first by estimated cost:
// a group's cost is its cheapest candidate not yet rejected, and only the cheapest partition left
// is proved, as one µGraph against the input graph; that proof is what a Candidate carries, so
// only candidates that can win are proved, and each once. When it fails, the partition's
// candidates are proved alone against their groups' kernel graphs, in cost order, to find and
// drop the wrong ones; a partition whose candidates all hold alone is given up. Each group's best
// bodies with a loop also come split over a grid axis (split_reduced.cpp), and the best µGraph by
// the estimate with one such split is proved and ranked besides, as is the best that splits every
// group that has a split form, and the best that runs one lone matmul or softmax as a generated
// kernel (whole or split) instead of the backend's own kernel or library call.
#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "search/abstract_expr_z3.h"
#include "search/checkpoint.h"
#include "search/internal.h"
#include "support/error.h"
#include "support/system_memory.h"

namespace yirage::search {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxPartitions = 200000;
constexpr int kMaxRejectedPerGroup = 16;  // candidates of one group proved wrong before giving up
constexpr size_t kRankedFused = 2;        // fused µGraphs proved and ranked next to the input
// and, besides those, the best that keeps an epilogue apart from its producer (partition.cpp), so
// that the tuner measures both choices where the cost estimate cannot tell them apart.
constexpr size_t kRankedEpilogueApart = 1;
// Bodies with a loop per group whose split forms join the group's candidates.
constexpr size_t kSplitSources = 2;
// And the best µGraph with a split loop, proved and ranked besides those.
constexpr size_t kRankedSplit = 1;
// And the best µGraph in which every group that has a split form takes it, where two or more do.
constexpr size_t kRankedAllSplit = 1;
// And the best µGraph in which one lone op runs as a generated kernel, whole or split
// (lone_op_searched): the estimate prices a library call by the description's rates, not by what
// the library does at the shape, so the tuner measures the generated kernel against it.
constexpr size_t kRankedLone = 1;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t positive_int(const nlohmann::json& s, const char* key, const std::string& device,
                     std::string_view object = "search") {
  if (!s.contains(key) || !s[key].is_number_integer() || s[key].get<int64_t>() < 1)
    fail("device '{}': capabilities.{}.{} must be a positive integer", device, object, key);
  return s[key].get<int64_t>();
}

// capabilities.search.streamed_weights (ir::StreamedWeights), optional.
ir::StreamedWeights streamed_weights(const nlohmann::json& s, const std::string& device) {
  ir::StreamedWeights w;
  if (!s.contains("streamed_weights")) return w;
  const nlohmann::json& j = s["streamed_weights"];
  constexpr std::string_view kStreamed = "search.streamed_weights";
  const std::string at = fmt::format("device '{}': capabilities.{}", device, kStreamed);
  if (!j.is_object()) fail("{} must be an object", at);
  w.max_rows = positive_int(j, "max_rows", device, kStreamed);
  w.k_multiple = positive_int(j, "k_multiple", device, kStreamed);
  w.max_staged_bytes = positive_int(j, "max_staged_bytes", device, kStreamed);
  w.max_blocks = positive_int(j, "max_blocks", device, kStreamed);
  if (!j.contains("column_widths") || !j["column_widths"].is_array())
    fail("{}.column_widths must be an array of positive integers", at);
  for (const nlohmann::json& width : j["column_widths"]) {
    if (!width.is_number_integer() || width.get<int64_t>() < 1)
      fail("{}.column_widths must be an array of positive integers", at);
    w.column_widths.push_back(width.get<int64_t>());
  }
  return w;
}

// capabilities.search.in_registers (ir::RegisterTiles), optional: the names of its rules.
ir::RegisterTiles in_registers(const nlohmann::json& s, const std::string& device) {
  ir::RegisterTiles r;
  if (!s.contains("in_registers")) return r;
  const std::string at = fmt::format("device '{}': capabilities.search.in_registers", device);
  if (!s["in_registers"].is_array()) fail("{} must be an array of rule names", at);
  for (const nlohmann::json& rule : s["in_registers"]) {
    const std::string name = rule.is_string() ? rule.get<std::string>() : rule.dump();
    if (name == "single_use_elementwise")
      r.single_use_elementwise = true;
    else if (name == "summed_into_accumulator")
      r.summed_into_accumulator = true;
    else
      fail("{}: unknown rule {} (single_use_elementwise, summed_into_accumulator)", at, name);
  }
  return r;
}

struct Variant {
  Group group;
  std::vector<BlockConfig> configs;
};

struct Entry {
  BlockCandidate candidate;
  const Group* group = nullptr;
};

struct GroupChoice {
  std::vector<Entry> entries;  // sorted by (cost, key)
  size_t next = 0;             // first entry not rejected
  bool verified = false;       // entries[next] is proved, alone or within a proved µGraph
  bool proved_alone = false;   // entries[next] is proved against the group's kernel graph
  int rejected = 0;
  bool exhausted() const { return next >= entries.size() || rejected >= kMaxRejectedPerGroup; }
};

// The input graph's outputs and every op's result, per distribution, computed once for all the
// candidates checked.
struct GraphValues {
  std::vector<ir::HostTensor> outputs;
  std::map<ir::TensorRef, ir::HostTensor> results;  // of every op
  // verify::widened_reference, made once a candidate misses the formula's tolerance (the
  // outer optional: made or not).
  std::optional<std::optional<verify::WidenedReference>> widened;
};
using ReferenceOutputs = std::map<verify::InputDistribution, GraphValues>;

GraphValues graph_values(const ir::KernelGraph& graph, const std::vector<ir::HostTensor>& inputs) {
  ir::KernelGraph all = graph;
  std::vector<ir::TensorRef> refs;
  for (size_t id = 0; id < graph.nodes().size(); ++id)
    if (!std::holds_alternative<ir::InputOp>(graph.nodes()[id].op))
      for (size_t p = 0; p < graph.nodes()[id].outputs.size(); ++p) {
        refs.push_back({int32_t(id), int32_t(p)});
        all.mark_output(refs.back(), fmt::format("result_{}_{}", id, p));
      }
  std::vector<ir::HostTensor> out = verify::run_reference(all, inputs);
  GraphValues v;
  const size_t n = graph.outputs().size();
  for (size_t i = 0; i < out.size(); ++i) {
    if (i < n)
      v.outputs.push_back(std::move(out[i]));
    else
      v.results.emplace(refs[i - n], std::move(out[i]));
  }
  return v;
}

// The op with its operand and result types, as text.
std::string op_text(const ir::KernelGraph& g, const ir::Node& n) {
  ir::KernelGraph one;
  std::vector<ir::TensorRef> operands;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    operands.push_back(
        one.input(fmt::format("a{}", i), g.type(n.inputs[i]).dims, g.type(n.inputs[i]).dtype));
  const std::vector<ir::TensorRef> results = one.add_node(n.op, operands, "op");
  for (size_t i = 0; i < results.size(); ++i) one.mark_output(results[i], fmt::format("r{}", i));
  return ir::to_json(one).dump();
}

// The candidate split where it leaves the input graph. Its ops that read the same inputs through
// the same ops as the input graph's (the quant_matmuls in front of a fused kernel, at an LLM
// block's widths seconds each on the reference) compute bit for bit what the input graph's run
// computed already: the reference executor is deterministic, one op's result a function of its
// operands alone. So only the rest runs, on the input graph's values where it reads them; what it
// returns is exactly what running the whole candidate would.
struct CandidateRest {
  ir::KernelGraph rest;                     // the candidate's other ops
  std::vector<ir::TensorRef> feeds;         // per input of `rest`: the input graph's tensor
  std::vector<std::optional<size_t>> outs;  // per candidate output: its index in rest's outputs
  std::vector<ir::TensorRef> shared_outs;   // per candidate output without one: the graph's
  int shared = 0;                           // candidate ops that are the input graph's
};

std::optional<CandidateRest> rest_of(const ir::KernelGraph& graph,
                                     const ir::KernelGraph& candidate) {
  const std::vector<ir::TensorRef> gi = graph.inputs(), ci = candidate.inputs();
  if (gi.size() != ci.size()) return std::nullopt;
  std::map<ir::TensorRef, ir::TensorRef> same;  // candidate tensor -> the graph's, equal values
  for (size_t i = 0; i < gi.size(); ++i) {
    if (graph.type(gi[i]) != candidate.type(ci[i])) return std::nullopt;
    same.emplace(ci[i], gi[i]);
  }
  CandidateRest r;
  std::map<ir::TensorRef, ir::TensorRef> in_rest;
  std::vector<bool> used(graph.nodes().size(), false);
  for (size_t id = 0; id < candidate.nodes().size(); ++id) {
    const ir::Node& n = candidate.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(n.op)) continue;
    std::vector<ir::TensorRef> images;
    for (ir::TensorRef t : n.inputs)
      if (auto it = same.find(t); it != same.end()) images.push_back(it->second);
    int32_t match = -1;
    if (images.size() == n.inputs.size() && !std::holds_alternative<ir::FusedOp>(n.op))
      for (size_t g = 0; g < graph.nodes().size() && match < 0; ++g)
        if (!used[g] && graph.nodes()[g].inputs == images &&
            op_text(graph, graph.nodes()[g]) == op_text(candidate, n))
          match = int32_t(g);
    if (match >= 0) {
      used[size_t(match)] = true;
      ++r.shared;
      for (size_t p = 0; p < n.outputs.size(); ++p)
        same.emplace(ir::TensorRef{int32_t(id), int32_t(p)}, ir::TensorRef{match, int32_t(p)});
      continue;
    }
    std::vector<ir::TensorRef> operands;
    for (ir::TensorRef t : n.inputs) {
      if (auto it = in_rest.find(t); it != in_rest.end()) {
        operands.push_back(it->second);
        continue;
      }
      const ir::TensorType& type = candidate.type(t);
      const ir::TensorRef in =
          r.rest.input(fmt::format("shared{}", r.feeds.size()), type.dims, type.dtype);
      r.feeds.push_back(same.at(t));  // not in the rest: computed before it, so shared
      in_rest.emplace(t, in);
      operands.push_back(in);
    }
    const std::vector<ir::TensorRef> out = r.rest.add_node(n.op, operands, n.name);
    for (size_t p = 0; p < out.size(); ++p)
      in_rest.emplace(ir::TensorRef{int32_t(id), int32_t(p)}, out[p]);
  }
  size_t rest_outputs = 0;
  for (const ir::GraphOutput& o : candidate.outputs()) {
    if (auto it = in_rest.find(o.tensor); it != in_rest.end()) {
      r.rest.mark_output(it->second, o.name);
      r.outs.push_back(rest_outputs++);
      r.shared_outs.push_back({});
    } else {
      r.outs.push_back(std::nullopt);
      r.shared_outs.push_back(same.at(o.tensor));
    }
  }
  return r;
}

// The candidate's outputs on `inputs`, its ops shared with the input graph taken from `values`.
std::vector<ir::HostTensor> run_candidate(const ir::KernelGraph& graph,
                                          const ir::KernelGraph& candidate,
                                          const std::optional<CandidateRest>& rest,
                                          const std::vector<ir::HostTensor>& inputs,
                                          const GraphValues& values) {
  if (!rest) return verify::run_reference(candidate, inputs);
  const std::vector<ir::TensorRef> gi = graph.inputs();
  auto value_of = [&](ir::TensorRef t) -> const ir::HostTensor& {
    for (size_t i = 0; i < gi.size(); ++i)
      if (gi[i] == t) return inputs[i];
    return values.results.at(t);
  };
  std::vector<ir::HostTensor> fed;
  for (ir::TensorRef t : rest->feeds) fed.push_back(value_of(t));
  std::vector<ir::HostTensor> ran;
  if (!rest->rest.outputs().empty()) ran = verify::run_reference(rest->rest, fed);
  std::vector<ir::HostTensor> out;
  for (size_t i = 0; i < rest->outs.size(); ++i)
    out.push_back(rest->outs[i] ? ran[*rest->outs[i]] : value_of(rest->shared_outs[i]));
  return out;
}

// The reference executor on both programs, on every distribution in turn until one fails: a
// candidate proved equal in exact arithmetic may still overflow where the input graph does not.
// The input graph runs once per distribution for all candidates; each candidate runs only where
// it leaves the input graph (CandidateRest), which the summary states.
FloatCheck float_check(const ir::KernelGraph& graph, const ir::KernelGraph& candidate,
                       uint64_t seed, bool parallel, ReferenceOutputs& reference) {
  FloatCheck check;
  check.passed = true;
  const int64_t k = verify::reduction_length(graph);
  std::optional<CandidateRest> rest = rest_of(graph, candidate);
  // Sharing nothing, the two programs run side by side (when `parallel`) as they always did.
  const bool beside = parallel && (!rest || rest->shared == 0);
  if (beside) rest.reset();
  std::vector<std::string> parts;
  for (verify::InputDistribution d : verify::kAllDistributions) {
    const std::vector<ir::HostTensor> inputs = verify::make_inputs(graph, d, seed);
    std::future<GraphValues> want;
    if (!reference.count(d)) {
      want = std::async(beside ? std::launch::async : std::launch::deferred,
                        [&] { return graph_values(graph, inputs); });
      ++check.reference_runs;
      if (!beside) reference[d] = want.get();
    }
    const std::vector<ir::HostTensor> got =
        beside ? verify::run_reference(candidate, inputs)
               : run_candidate(graph, candidate, rest, inputs, reference[d]);
    if (want.valid()) reference[d] = want.get();
    ++check.reference_runs;
    GraphValues& values = reference[d];
    const verify::Comparison c = verify::compare_within_rounding(
        got, values.outputs, k, d, [&]() -> const std::optional<verify::WidenedReference>& {
          if (!values.widened) {
            values.widened = verify::widened_reference(graph, inputs, values.outputs);
            ++check.reference_runs;
          }
          return *values.widened;
        });
    check.max_error = std::max(check.max_error, c.max_error);
    if (d == verify::InputDistribution::uniform) check.tolerance = c.tolerance;
    parts.push_back(fmt::format("{}: {}", verify::distribution_name(d), c.summary()));
    check.distributions.emplace_back(d, c);
    if (!c.passed) {
      check.passed = false;
      break;
    }
  }
  check.summary = fmt::format(
      "float check against the input graph, same dtype, longest reduction {} (error relative to "
      "|expected| + the output's rms){}: {}; {}",
      k,
      rest ? fmt::format(", the candidate's first {} op{} shared with the input graph's run",
                         rest->shared, rest->shared == 1 ? "" : "s")
           : std::string(),
      fmt::join(parts, "; "), check.passed ? "passed" : "FAILED");
  return check;
}

// Why a group that could share a kernel gets no block configuration: every tile of the block IR
// divides its dim exactly, so a dim whose only divisors are 1 and itself (a prime, or one with no
// divisor that fits) cannot be cut into tiles that both fit a block and fill the grid.
std::string no_configuration_note(const ir::KernelGraph& graph, const Group& group) {
  std::vector<std::string> ops, operands;
  for (int32_t id : group.nodes) ops.push_back(graph.node(id).name);
  for (const ir::TensorRef& t : group.operands)
    operands.push_back(
        fmt::format("{} {}", graph.node(t.node).name, ir::format_type(graph.type(t))));
  return fmt::format(
      "not fused: {{{}}}: no grid and for-loop of this device's space both divide the dims of "
      "{} and keep the block's tiles within its limits (tiles divide dims exactly: a prime dim "
      "splits only into 1-wide tiles); the ops stay separate kernels",
      fmt::join(ops, ", "), fmt::join(operands, ", "));
}

}  // namespace

FloatCheck float_check(const ir::KernelGraph& graph, const ir::KernelGraph& candidate,
                       uint64_t seed, bool parallel) {
  ReferenceOutputs reference;
  return float_check(graph, candidate, seed, parallel, reference);
}

SearchSpace search_space(const backend::DeviceDescription& device) {
  if (!device.capabilities.is_object() || !device.capabilities.contains("search") ||
      !device.capabilities["search"].is_object())
    fail(
        "device '{}': its description has no capabilities.search, the space the search reads "
        "(backend/device.h); this backend cannot describe fused kernels here",
        device.name);
  const nlohmann::json& s = device.capabilities["search"];
  SearchSpace space;
  // Optional: a backend whose only bound is the block's memory states the total alone.
  if (s.contains("max_tile_bytes_in_loop"))
    space.max_tile_bytes_in_loop = positive_int(s, "max_tile_bytes_in_loop", device.name);
  space.max_tile_bytes_total = positive_int(s, "max_tile_bytes_total", device.name);
  if (s.contains("pipeline_stages"))
    space.pipeline_stages = positive_int(s, "pipeline_stages", device.name);
  space.max_grid_blocks = positive_int(s, "max_grid_blocks", device.name);
  space.parallel_units = positive_int(s, "parallel_units", device.name);
  space.streamed = streamed_weights(s, device.name);
  space.in_registers = in_registers(s, device.name);
  space.rates = cost::device_from_capabilities(device.capabilities, device.name);
  return space;
}

int count_kernels(const ir::KernelGraph& graph) {
  int kernels = 0;
  for (const ir::Node& node : graph.nodes())
    if (!std::holds_alternative<ir::InputOp>(node.op) &&
        !std::holds_alternative<ir::ReshapeOp>(node.op))
      ++kernels;
  return kernels;
}

SearchResult superoptimize(const ir::KernelGraph& graph, const backend::DeviceDescription& device,
                           const SearchOptions& options) {
  const Clock::time_point start = Clock::now();
  SearchSpace space = search_space(device);
  if (options.rates) {
    space.rates = *options.rates;
    space.rates.parallel_units = space.parallel_units;  // the waves the grid runs in
  }
  SearchResult result;
  result.rates = space.rates;
  Budget budget;
  budget.deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::max(options.budget_seconds, 0.0)));
  budget.max_states = options.max_states;
  budget.max_bytes = options.max_memory_bytes
                         ? options.max_memory_bytes
                         : available_memory_bytes().value_or(uint64_t{8} << 30) / 4;
  budget.should_stop = &options.should_stop;
  budget.reject_body = &options.reject_body;
  std::unique_ptr<Z3Oracle> z3;  // one per search: its cache serves every work item
  if (options.pruner == Pruner::z3) {
    z3 = std::make_unique<Z3Oracle>();
    budget.z3 = z3.get();
  }
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, int(std::thread::hardware_concurrency()));
  verify::FingerprintOptions fingerprint = options.fingerprint;
  if (fingerprint.threads == 0) fingerprint.threads = threads;
  auto note = [&](std::string line) {
    if (std::find(result.notes.begin(), result.notes.end(), line) == result.notes.end())
      result.notes.push_back(std::move(line));
  };

  // The search runs on the graph with hand-written exp-normalizes read as softmax ops, whose
  // safe form it builds; proofs and float checks take the graph as it was written.
  int exp_normalizes = 0;
  const ir::KernelGraph searched = with_softmax_ops(graph, &exp_normalizes);
  if (exp_normalizes > 0)
    note(fmt::format(
        "read {} exp-normalize{} written as exp, sum and div as softmax, searched in the safe form "
        "(row max subtracted; a running max with rescaled accumulators in a loop over its dim)",
        exp_normalizes, exp_normalizes == 1 ? "" : "s"));

  // Kernel level: the partitions, and the groups of two or more ops they use.
  bool partitions_stopped_early = false;
  const std::vector<Partition> partitions =
      enumerate_partitions(searched, kMaxPartitions, &partitions_stopped_early);
  if (partitions_stopped_early)
    note(fmt::format("kernel level: stopped the enumeration after {} partitions",
                     partitions.size()));
  std::vector<uint64_t> masks;
  bool any_fusion = false;
  for (const Partition& p : partitions)
    for (uint64_t m : p.groups) {
      const bool lone = __builtin_popcountll(m) == 1;
      any_fusion |= !lone;
      if (!lone || lone_op_searched(searched.node(int32_t(__builtin_ctzll(m))).op))
        masks.push_back(m);
    }
  std::sort(masks.begin(), masks.end(), [](uint64_t a, uint64_t b) {
    const int pa = __builtin_popcountll(a), pb = __builtin_popcountll(b);
    return pa != pb ? pa > pb : a < b;
  });
  masks.erase(std::unique(masks.begin(), masks.end()), masks.end());
  for (const ir::Node& node : searched.nodes()) {
    std::string why;
    if (!std::holds_alternative<ir::InputOp>(node.op) &&
        !make_group(searched, uint64_t(1) << (&node - searched.nodes().data()), false, why))
      note(fmt::format("{}; it stays a kernel of its own", why));
  }
  if (!any_fusion) note("nothing to fuse: no two connected ops can share a kernel");

  // Block level: one variant per operand presentation, each with its configurations.
  std::map<uint64_t, std::vector<std::unique_ptr<Variant>>> variants;
  struct Item {
    uint64_t mask;
    const Variant* variant;
    size_t config;
    std::string key;
  };
  std::vector<Item> items;
  for (uint64_t mask : masks) {
    for (bool columns : {false, true}) {
      if (columns && !has_rank1_operand(searched, mask)) continue;
      std::string why;
      std::optional<Group> group = make_group(searched, mask, columns, why);
      if (!group) {
        note(fmt::format("not fused: {}", why));
        break;
      }
      auto v = std::make_unique<Variant>();
      v->group = std::move(*group);
      v->configs = block_configs(v->group.target, space);
      if (v->configs.empty()) note(no_configuration_note(searched, v->group));
      for (size_t c = 0; c < v->configs.size(); ++c)
        items.push_back(
            {mask, v.get(), c, fmt::format("{:x}:{}:{}", mask, columns, v->configs[c].describe())});
      variants[mask].push_back(std::move(v));
    }
  }

  std::optional<Checkpoint> checkpoint;
  if (!options.checkpoint_path.empty()) {
    checkpoint.emplace(options.checkpoint_path, ir::structural_hash_hex(graph));
    result.stats.resumed = checkpoint->load() > 0;
  }

  std::vector<ItemResult> results(items.size());
  std::vector<bool> finished(items.size(), false);
  std::atomic<size_t> next_item{0};
  std::mutex progress_mutex;
  Clock::time_point last_progress = start;
  uint64_t resumed_states = 0, resumed_pruned = 0, resumed_candidates = 0;
  std::mutex resumed_mutex;
  auto report = [&](bool force) {
    if (!options.progress) return;
    std::lock_guard lock(progress_mutex);
    if (!force && seconds_since(last_progress) < 0.25) return;
    last_progress = Clock::now();
    SearchProgress p;
    p.states = budget.states + resumed_states;
    p.pruned = budget.pruned + resumed_pruned;
    p.candidates = budget.candidates + resumed_candidates;
    p.verified = budget.verified;
    p.seconds = seconds_since(start);
    p.states_per_second = p.seconds > 0 ? double(budget.states) / p.seconds : 0;
    options.progress(p);
  };
  std::vector<std::string> item_errors(items.size());
  auto worker = [&] {
    for (size_t i; (i = next_item++) < items.size();) {
      if (budget.stop() || budget.poll_cancel()) return;
      const Item& item = items[i];
      try {
        if (checkpoint && checkpoint->find(item.key, results[i])) {
          // Costs are estimated again: the checkpoint may predate the current estimate.
          for (BlockCandidate& c : results[i].candidates) c.cost = block_graph_cost(*c.body, space);
          std::lock_guard lock(resumed_mutex);
          resumed_states += results[i].states;
          resumed_pruned += results[i].pruned;
          resumed_candidates += results[i].candidates.size();
          finished[i] = true;
          continue;
        }
        const uint64_t states0 = budget.states, pruned0 = budget.pruned;
        results[i].candidates = search_block_graphs(
            item.variant->group, item.variant->configs[item.config], space, budget);
        // Counters are shared, so these are approximate per item; they only feed the resume count.
        results[i].states = budget.states - states0;
        results[i].pruned = budget.pruned - pruned0;
        if (budget.stopped) continue;  // a cut item is not finished: it is searched again on resume
        finished[i] = true;
        if (checkpoint) checkpoint->record(item.key, results[i]);
      } catch (const std::exception& e) {
        item_errors[i] = e.what();
      }
      report(false);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int>(threads, int(std::max<size_t>(items.size(), 1))); ++t)
    pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  result.stats.enumerate_seconds = seconds_since(start);
  for (size_t i = 0; i < items.size(); ++i)
    if (!item_errors[i].empty())
      note(fmt::format("block search of {} failed: {}", items[i].key, item_errors[i]));
  result.stats.memory_bound_hit = budget.memory_bound_hit;
  result.stats.memory_held_bytes = budget.peak_bytes;
  result.stats.budget_exhausted = budget.stopped && !budget.cancelled && !budget.memory_bound_hit;
  if (budget.cut_items)
    note(
        fmt::format("{} block-level work item{} reached the per-item state limit and stopped there",
                    budget.cut_items.load(), budget.cut_items == 1 ? "" : "s"));
  if (budget.stopped) {
    const size_t done = size_t(std::count(finished.begin(), finished.end(), true));
    const std::string why =
        budget.cancelled ? "cancelled by the caller"
        : budget.memory_bound_hit
            ? fmt::format("memory bound reached ({:.1f} MiB held, max_memory_bytes {:.1f} MiB)",
                          double(budget.peak_bytes) / (1 << 20),
                          double(budget.max_bytes) / (1 << 20))
            : "budget exhausted";
    note(
        fmt::format("{} after {} of {} block-level work items; the result is the best found so far",
                    why, done, items.size()));
  }

  const bool cancelled_while_enumerating = budget.cancelled;

  // Merge in item order, then sort: independent of the threads.
  std::map<uint64_t, GroupChoice> choices;
  for (size_t i = 0; i < items.size(); ++i)
    for (const BlockCandidate& c : results[i].candidates)
      choices[items[i].mask].entries.push_back({c, &items[i].variant->group});
  auto by_cost = [](const Entry& a, const Entry& b) {
    return std::tie(a.candidate.cost, a.candidate.key) <
           std::tie(b.candidate.cost, b.candidate.key);
  };
  std::map<uint64_t, GroupChoice> split_choices;  // each group's split forms alone
  // The split forms of each group's best bodies with a loop (split_reduced.cpp): derived, not
  // enumerated, so they cost no block-level states. They are kept apart from the unsplit bodies
  // and ranked as a choice of their own below: a split's two kernels should not take the place of
  // the one fused kernel the estimate would otherwise return (gemm_softmax's narrow grid over 4
  // rows made the split the cheaper estimate, and the µGraph of fewer kernels went unproposed).
  for (auto& [mask, choice] : choices) {
    std::sort(choice.entries.begin(), choice.entries.end(), by_cost);
    std::vector<Entry> splits;
    size_t looped = 0;
    for (const Entry& e : choice.entries) {
      if (e.candidate.body->forloop_range() < 2) continue;
      for (BlockCandidate& sc : split_candidates(e.candidate, space))
        if (!budget.rejects(*sc.body) && !budget.rejects(*sc.finish))
          splits.push_back({std::move(sc), e.group});
      if (++looped == kSplitSources) break;
    }
    if (splits.empty()) continue;
    std::sort(splits.begin(), splits.end(), by_cost);
    split_choices[mask].entries = std::move(splits);
  }

  auto group_cost = [&](uint64_t mask) -> double {
    if (__builtin_popcountll(mask) == 1) {
      const int id = __builtin_ctzll(mask);
      return cost::node_phases(searched, searched.node(id), space.rates).total();
    }
    auto it = choices.find(mask);
    if (it == choices.end() || it->second.exhausted()) return INFINITY;
    return it->second.entries[it->second.next].candidate.cost;
  };
  // Proves the group's entries alone, in cost order, until one holds; says whether it dropped any.
  auto verify_group = [&](GroupChoice& choice) {
    bool dropped = false;
    while (!choice.exhausted() && !choice.proved_alone) {
      const Entry& e = choice.entries[choice.next];
      try {
        const Clock::time_point proof_start = Clock::now();
        ++result.stats.proofs;
        verify::EquivalenceResult r =
            e.candidate.finish
                ? verify::check_equivalent(
                      e.group->target,
                      split_kernel_graph(e.group->target, {e.candidate.body, e.candidate.finish,
                                                           e.candidate.splits}),
                      fingerprint)
                : verify::check_equivalent(e.group->target, *e.candidate.body, fingerprint);
        result.stats.prove_seconds += seconds_since(proof_start);
        if (r.equivalent && r.bound_met) {
          choice.proved_alone = true;
          if (!choice.verified) ++budget.verified;
          choice.verified = true;
          report(false);
          return dropped;
        }
        if (choice.rejected == 0)
          note(fmt::format("a candidate of group {:x} failed verification: {}", e.group->mask,
                           r.summary()));
      } catch (const Error& error) {
        if (choice.rejected == 0)
          note(fmt::format("a candidate of group {:x} could not be checked: {}", e.group->mask,
                           error.what()));
      }
      ++choice.next;
      ++choice.rejected;
      choice.verified = false;
      dropped = true;
    }
    return dropped;
  };

  // Best-first over the partitions.
  struct Chosen {
    ir::KernelGraph mugraph;
    verify::EquivalenceResult proof;
    std::string form;  // Candidate::form
  };
  std::vector<Chosen> chosen;
  std::set<size_t> taken;
  bool apart = false;  // choosing among the partitions that keep an epilogue apart
  size_t chosen_with_epilogues = 0, chosen_apart = 0;
  while (true) {
    if (!apart && chosen_with_epilogues >= kRankedFused) apart = true;
    if (apart && chosen_apart >= kRankedEpilogueApart) break;
    if (budget.poll_cancel()) break;
    size_t best = partitions.size();
    double best_cost = INFINITY;
    size_t best_groups = 0;
    for (size_t p = 0; p < partitions.size(); ++p) {
      if (taken.count(p) || partitions[p].epilogue_apart != apart ||
          partitions[p].groups.size() == searched.nodes().size() - searched.inputs().size())
        continue;  // the all-singletons partition is the input graph (its exp-normalizes as
                   // softmax ops at most), ranked separately
      double cost = 0;
      for (uint64_t m : partitions[p].groups) cost += group_cost(m);
      if (cost < best_cost || (cost == best_cost && partitions[p].groups.size() < best_groups)) {
        best = p, best_cost = cost, best_groups = partitions[p].groups.size();
      }
    }
    if (best == partitions.size()) {
      if (apart) break;
      chosen_with_epilogues = kRankedFused;  // none left of this kind: on to the other
      continue;
    }
    std::vector<uint64_t> fused_masks;
    std::vector<const Group*> fused;
    std::vector<std::shared_ptr<const ir::BlockGraph>> bodies;
    for (uint64_t m : partitions[best].groups) {
      if (__builtin_popcountll(m) == 1) continue;
      const Entry& e = choices[m].entries[choices[m].next];
      fused_masks.push_back(m);
      fused.push_back(e.group);
      bodies.push_back(e.candidate.body);
    }
    ir::KernelGraph mugraph = build_mugraph(searched, fused, bodies);
    verify::EquivalenceResult proof;
    std::string why;
    const Clock::time_point proof_start = Clock::now();
    ++result.stats.proofs;
    try {
      proof = verify::check_equivalent_by_parts(graph, mugraph, fingerprint);
      why = proof.summary();
    } catch (const Error& error) {
      why = error.what();
    }
    result.stats.prove_seconds += seconds_since(proof_start);
    if (proof.equivalent && proof.bound_met) {
      for (uint64_t m : fused_masks) {
        if (!choices[m].verified) ++budget.verified;
        choices[m].verified = true;
      }
      report(false);
      taken.insert(best);
      chosen.push_back({std::move(mugraph), std::move(proof), apart ? "epilogue apart" : "fused"});
      ++(apart ? chosen_apart : chosen_with_epilogues);
      continue;
    }
    bool dropped = false;
    for (uint64_t m : fused_masks) dropped |= verify_group(choices[m]);
    if (!dropped) {
      note(fmt::format("a µGraph whose groups were proved failed the whole-graph proof: {}", why));
      taken.insert(best);
    }
  }
  // µGraphs in which some groups take their entries from choices of their own (each option of a
  // partition, from `options(p)`, names them), the other groups their best and lone ops their
  // kernels: up to `count` of them, best first by the estimate, proved against the input graph
  // and ranked.
  using Override = std::vector<std::pair<uint64_t, GroupChoice*>>;
  auto override_of = [](const Override& o, uint64_t mask) -> GroupChoice* {
    for (const auto& [m, c] : o)
      if (m == mask) return c;
    return nullptr;
  };
  auto rank_with = [&](size_t count, const char* what, auto options) {
    std::set<std::pair<size_t, Override>> given_up;
    for (size_t ranked = 0; ranked < count && !budget.poll_cancel();) {
      size_t best = partitions.size();
      Override best_override;
      double best_cost = INFINITY;
      for (size_t p = 0; p < partitions.size(); ++p)
        for (const Override& o : options(partitions[p])) {
          if (given_up.count({p, o})) continue;
          double cost = 0;
          for (uint64_t m : partitions[p].groups) {
            const GroupChoice* c = override_of(o, m);
            cost += !c               ? group_cost(m)
                    : c->exhausted() ? INFINITY
                                     : c->entries[c->next].candidate.cost;
          }
          if (cost < best_cost) best = p, best_override = o, best_cost = cost;
        }
      if (best == partitions.size()) break;
      std::vector<const Group*> fused;
      std::vector<std::shared_ptr<const ir::BlockGraph>> bodies, finishes;
      std::vector<GroupChoice*> used;
      for (uint64_t m : partitions[best].groups) {
        GroupChoice* special = override_of(best_override, m);
        if (!special && __builtin_popcountll(m) == 1) continue;
        GroupChoice& c = special ? *special : choices[m];
        const Entry& e = c.entries[c.next];
        used.push_back(&c);
        fused.push_back(e.group);
        bodies.push_back(e.candidate.body);
        finishes.push_back(e.candidate.finish);
      }
      ir::KernelGraph mugraph = build_mugraph(searched, fused, bodies, finishes);
      verify::EquivalenceResult proof;
      std::string why;
      try {
        proof = verify::check_equivalent(graph, mugraph, fingerprint);
        why = proof.summary();
      } catch (const Error& error) {
        why = error.what();
      }
      if (proof.equivalent && proof.bound_met) {
        chosen.push_back({std::move(mugraph), std::move(proof), what});
        ++ranked;
        continue;
      }
      bool dropped = false;
      for (GroupChoice* c : used) dropped |= verify_group(*c);
      if (!dropped) {
        note(fmt::format("a {} µGraph whose groups were proved failed the whole-graph proof: {}",
                         what, why));
        given_up.insert({best, best_override});
      }
    }
  };
  auto choice_of = [](std::map<uint64_t, GroupChoice>& from, uint64_t mask) {
    auto it = from.find(mask);
    return it == from.end() ? nullptr : &it->second;
  };
  // The best µGraph that splits one group's loop over a grid axis (split_reduced.cpp): the
  // estimate charges a split its partials' round trip through memory and a second launch, but
  // not the memory bandwidth that a narrow grid leaves idle, which is what the split is for; so
  // the tuner measures it beside the others.
  rank_with(kRankedSplit, "split", [&](const Partition& p) {
    std::vector<Override> out;
    for (uint64_t m : p.groups)
      if (__builtin_popcountll(m) > 1)
        if (GroupChoice* c = choice_of(split_choices, m)) out.push_back({{m, c}});
    return out;
  });
  // And the best that splits every group that has a split form (a lone op's too), where that is
  // two or more: the Llama MLP's hand-built H200 winners split both its products.
  rank_with(kRankedAllSplit, "all-split", [&](const Partition& p) {
    Override all;
    for (uint64_t m : p.groups)
      if (GroupChoice* c = choice_of(split_choices, m)) all.push_back({m, c});
    return all.size() > 1 ? std::vector<Override>{all} : std::vector<Override>{};
  });
  rank_with(kRankedLone, "lone-op", [&](const Partition& p) {
    std::vector<Override> out;
    for (uint64_t m : p.groups)
      if (__builtin_popcountll(m) == 1)
        for (GroupChoice* c : {choice_of(choices, m), choice_of(split_choices, m)})
          if (c) out.push_back({{m, c}});
    return out;
  });
  for (const auto& [mask, choice] : choices)
    if (choice.rejected >= kMaxRejectedPerGroup)
      note(fmt::format("group {:x}: {} candidates failed verification; gave up on it", mask,
                       choice.rejected));
  if (budget.cancelled && !cancelled_while_enumerating)
    note("cancelled by the caller while proving; the result holds the µGraphs proved before");

  for (Chosen& c : chosen) {
    Candidate cand;
    cand.proof = std::move(c.proof);
    cand.kernels = count_kernels(c.mugraph);
    cand.predicted = cost::mugraph_phases(c.mugraph, space.rates);
    cand.estimated_seconds = cand.predicted.total();
    cand.mugraph = std::move(c.mugraph);
    cand.form = std::move(c.form);
    result.ranked.push_back(std::move(cand));
  }
  {
    Candidate input;
    input.mugraph = graph;
    input.kernels = count_kernels(graph);
    input.predicted = cost::mugraph_phases(graph, space.rates);
    input.estimated_seconds = input.predicted.total();
    input.proof.equivalent = true;
    input.proof.bound_met = true;
    input.proof.per_trial_bound = 0;
    input.proof.false_accept_bound = 0;
    input.proof.assumptions = {"the candidate is the input graph itself"};
    input.form = "input graph";
    result.ranked.push_back(std::move(input));
  }
  std::stable_sort(
      result.ranked.begin(), result.ranked.end(), [](const Candidate& a, const Candidate& b) {
        return std::tie(a.estimated_seconds, a.kernels) < std::tie(b.estimated_seconds, b.kernels);
      });

  // The float check of every fused candidate; one that fails it is dropped (and said so).
  ReferenceOutputs reference;
  // Not cut by a cancellation: there are at most kRankedFused + kRankedEpilogueApart +
  // kRankedSplit + kRankedAllSplit + kRankedLone of them, and none may go unchecked.
  for (size_t i = 0; i < result.ranked.size();) {
    Candidate& c = result.ranked[i];
    if (c.proof.assumptions ==
        std::vector<std::string>{"the candidate is the input graph itself"}) {
      c.float_check.passed = true;
      c.float_check.summary = "float check: the candidate is the input graph itself";
      ++i;
      continue;
    }
    const Clock::time_point check_start = Clock::now();
    c.float_check = float_check(graph, c.mugraph, options.seed, threads > 1, reference);
    result.stats.float_check_seconds += seconds_since(check_start);
    result.stats.reference_runs += c.float_check.reference_runs;
    if (c.float_check.passed) {
      ++i;
      continue;
    }
    note(fmt::format("dropped a proved candidate ({} kernels) that failed the float check: {}",
                     c.kernels, c.float_check.summary));
    result.ranked.erase(result.ranked.begin() + std::ptrdiff_t(i));
  }
  result.float_check = result.ranked.front().float_check;

  result.stats.states = budget.states + resumed_states;
  result.stats.pruned = budget.pruned + resumed_pruned;
  result.stats.candidates = budget.candidates + resumed_candidates;
  result.stats.verified = budget.verified;
  result.stats.cancelled = budget.cancelled;
  result.stats.pruner = options.pruner;
  result.stats.expr_pruned = budget.expr_pruned;
  result.stats.backend_rejected = budget.rejected;
  if (budget.rejected > 0)
    note(fmt::format(
        "the backend rejected {} bodies that the description's limits admit (the first: {})",
        uint64_t(budget.rejected), budget.first_rejection));
  if (z3) {
    result.stats.z3 = z3->stats();
    for (const std::string& d : result.stats.z3.differences) note(d);
  }
  result.stats.seconds = seconds_since(start);
  report(true);
  return result;
}

}  // namespace yirage::search
