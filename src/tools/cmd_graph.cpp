// `yirage graph show`: a kernel graph file as text, DOT or SVG.
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"
#include "tools/commands.h"

namespace yirage::tools {
namespace {

using ir::Overloaded;

std::string tensor_name(const ir::KernelGraph& graph, ir::TensorRef t) {
  const std::string& node = graph.node(t.node).name;
  return t.port == 0 ? node : fmt::format("{}:{}", node, t.port);
}

std::string flags(std::initializer_list<std::pair<bool, std::string_view>> named) {
  std::string text;
  for (auto [on, name] : named)
    if (on) text += fmt::format(", {}", name);
  return text;
}

// The attributes of an op, "" for ops without any.
std::string attributes(const ir::Op& op) {
  return std::visit(
      Overloaded{
          [](const ir::UnaryOp& u) {
            return u.fn == ir::UnaryFn::mul_scalar ? fmt::format("scalar={}", u.scalar)
                                                   : std::string();
          },
          [](const ir::ReduceOp& r) { return fmt::format("dim={}, keepdim={}", r.dim, r.keepdim); },
          [](const ir::RmsNormOp& n) {
            return fmt::format("normalized_shape={}, eps={}{}", ir::format_dims(n.normalized_shape),
                               n.eps, flags({{n.has_weight, "weight"}}));
          },
          [](const ir::LayerNormOp& n) {
            return fmt::format("normalized_shape={}, eps={}{}", ir::format_dims(n.normalized_shape),
                               n.eps, flags({{n.has_weight, "weight"}, {n.has_bias, "bias"}}));
          },
          [](const ir::SoftmaxOp& s) { return fmt::format("dim={}", s.dim); },
          [](const ir::ConcatOp& c) { return fmt::format("dim={}", c.dim); },
          [](const ir::SplitOp& s) {
            return fmt::format("dim={}, sizes={}", s.dim, ir::format_dims(s.sizes));
          },
          [](const ir::ReshapeOp& r) { return fmt::format("shape={}", ir::format_dims(r.shape)); },
          [](const ir::PermuteOp& p) { return fmt::format("perm=[{}]", fmt::join(p.perm, ", ")); },
          [](const ir::RopeOp& r) {
            return fmt::format("theta={}, style={}", r.theta, ir::rope_style_name(r.style));
          },
          [](const ir::QuantMatmulOp& q) {
            return fmt::format("format={}{}", ir::quant_format_name(q.format),
                               q.prefetch ? "" : ", no prefetch");
          },
          [](const ir::PagedAttentionOp& a) {
            return fmt::format("block_tokens={}", a.block_tokens);
          },
          [](const auto&) { return std::string(); },
      },
      op);
}

std::string node_line(const ir::KernelGraph& graph, const ir::Node& node) {
  std::vector<std::string> types, operands;
  for (const ir::TensorType& type : node.outputs) types.push_back(ir::format_type(type));
  for (ir::TensorRef operand : node.inputs) operands.push_back(tensor_name(graph, operand));
  std::string call(ir::op_name(node.op));
  if (std::string attrs = attributes(node.op); !attrs.empty()) call += fmt::format("({})", attrs);
  if (!std::holds_alternative<ir::InputOp>(node.op))
    call += fmt::format("({})", fmt::join(operands, ", "));
  return fmt::format("{} = {} : {}", node.name, call, fmt::join(types, ", "));
}

void print_listing(const std::string& file, const ir::KernelGraph& graph) {
  fmt::print("graph {}\n", file);
  fmt::print("structural hash: {}\n", ir::structural_hash_hex(graph));
  std::vector<std::string> inputs;
  for (ir::TensorRef input : graph.inputs())
    inputs.push_back(
        fmt::format("{} {}", tensor_name(graph, input), ir::format_type(graph.type(input))));
  fmt::print("inputs: {}\n", fmt::join(inputs, ", "));
  fmt::print("nodes:\n");
  for (const ir::Node& node : graph.nodes()) fmt::print("  {}\n", node_line(graph, node));
  fmt::print("outputs:\n");
  for (const ir::GraphOutput& output : graph.outputs())
    fmt::print("  {} = {} : {}\n", output.name, tensor_name(graph, output.tensor),
               ir::format_type(graph.type(output.tensor)));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail("{}: cannot write the file", path);
}

struct ShowOptions {
  std::string file, dot, svg;
};

void show(const ShowOptions& options) {
  ir::KernelGraph graph = ir::load_kernel_graph(options.file);
  print_listing(options.file, graph);
  if (!options.dot.empty()) {
    write_text(options.dot, ir::to_dot(graph));
    fmt::print("wrote {}\n", options.dot);
  }
  if (!options.svg.empty()) {
    ir::write_svg(ir::to_dot(graph), options.svg);
    fmt::print("wrote {}\n", options.svg);
  }
}

struct SourceOptions {
  std::string file, backend, out;
};

// The code a backend generates for the graph, as that backend's JSON; also for a backend that
// cannot run here, since generating code needs no device.
void source(const SourceOptions& options) {
  ir::KernelGraph graph = ir::load_kernel_graph(options.file);
  const std::string text = backend::find_backend(options.backend).generated_source(graph).dump(1);
  if (options.out.empty())
    fmt::print("{}\n", text);
  else
    write_text(options.out, text + "\n");
}

}  // namespace

void add_graph_command(CLI::App& app) {
  CLI::App* graph = app.add_subcommand("graph", "Inspect kernel graph files");
  graph->require_subcommand(1);
  CLI::App* command = graph->add_subcommand("show", "Print a kernel graph; optionally render it");
  auto options = std::make_shared<ShowOptions>();
  command->add_option("file", options->file, "Kernel graph JSON file")->required();
  command->add_option("--dot", options->dot, "Also write Graphviz DOT to this file");
  command->add_option("--svg", options->svg, "Also render SVG to this file (needs graphviz)");
  command->callback([options] { show(*options); });

  CLI::App* generated = graph->add_subcommand(
      "source", "Print the code a backend generates for a graph (JSON), even where it cannot run");
  auto source_options = std::make_shared<SourceOptions>();
  generated->add_option("file", source_options->file, "Kernel graph JSON file")->required();
  generated->add_option("--backend", source_options->backend, "Backend whose code to show")
      ->required();
  generated->add_option("-o,--out", source_options->out, "Write the JSON to this file");
  generated->callback([source_options] { source(*source_options); });
}

}  // namespace yirage::tools
