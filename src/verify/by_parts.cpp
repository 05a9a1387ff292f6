// The equivalence check of a µGraph part by part: its fused kernels each against the input
// graph's ops they replace, and everything else matched op for op.
//
// Why: the whole-graph fingerprint evaluates every op of both programs in exact field arithmetic.
// At an LLM block's shapes that is the quant_matmuls' rows × K × N products (3.5·10^9 per program
// and trial for Llama-3.2-1B's MLP at 64 rows) and K × N hashed weights, minutes per proof, while
// the fused kernels the search builds around them are elementwise ops and norms. A µGraph whose
// unfused nodes are the input graph's own nodes (same op, same operand types, operands that are
// the same tensors) computes what the input graph computes as soon as each fused kernel computes
// what the graph's ops between its operands and its outputs compute, by induction over the
// µGraph's topological order. So the fingerprints run on each fused kernel against that region
// of the input graph, at the region's own shapes, and the bound is the union of the parts' bounds
// (each part proved to the target divided by their number). The matching is exact and
// structural; where it cannot account for every node, the whole-graph check runs instead.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/serialize.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

using ir::KernelGraph;
using ir::TensorRef;

// The op with its operand and result types, as text: two nodes with the same signature compute
// the same function of their operands.
std::string op_signature_of(const KernelGraph& g, const ir::Node& n) {
  KernelGraph one;
  std::vector<TensorRef> operands;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::TensorType& t = g.type(n.inputs[i]);
    operands.push_back(one.input(fmt::format("a{}", i), t.dims, t.dtype));
  }
  const std::vector<TensorRef> results = one.add_node(n.op, operands, "op");
  for (size_t i = 0; i < results.size(); ++i) one.mark_output(results[i], fmt::format("r{}", i));
  return ir::to_json(one).dump();
}

bool is_fused(const ir::Node& n) {
  return std::holds_alternative<ir::FusedOp>(n.op);
}

// The correspondence of µGraph tensors to input-graph tensors, and of unfused µGraph nodes to
// input-graph nodes; empty optional when it cannot be established.
class Matching {
 public:
  Matching(const KernelGraph& graph, const KernelGraph& mu) : g_(graph), mu_(mu) {
    node_of_.assign(mu.nodes().size(), -1);
    claimed_.assign(graph.nodes().size(), false);
  }

  bool run() {
    const std::vector<TensorRef> gi = g_.inputs(), mi = mu_.inputs();
    if (gi.size() != mi.size() || g_.outputs().size() != mu_.outputs().size()) return false;
    for (size_t i = 0; i < gi.size(); ++i) {  // executors take inputs by position
      if (!map(mi[i], gi[i])) return false;
      node_of_[size_t(mi[i].node)] = gi[i].node;
      claimed_[size_t(gi[i].node)] = true;
    }
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      if (!map(mu_.outputs()[i].tensor, g_.outputs()[i].tensor)) return false;
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t id = 0; id < mu_.nodes().size(); ++id) {
        const int r = forward(int32_t(id));
        if (r < 0) return false;
        progress = progress || r > 0;
      }
      for (size_t id = mu_.nodes().size(); id-- > 0;) {
        const int r = backward(int32_t(id));
        if (r < 0) return false;
        progress = progress || r > 0;
      }
    }
    return true;
  }

  std::optional<TensorRef> image(TensorRef t) const {
    auto it = to_graph_.find(t);
    return it == to_graph_.end() ? std::nullopt : std::optional(it->second);
  }
  bool matched(int32_t mu_node) const { return node_of_[size_t(mu_node)] >= 0; }
  bool claimed(int32_t graph_node) const { return claimed_[size_t(graph_node)]; }

 private:
  bool map(TensorRef m, TensorRef g) {
    if (mu_.type(m) != g_.type(g)) return false;
    auto [it, fresh] = to_graph_.emplace(m, g);
    return fresh || it->second == g;
  }

  bool claim(int32_t m, int32_t g) {
    const ir::Node &mn = mu_.node(m), &gn = g_.node(g);
    if (claimed_[size_t(g)] || mn.outputs.size() != gn.outputs.size() ||
        mn.inputs.size() != gn.inputs.size() || op_signature_of(mu_, mn) != op_signature_of(g_, gn))
      return false;
    for (size_t p = 0; p < mn.outputs.size(); ++p)
      if (!map({m, int32_t(p)}, {g, int32_t(p)})) return false;
    for (size_t i = 0; i < mn.inputs.size(); ++i)
      if (!map(mn.inputs[i], gn.inputs[i])) return false;
    node_of_[size_t(m)] = g;
    claimed_[size_t(g)] = true;
    return true;
  }

  // An unfused node whose operands are all mapped, matched to the input graph's node that reads
  // exactly those tensors with the same op: 1 matched, 0 not yet, -1 inconsistent.
  int forward(int32_t m) {
    const ir::Node& n = mu_.node(m);
    if (matched(m) || is_fused(n)) return 0;
    std::vector<TensorRef> operands;
    for (TensorRef t : n.inputs) {
      std::optional<TensorRef> at = image(t);
      if (!at) return 0;
      operands.push_back(*at);
    }
    for (size_t g = 0; g < g_.nodes().size(); ++g)
      if (!claimed_[g] && g_.nodes()[g].inputs == operands &&
          op_signature_of(g_, g_.nodes()[g]) == op_signature_of(mu_, n))
        return claim(m, int32_t(g)) ? 1 : -1;
    return 0;  // a presentation reshape in front of a fused kernel, or no match at all
  }

  // An unfused node one of whose results is mapped, matched to that tensor's producer.
  int backward(int32_t m) {
    const ir::Node& n = mu_.node(m);
    if (matched(m) || is_fused(n)) return 0;
    for (size_t p = 0; p < n.outputs.size(); ++p)
      if (std::optional<TensorRef> at = image({m, int32_t(p)})) {
        if (at->port != int32_t(p) || std::holds_alternative<ir::InputOp>(g_.node(at->node).op))
          return -1;
        return claim(m, at->node) ? 1 : -1;
      }
    return 0;
  }

  const KernelGraph &g_, &mu_;
  std::map<TensorRef, TensorRef> to_graph_;
  std::vector<int32_t> node_of_;  // per µGraph node: its input-graph node, or -1
  std::vector<bool> claimed_;     // per input-graph node: matched to a µGraph node
};

// The input graph's ops from a fused kernel's operands to its results, as a kernel graph that
// takes the kernel's operands as it does; nullopt when they do not form such a region.
std::optional<KernelGraph> region_of(const KernelGraph& g, const KernelGraph& mu, int32_t fused,
                                     const Matching& m, std::set<int32_t>& taken) {
  const ir::Node& f = mu.node(fused);
  KernelGraph region;
  std::map<TensorRef, TensorRef> in_region;  // input-graph tensor -> region tensor
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    const ir::TensorType& presented = mu.type(f.inputs[i]);
    const TensorRef in = region.input(fmt::format("operand{}", i), presented.dims, presented.dtype);
    std::optional<TensorRef> at = m.image(f.inputs[i]);
    TensorRef value = in;
    if (!at) {
      // A search's column presentation: a reshape of a mapped tensor, read by the kernel only. The
      // region reshapes it back, which renames the dims of the same contiguous values.
      const ir::Node& r = mu.node(f.inputs[i].node);
      if (!std::holds_alternative<ir::ReshapeOp>(r.op) || m.matched(f.inputs[i].node)) return {};
      at = m.image(r.inputs[0]);
      if (!at) return {};
      value = region.reshape(in, g.type(*at).dims);
    }
    in_region.emplace(*at, value);
  }
  std::set<int32_t> nodes;  // the region's ops: backwards from the results to the operands
  std::vector<int32_t> stack;
  std::vector<TensorRef> results;
  for (size_t p = 0; p < f.outputs.size(); ++p) {
    std::optional<TensorRef> at = m.image({fused, int32_t(p)});
    if (!at) return {};
    results.push_back(*at);
    if (!in_region.count(*at)) stack.push_back(at->node);
  }
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    if (nodes.count(id)) continue;
    const ir::Node& n = g.node(id);
    if (m.claimed(id) || taken.count(id) || std::holds_alternative<ir::InputOp>(n.op)) return {};
    nodes.insert(id);
    for (TensorRef t : n.inputs)
      if (!in_region.count(t)) stack.push_back(t.node);
  }
  for (int32_t id : nodes) {  // ascending ids: the input graph's topological order
    const ir::Node& n = g.node(id);
    std::vector<TensorRef> operands;
    for (TensorRef t : n.inputs) operands.push_back(in_region.at(t));
    const std::vector<TensorRef> out = region.add_node(n.op, operands, n.name);
    for (size_t p = 0; p < out.size(); ++p) in_region.emplace(TensorRef{id, int32_t(p)}, out[p]);
  }
  for (size_t p = 0; p < results.size(); ++p)
    region.mark_output(in_region.at(results[p]), fmt::format("result{}", p));
  taken.insert(nodes.begin(), nodes.end());
  return region;
}

}  // namespace

EquivalenceResult check_equivalent_by_parts(const KernelGraph& given_graph,
                                            const KernelGraph& given_mugraph,
                                            const FingerprintOptions& options) {
  // Matched op for op on what they compute: a node whose only difference is a schedule choice
  // (quant_matmul prefetch, a library matmul) is the input graph's own node.
  const KernelGraph graph = ir::without_schedule_choices(given_graph);
  const KernelGraph mugraph = ir::without_schedule_choices(given_mugraph);
  Matching m(graph, mugraph);
  std::vector<std::pair<int32_t, KernelGraph>> parts;
  bool structured = m.run();
  std::set<int32_t> taken;
  for (size_t id = 0; structured && id < mugraph.nodes().size(); ++id) {
    const ir::Node& n = mugraph.nodes()[id];
    if (is_fused(n)) {
      std::optional<KernelGraph> region = region_of(graph, mugraph, int32_t(id), m, taken);
      structured = region.has_value();
      if (region) parts.emplace_back(int32_t(id), std::move(*region));
    } else if (!m.matched(int32_t(id))) {
      // Only a presentation reshape read by fused kernels alone may stay unmatched.
      structured = std::holds_alternative<ir::ReshapeOp>(n.op);
      for (const ir::Node& user : mugraph.nodes())
        for (TensorRef t : user.inputs)
          if (t.node == int32_t(id) && !is_fused(user)) structured = false;
    }
  }
  if (!structured) return check_equivalent(graph, mugraph, options);

  EquivalenceResult result;
  result.equivalent = result.bound_met = true;
  result.per_trial_bound = result.false_accept_bound = 0;
  result.parts = int(parts.size());
  FingerprintOptions each = options;
  each.target_bound = options.target_bound / double(std::max<size_t>(parts.size(), 1));
  std::set<std::string> assumptions;
  for (const auto& [id, region] : parts) {
    const ir::Node& f = mugraph.node(id);
    const EquivalenceResult r = check_equivalent(region, *std::get<ir::FusedOp>(f.op).body, each);
    result.trials = result.trials == 0 ? r.trials : std::min(result.trials, r.trials);
    result.per_trial_bound = std::max(result.per_trial_bound, r.per_trial_bound);
    result.false_accept_bound = std::min(1.0, result.false_accept_bound + r.false_accept_bound);
    assumptions.insert(r.assumptions.begin(), r.assumptions.end());
    if (!r.equivalent) {
      result.equivalent = result.bound_met = false;
      result.trials = r.trials;
      result.not_proven = r.not_proven;
      if (r.mismatch) {
        result.mismatch = r.mismatch;
        result.mismatch->name =
            fmt::format("fused kernel '{}' result {}", f.name, r.mismatch->output);
      }
      return result;
    }
  }
  result.bound_met = result.false_accept_bound <= options.target_bound;
  result.assumptions.push_back(fmt::format(
      "by parts: the µGraph's other nodes are the input graph's own, op for op, and each of its {} "
      "fused kernel{} was proved against the input graph's ops it replaces (bounds summed)",
      parts.size(), parts.size() == 1 ? "" : "s"));
  result.assumptions.insert(result.assumptions.end(), assumptions.begin(), assumptions.end());
  return result;
}

}  // namespace yirage::verify
