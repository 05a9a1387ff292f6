// Rewriting a graph's ops in place of their nodes, and with it schedule choices: op attributes
// that pick how a backend computes an op, not what it computes (MatmulOp::library,
// QuantMatmulOp::prefetch). The tuner measures variants that differ only in them; the proof of a
// graph holds for each such variant, and the reference executor and the fingerprint ignore them.
#include "ir/kernel_graph.h"

namespace yirage::ir {

std::optional<KernelGraph> with_ops_rewritten(
    const KernelGraph& graph, const std::function<bool(const Node&, Op&)>& rewrite) {
  KernelGraph out;
  bool changed = false;
  for (const Node& n : graph.nodes()) {
    if (std::holds_alternative<InputOp>(n.op)) {
      out.input(n.name, n.outputs[0].dims, n.outputs[0].dtype);
      continue;
    }
    Op op = n.op;
    changed = rewrite(n, op) || changed;
    out.add_node(std::move(op), n.inputs, n.name);
  }
  if (!changed) return std::nullopt;
  for (const GraphOutput& o : graph.outputs()) out.mark_output(o.tensor, o.name);
  return out;
}

KernelGraph without_schedule_choices(const KernelGraph& graph) {
  std::optional<KernelGraph> plain = with_ops_rewritten(graph, [](const Node&, Op& op) {
    if (auto* m = std::get_if<MatmulOp>(&op); m && m->library != MatmulOp{}.library) {
      m->library = MatmulOp{}.library;
      return true;
    }
    if (auto* q = std::get_if<QuantMatmulOp>(&op); q && q->prefetch != QuantMatmulOp{}.prefetch) {
      q->prefetch = QuantMatmulOp{}.prefetch;
      return true;
    }
    return false;
  });
  return plain ? std::move(*plain) : graph;
}

}  // namespace yirage::ir
