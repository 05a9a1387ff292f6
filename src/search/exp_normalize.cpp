// Exp-normalize written out by hand, read as the softmax it is.
//
// A graph may spell softmax as its parts: e = exp(x), s = Σ_d e (keepdim), e / s, as the suite's
// attention does, or with the row max subtracted first, exp(x - max_d x). The search proposes
// every softmax in its safe form (abstract_expr.h: the row max subtracted before the exp, and
// inside a loop over d a running max with rescaled accumulators), and the safe form is a
// different program from exp / Σexp, one the block search would not look for if the target said
// exp / Σexp. So the search runs on the graph with each such pattern replaced by one softmax op
// over d. The rewrite only renames what the nodes compute: the proofs and float checks still take
// the input graph as it was written, and the fingerprints prove the two equal (the max cancels,
// verify/fingerprint_ops.cpp). A pattern is replaced only when its inner tensors (e, s, and the
// max and the difference) are read by nothing else and are not outputs, since the softmax op no
// longer holds them.
#include <map>
#include <optional>
#include <set>

#include "search/internal.h"

namespace yirage::search {
namespace {

struct Pattern {
  int32_t div = -1;
  ir::TensorRef x;  // what the softmax normalizes
  int dim = 0;
  std::vector<int32_t> inner;  // nodes the softmax op replaces, besides the div
};

class Matcher {
 public:
  explicit Matcher(const ir::KernelGraph& g) : g_(g), readers_(g.nodes().size(), 0) {
    for (const ir::Node& node : g.nodes())
      for (const ir::TensorRef& in : node.inputs) ++readers_[size_t(in.node)];
    for (const ir::GraphOutput& out : g.outputs()) ++readers_[size_t(out.tensor.node)];
  }

  // The exp-normalize that ends in node `id`, if it is one: div(e, Σ_d e).
  std::optional<Pattern> at(int32_t id) const {
    const ir::Node& div = g_.node(id);
    const auto* b = std::get_if<ir::BinaryOp>(&div.op);
    if (!b || b->fn != ir::BinaryFn::div) return std::nullopt;
    const ir::TensorRef e = div.inputs[0], s = div.inputs[1];
    const auto* sum = std::get_if<ir::ReduceOp>(&g_.node(s.node).op);
    if (!sum || sum->fn != ir::ReduceFn::sum || !sum->keepdim || g_.node(s.node).inputs[0] != e)
      return std::nullopt;
    if (!is_unary(e.node, ir::UnaryFn::exp) || readers_[size_t(e.node)] != 2 ||
        readers_[size_t(s.node)] != 1)
      return std::nullopt;
    Pattern p{id, g_.node(e.node).inputs[0], sum->dim, {e.node, s.node}};
    take_max_subtraction(p);
    return p;
  }

 private:
  bool is_unary(int32_t id, ir::UnaryFn fn) const {
    const auto* u = std::get_if<ir::UnaryOp>(&g_.node(id).op);
    return u && u->fn == fn;
  }

  // exp(x - max_d x): the subtraction is the softmax op's own, so it joins the pattern.
  void take_max_subtraction(Pattern& p) const {
    const ir::Node& sub = g_.node(p.x.node);
    const auto* b = std::get_if<ir::BinaryOp>(&sub.op);
    if (!b || b->fn != ir::BinaryFn::sub || readers_[size_t(p.x.node)] != 1) return;
    const ir::TensorRef x = sub.inputs[0], m = sub.inputs[1];
    const auto* max = std::get_if<ir::ReduceOp>(&g_.node(m.node).op);
    if (!max || max->fn != ir::ReduceFn::max || !max->keepdim || max->dim != p.dim ||
        g_.node(m.node).inputs[0] != x || readers_[size_t(m.node)] != 1)
      return;
    p.inner.push_back(p.x.node);
    p.inner.push_back(m.node);
    p.x = x;
  }

  const ir::KernelGraph& g_;
  std::vector<int> readers_;  // per node: operand uses and output marks of its tensors
};

}  // namespace

ir::KernelGraph with_softmax_ops(const ir::KernelGraph& graph, int* rewritten) {
  const Matcher matcher(graph);
  std::map<int32_t, Pattern> patterns;  // by the div's node id
  std::set<int32_t> replaced;
  for (size_t id = 0; id < graph.nodes().size(); ++id)
    if (std::optional<Pattern> p = matcher.at(int32_t(id))) {
      replaced.insert(p->inner.begin(), p->inner.end());
      patterns.emplace(int32_t(id), std::move(*p));
    }
  if (rewritten) *rewritten = int(patterns.size());
  if (patterns.empty()) return graph;

  ir::KernelGraph out;
  std::map<ir::TensorRef, ir::TensorRef> mapped;
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const ir::Node& node = graph.nodes()[id];
    if (replaced.count(int32_t(id))) continue;
    if (std::holds_alternative<ir::InputOp>(node.op)) {
      const ir::TensorType& t = node.outputs.at(0);
      mapped[{int32_t(id), 0}] = out.input(node.name, t.dims, t.dtype);
      continue;
    }
    std::vector<ir::TensorRef> outs;
    if (auto p = patterns.find(int32_t(id)); p != patterns.end()) {
      outs = out.add_node(ir::SoftmaxOp{p->second.dim}, {mapped.at(p->second.x)}, node.name);
    } else {
      std::vector<ir::TensorRef> inputs;
      for (const ir::TensorRef& in : node.inputs) inputs.push_back(mapped.at(in));
      outs = out.add_node(node.op, std::move(inputs), node.name);
    }
    for (size_t port = 0; port < outs.size(); ++port)
      mapped[{int32_t(id), int32_t(port)}] = outs[port];
  }
  for (const ir::GraphOutput& o : graph.outputs()) out.mark_output(mapped.at(o.tensor), o.name);
  return out;
}

}  // namespace yirage::search
