// Schedule choices: op attributes that pick how a backend computes an op, not what it computes
// (MatmulOp::library, QuantMatmulOp::prefetch). The tuner measures variants that differ only in
// them; the proof of a graph holds for each such variant, and the reference executor and the
// fingerprint ignore them.
#include "ir/kernel_graph.h"

namespace yirage::ir {

Op without_schedule_choices(Op op) {
  if (auto* m = std::get_if<MatmulOp>(&op)) m->library = MatmulOp{}.library;
  if (auto* q = std::get_if<QuantMatmulOp>(&op)) q->prefetch = QuantMatmulOp{}.prefetch;
  return op;
}

KernelGraph without_schedule_choices(const KernelGraph& graph) {
  KernelGraph out;
  for (const Node& n : graph.nodes()) {
    if (std::holds_alternative<InputOp>(n.op)) {
      out.input(n.name, n.outputs[0].dims, n.outputs[0].dtype);
      continue;
    }
    out.add_node(without_schedule_choices(n.op), n.inputs, n.name);
  }
  for (const GraphOutput& o : graph.outputs()) out.mark_output(o.tensor, o.name);
  return out;
}

}  // namespace yirage::ir
