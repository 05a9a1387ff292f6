// Graphviz rendering of block graphs: the block as a cluster, the for-loop body as a cluster
// inside it. Iterators and savers sit in the block's cluster around the loop, shaped as arrows
// in and out; accumulators and post-loop ops sit between the loop and the savers.
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/dot_util.h"

namespace yirage::ir {
namespace {

using dot_util::escape;

// "iterator operand=0 imap=[1, -1, -1] fmap=0", with the field names of the JSON format.
std::string block_op_text(const BlockOp& op) {
  return std::visit(Overloaded{
                        [](const InputIteratorOp& it) {
                          return fmt::format("iterator operand={} imap=[{}] fmap={}", it.operand,
                                             fmt::join(it.imap, ", "), it.fmap);
                        },
                        [](const ReduceToWidthOp& r) {
                          return fmt::format("reduce_to_width dim={} width={}", r.dim, r.width);
                        },
                        [&](const AccumulatorOp&) { return block_op_label(op); },
                        [](const OutputSaverOp& save) {
                          return fmt::format("save omap=[{}]", fmt::join(save.omap, ", "));
                        },
                        [](const auto& shared) { return dot_util::op_text(Op(shared)); },
                    },
                    op);
}

std::string node_line(const BlockGraph& graph, std::string_view prefix, int32_t id) {
  const BlockNode& node = graph.nodes()[size_t(id)];
  std::string shape;
  if (std::holds_alternative<InputIteratorOp>(node.op)) shape = ", shape=invhouse";
  if (std::holds_alternative<OutputSaverOp>(node.op)) shape = ", shape=house";
  if (std::holds_alternative<AccumulatorOp>(node.op)) shape = ", shape=box, style=rounded";
  return fmt::format("{} [label=\"b{}: {}\\n{}\"{}];\n", dot_util::block_node_id(prefix, id), id,
                     escape(block_op_text(node.op)), format_type(node.tile), shape);
}

}  // namespace

namespace dot_util {

std::string block_node_id(std::string_view prefix, int32_t node) {
  return fmt::format("{}b{}", prefix, node);
}

void write_block_cluster(std::ostream& out, const BlockGraph& graph, std::string_view prefix,
                         std::string_view title, std::string_view indent) {
  const GridDims& grid = graph.grid();
  out << fmt::format("{}subgraph cluster_{}block {{\n", indent, prefix);
  out << fmt::format("{}  label=\"{}grid [{}] ({} blocks)\";\n", indent, title,
                     fmt::join(grid.extent, ", "), grid.blocks());
  out << fmt::format("{}  subgraph cluster_{}loop {{\n", indent, prefix);
  out << fmt::format("{}    label=\"for-loop: {} iterations\";\n", indent, graph.forloop_range());
  out << fmt::format("{}    style=dashed;\n", indent);
  const auto& nodes = graph.nodes();
  for (size_t id = 0; id < nodes.size(); ++id)
    if (graph.phase(int32_t(id)) == BlockPhase::in_loop &&
        !std::holds_alternative<InputIteratorOp>(nodes[id].op))
      out << indent << "    " << node_line(graph, prefix, int32_t(id));
  out << indent << "  }\n";
  for (size_t id = 0; id < nodes.size(); ++id)
    if (graph.phase(int32_t(id)) != BlockPhase::in_loop ||
        std::holds_alternative<InputIteratorOp>(nodes[id].op))
      out << indent << "  " << node_line(graph, prefix, int32_t(id));
  for (size_t id = 0; id < nodes.size(); ++id)
    for (int32_t in : nodes[id].inputs)
      out << fmt::format("{}  {} -> {};\n", indent, block_node_id(prefix, in),
                         block_node_id(prefix, int32_t(id)));
  out << indent << "}\n";
}

}  // namespace dot_util

std::string to_dot(const BlockGraph& graph) {
  std::ostringstream out;
  out << "digraph block_graph {\n";
  out << "  node [shape=box, fontname=\"Helvetica\"];\n";
  dot_util::write_block_cluster(out, graph, "", "", "  ");
  for (size_t i = 0; i < graph.operands().size(); ++i)
    out << fmt::format("  operand{} [shape=ellipse, label=\"operand {}\\n{}\"];\n", i, i,
                       format_type(graph.operands()[i]));
  const std::vector<TensorType> outputs = graph.output_types();
  size_t next_output = 0;
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const BlockOp& op = graph.nodes()[id].op;
    if (const auto* it = std::get_if<InputIteratorOp>(&op))
      out << fmt::format("  operand{} -> {};\n", it->operand,
                         dot_util::block_node_id("", int32_t(id)));
    if (std::holds_alternative<OutputSaverOp>(op)) {
      const size_t k = next_output++;
      out << fmt::format("  output{} [shape=plaintext, label=\"output {}: {}\"];\n", k, k,
                         format_type(outputs[k]));
      out << fmt::format("  {} -> output{};\n", dot_util::block_node_id("", int32_t(id)), k);
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace yirage::ir
