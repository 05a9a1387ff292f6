// Kernel-level enumeration: partitions of the op nodes into fusion groups, and the µGraph of one.
//
// Partitions are generated as restricted-growth strings over the op nodes in topological order
// (node i joins one of the groups opened before it, or opens the next), so each set partition
// comes out once. A unary elementwise op whose producer is a fusable op is an epilogue, and both
// choices are enumerated: fused into its producer's group, or kept apart from it (in a kernel of
// its own or with its consumers, as a library matmul's epilogue must be), which marks the
// partition `epilogue_apart` so that the driver proves the best of each kind and the tuner
// measures them. A partition is kept when every group is connected and convex (no path leaves the
// group and comes back, so the groups can run one after another) and every group of two or more ops
// can be fused. That last rule prunes as nodes are placed, not at the leaves: an op that cannot be
// fused opens a group of its own, which nothing joins. Without it a graph of 20 ops, reshapes and
// concats among them, enumerated its Bell(20) strings for hours. What is left is still exponential
// in the fusable ops, so the walk also stops after max_partitions * kStepsPerPartition steps.
#include <algorithm>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "search/internal.h"
#include "support/error.h"

namespace yirage::search {
namespace {

bool fusable_op(const ir::Op& op) {
  // A library matmul is a call of the backend's BLAS, which cannot share a kernel.
  if (ir::is_library_matmul(op)) return false;
  return std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::UnaryOp>(op) ||
         std::holds_alternative<ir::BinaryOp>(op) || std::holds_alternative<ir::ReduceOp>(op) ||
         std::holds_alternative<ir::RmsNormOp>(op) || std::holds_alternative<ir::LayerNormOp>(op) ||
         std::holds_alternative<ir::SoftmaxOp>(op);
}

constexpr size_t kStepsPerPartition = 100;

}  // namespace

std::vector<Partition> enumerate_partitions(const ir::KernelGraph& graph, size_t max_partitions,
                                            bool* stopped_early) {
  const size_t n = graph.nodes().size();
  if (n > 64) fail("search: the graph has {} nodes; the search handles at most 64", n);
  std::vector<int32_t> ops;
  for (size_t id = 0; id < n; ++id)
    if (!std::holds_alternative<ir::InputOp>(graph.nodes()[id].op)) ops.push_back(int32_t(id));

  // Reachability (descendants) and undirected adjacency, as bitmasks over node ids.
  std::vector<uint64_t> reach(n, 0), adjacent(n, 0);
  for (size_t id = n; id-- > 0;)
    for (const ir::TensorRef& in : graph.nodes()[id].inputs) {
      reach[size_t(in.node)] |= (uint64_t(1) << id) | reach[id];
      adjacent[size_t(in.node)] |= uint64_t(1) << id;
      adjacent[id] |= uint64_t(1) << in.node;
    }
  // Transitive closure in reverse topological order needs the children's sets complete first.
  for (size_t id = n; id-- > 0;)
    for (size_t c = id + 1; c < n; ++c)
      if (reach[id] >> c & 1) reach[id] |= reach[c];

  auto valid_group = [&](uint64_t s) {
    const int size = __builtin_popcountll(s);
    if (size > 1)
      for (size_t id = 0; id < n; ++id)
        if ((s >> id & 1) && !fusable_op(graph.nodes()[id].op)) return false;
    uint64_t seen = s & (~s + 1), frontier = seen;
    while (frontier) {
      uint64_t next = 0;
      for (size_t id = 0; id < n; ++id)
        if (frontier >> id & 1) next |= adjacent[id] & s;
      frontier = next & ~seen;
      seen |= next;
    }
    if (seen != s) return false;
    uint64_t outside = 0;
    for (size_t id = 0; id < n; ++id)
      if (s >> id & 1) outside |= reach[id];
    outside &= ~s;
    for (size_t id = 0; id < n; ++id)
      if ((outside >> id & 1) && (reach[id] & s)) return false;
    return true;
  };

  std::vector<Partition> out;
  std::vector<int> label(n, -1);
  std::vector<bool> closed(n + 1, false);  // per group: holds an op that cannot be fused
  const size_t max_steps = max_partitions * kStepsPerPartition;
  size_t steps = 0;
  int epilogues_apart = 0;
  std::function<void(size_t, int)> assign = [&](size_t i, int groups) {
    if (out.size() >= max_partitions || ++steps > max_steps) return;
    if (i == ops.size()) {
      std::vector<uint64_t> masks(size_t(groups), 0);
      for (int32_t id : ops) masks[size_t(label[size_t(id)])] |= uint64_t(1) << id;
      for (uint64_t m : masks)
        if (!valid_group(m)) return;
      out.push_back({std::move(masks), epilogues_apart > 0});
      return;
    }
    const int32_t id = ops[i];
    const ir::Node& node = graph.node(id);
    const bool epilogue = std::holds_alternative<ir::UnaryOp>(node.op) &&
                          fusable_op(graph.node(node.inputs[0].node).op);
    const int producer = epilogue ? label[size_t(node.inputs[0].node)] : -1;
    if (epilogue) {
      label[size_t(id)] = producer;
      assign(i + 1, groups);
      ++epilogues_apart;
    }
    const bool fusable = fusable_op(node.op);
    for (int l = 0; l <= groups; ++l) {
      if (l == producer || (l < groups && (!fusable || closed[size_t(l)]))) continue;
      label[size_t(id)] = l;
      if (l == groups) closed[size_t(l)] = !fusable;
      assign(i + 1, std::max(groups, l + 1));
    }
    if (epilogue) --epilogues_apart;
  };
  assign(0, 0);
  if (stopped_early) *stopped_early = out.size() >= max_partitions || steps > max_steps;
  return out;
}

bool lone_op_searched(const ir::Op& op) {
  return fusable_op(op) &&
         (std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::SoftmaxOp>(op));
}

ir::KernelGraph build_mugraph(const ir::KernelGraph& graph, const std::vector<const Group*>& fused,
                              const std::vector<std::shared_ptr<const ir::BlockGraph>>& bodies,
                              const std::vector<std::shared_ptr<const ir::BlockGraph>>& finishes) {
  const size_t n = graph.nodes().size();
  std::vector<int> unit(n, -1);  // the fused group of a node, or -1
  for (size_t g = 0; g < fused.size(); ++g)
    for (int32_t id : fused[g]->nodes) unit[size_t(id)] = int(g);

  ir::KernelGraph out;
  std::map<ir::TensorRef, ir::TensorRef> mapped;
  std::vector<bool> emitted(n, false);
  auto free_name = [&](const std::string& want) {
    return out.find(want) < 0 ? want : std::string();
  };
  auto ready = [&](int32_t id) {
    std::vector<int32_t> members =
        unit[size_t(id)] < 0 ? std::vector<int32_t>{id} : fused[size_t(unit[size_t(id)])]->nodes;
    for (int32_t m : members)
      for (const ir::TensorRef& in : graph.node(m).inputs)
        if (unit[size_t(in.node)] != unit[size_t(id)] || unit[size_t(id)] < 0)
          if (!emitted[size_t(in.node)]) return false;
    return true;
  };
  // Kahn's algorithm over the groups and the remaining nodes, smallest node id first.
  for (size_t done = 0; done < n;) {
    int32_t pick = -1;
    for (size_t id = 0; id < n && pick < 0; ++id)
      if (!emitted[id] && ready(int32_t(id))) pick = int32_t(id);
    if (pick < 0) fail("search: the fusion groups form a cycle; a group is not convex");
    const int g = unit[size_t(pick)];
    const ir::Node& node = graph.node(pick);
    if (g < 0) {
      if (std::holds_alternative<ir::InputOp>(node.op)) {
        mapped[{pick, 0}] = out.input(node.name, node.outputs[0].dims, node.outputs[0].dtype);
      } else {
        std::vector<ir::TensorRef> inputs;
        for (const ir::TensorRef& in : node.inputs) inputs.push_back(mapped.at(in));
        std::vector<ir::TensorRef> results = out.add_node(node.op, inputs, free_name(node.name));
        for (size_t p = 0; p < results.size(); ++p) mapped[{pick, int32_t(p)}] = results[p];
      }
      emitted[size_t(pick)] = true;
      ++done;
      continue;
    }
    const Group& group = *fused[size_t(g)];
    std::vector<ir::TensorRef> inputs;
    for (size_t i = 0; i < group.operands.size(); ++i) {
      ir::TensorRef t = mapped.at(group.operands[i]);
      if (group.column[i]) {
        const ir::TensorType& type = out.type(t);
        t = out.add_node(ir::ReshapeOp{{type.dims[0], 1}}, {t},
                         free_name(out.node(t.node).name + "_column"))[0];
      }
      inputs.push_back(t);
    }
    std::vector<ir::TensorRef> results =
        out.add_node(ir::FusedOp{bodies[size_t(g)]}, inputs,
                     free_name("fused_" + graph.node(group.nodes[0]).name));
    if (size_t(g) < finishes.size() && finishes[size_t(g)])
      results = add_finish(out, finishes[size_t(g)], std::move(results),
                           free_name("finish_" + graph.node(group.nodes[0]).name));
    for (size_t k = 0; k < group.outputs.size(); ++k) mapped[group.outputs[k]] = results[k];
    for (int32_t m : group.nodes) emitted[size_t(m)] = true;
    done += group.nodes.size();
  }
  for (const ir::GraphOutput& o : graph.outputs()) out.mark_output(mapped.at(o.tensor), o.name);
  return out;
}

}  // namespace yirage::search
