// Block graphs as JSON: the body of a fused kernel in a kernel-graph file.
//
// Layout:
//   {"grid": [x, y, z], "forloop_range": R, "operands": [{"dtype", "shape"}, ...], "nodes": [...]}
//
// "operands" are the types of the fused node's kernel-level operands, in order. "nodes" lists the
// block nodes in order; a node is named by its index, and "inputs" (absent on iterators) lists the
// indices of its operands, which must come before it. Every node has "op" and its fields:
//   iterator          "operand" (index into "operands"), "imap" (3 entries, one per grid axis: the
//                     operand dim that axis partitions, or -1 to replicate), "fmap" (the dim the
//                     for-loop walks, or -1)
//   reduce_to_width   "dim", "width"
//   accum             "fn": sum, mean, rms, max or rescaled_sum; "eps" (written for rms, optional
//                     on reading, default 0)
//   save              "omap" (3 entries: the output dim each grid axis is laid out on, or -1)
//   matmul, exp, ..., sum, mean, max, rms_norm, concat: the kernel-level ops that run on tiles,
//                     with the attribute fields of the kernel-graph format (json.cpp)
// plus "dtype" and "shape": the node's tile type, optional on reading, where a present value must
// equal the inferred one. As for kernel graphs, the writer emits every field, the reader rejects
// unknown fields, and every error names the JSON path of the offending value.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/block_graph.h"
#include "ir/json_util.h"
#include "support/error.h"

namespace yirage::ir {
namespace {

using namespace json_util;

constexpr AccumFn kAccumFns[] = {AccumFn::sum, AccumFn::mean, AccumFn::rms, AccumFn::max,
                                 AccumFn::rescaled_sum};
constexpr std::string_view kBlockOnlyOps[] = {"iterator", "reduce_to_width", "accum", "save"};

// ---------------------------------------------------------------------------------------------
// Writing

ordered_json block_node_json(const BlockNode& node) {
  ordered_json j;
  j["op"] = block_op_name(node.op);
  if (!node.inputs.empty()) j["inputs"] = node.inputs;
  std::visit(Overloaded{
                 [&](const InputIteratorOp& it) {
                   j["operand"] = it.operand;
                   j["imap"] = it.imap;
                   j["fmap"] = it.fmap;
                 },
                 [&](const ReduceToWidthOp& r) {
                   j["dim"] = r.dim;
                   j["width"] = r.width;
                 },
                 [&](const AccumulatorOp& acc) {
                   j["fn"] = accum_name(acc.fn);
                   if (acc.fn == AccumFn::rms) j["eps"] = acc.eps;
                 },
                 [&](const OutputSaverOp& save) { j["omap"] = save.omap; },
                 [&](const auto& shared) { write_attributes(j, Op(shared)); },
             },
             node.op);
  write_type(j, node.tile);
  return j;
}

// ---------------------------------------------------------------------------------------------
// Reading

AxisMap get_axis_map(const json& v, const std::string& path) {
  std::vector<int> entries = get_ints(v, path);
  if (entries.size() != size_t(kGridAxes))
    fail("{}: expected {} entries, one per grid axis (x, y, z), got {}", path, kGridAxes,
         entries.size());
  return {entries[0], entries[1], entries[2]};
}

AccumFn get_accum_fn(const json& v, const std::string& path) {
  std::string name = get_string(v, path);
  std::vector<std::string_view> valid;
  for (AccumFn fn : kAccumFns) {
    if (accum_name(fn) == name) return fn;
    valid.push_back(accum_name(fn));
  }
  fail("{}: unknown accumulator function \"{}\"; valid functions: {}", path, name,
       fmt::join(valid, ", "));
}

// The kernel-level op named `name` when it may run on tiles.
std::optional<Op> shared_op_named(const std::string& name) {
  for (const Op& op : op_prototypes())
    if (op_name(op) == name && shared_block_op(op)) return op;
  return std::nullopt;
}

[[noreturn]] void unknown_block_op(const std::string& name, const std::string& path) {
  std::vector<std::string_view> valid(std::begin(kBlockOnlyOps), std::end(kBlockOnlyOps));
  for (const Op& op : op_prototypes())
    if (shared_block_op(op)) valid.push_back(op_name(op));
  fail("{}: \"{}\" is not a block op; valid block ops: {}", path, name, fmt::join(valid, ", "));
}

class BlockGraphReader {
 public:
  BlockGraphReader(const json& doc, const std::string& path) : doc_(doc, path) {}

  BlockGraph read() {
    doc_.reject_unknown_fields({"grid", "forloop_range", "operands", "nodes"}, "a block graph");
    BlockGraph graph = make_graph();
    const std::string nodes_path = doc_.path("nodes");
    const json& nodes = get_array(doc_.at("nodes"), nodes_path);
    for (size_t i = 0; i < nodes.size(); ++i)
      read_node(graph, Object(nodes[i], item_path(doc_.path("nodes"), i)));
    return graph;
  }

 private:
  BlockGraph make_graph() const {
    const std::string grid_path = doc_.path("grid");
    Dims extents = get_dims(doc_.at("grid"), grid_path);
    if (extents.size() != size_t(kGridAxes))
      fail("{}: expected {} extents (x, y, z), got {}", grid_path, kGridAxes, extents.size());
    int64_t range = get_int64(doc_.at("forloop_range"), doc_.path("forloop_range"));
    const std::string operands_path = doc_.path("operands");
    const json& operands = get_array(doc_.at("operands"), operands_path);
    std::vector<TensorType> types;
    for (size_t i = 0; i < operands.size(); ++i) {
      Object operand(operands[i], item_path(operands_path, i));
      operand.reject_unknown_fields({"dtype", "shape"}, "an operand type");
      types.push_back({get_dtype(operand.at("dtype"), operand.path("dtype")),
                       get_dims(operand.at("shape"), operand.path("shape"))});
    }
    try {
      return BlockGraph({{extents[0], extents[1], extents[2]}}, range, std::move(types));
    } catch (const Error& e) {
      fail("{}: {}", doc_.path(), e.what());
    }
  }

  void read_node(BlockGraph& graph, const Object& node) const {
    const std::string name = get_string(node.at("op"), node.path("op"));
    BlockOp op = read_op(name, node);
    std::vector<int32_t> inputs;
    if (!std::holds_alternative<InputIteratorOp>(op)) inputs = read_inputs(graph, node);
    if (auto shared = shared_kernel_op(op)) {
      read_attributes(*shared, node, inputs.size());
      op = *shared_block_op(*shared);
    }
    try {
      graph.add(std::move(op), std::move(inputs));
    } catch (const Error& e) {
      fail("{}: {}", node.path(), e.what());
    }
    check_declared_type(node, graph.nodes().back().tile, true);
  }

  // The op with its block-only attributes read; a shared op's attributes are read later, once
  // its operand count is known.
  static BlockOp read_op(const std::string& name, const Object& node) {
    const std::string what = fmt::format("a block node with op \"{}\"", name);
    if (name == "iterator") {
      node.reject_unknown_fields({"op", "operand", "imap", "fmap", "dtype", "shape"}, what);
      return InputIteratorOp{get_int(node.at("operand"), node.path("operand")),
                             get_axis_map(node.at("imap"), node.path("imap")),
                             get_int(node.at("fmap"), node.path("fmap"))};
    }
    if (name == "reduce_to_width") {
      node.reject_unknown_fields({"op", "inputs", "dim", "width", "dtype", "shape"}, what);
      return ReduceToWidthOp{get_int(node.at("dim"), node.path("dim")),
                             get_int64(node.at("width"), node.path("width"))};
    }
    if (name == "accum") {
      node.reject_unknown_fields({"op", "inputs", "fn", "eps", "dtype", "shape"}, what);
      AccumulatorOp acc{get_accum_fn(node.at("fn"), node.path("fn"))};
      if (const json* eps = node.find("eps")) acc.eps = get_number(*eps, node.path("eps"));
      return acc;
    }
    if (name == "save") {
      node.reject_unknown_fields({"op", "inputs", "omap", "dtype", "shape"}, what);
      return OutputSaverOp{get_axis_map(node.at("omap"), node.path("omap"))};
    }
    std::optional<Op> shared = shared_op_named(name);
    if (!shared) unknown_block_op(name, node.path("op"));
    Fields fields = attribute_fields(*shared);
    fields.insert({"op", "inputs", "dtype", "shape"});
    node.reject_unknown_fields(fields, what);
    return *shared_block_op(*shared);
  }

  static std::vector<int32_t> read_inputs(const BlockGraph& graph, const Object& node) {
    const std::string path = node.path("inputs");
    const size_t defined = graph.nodes().size();
    std::vector<int32_t> inputs;
    for (int in : get_ints(node.at("inputs"), path)) {
      if (in < 0 || size_t(in) >= defined)
        fail("{}: block node {} is not listed before this node; a node reads only earlier nodes",
             item_path(path, inputs.size()), in);
      inputs.push_back(in);
    }
    return inputs;
  }

  Object doc_;
};

}  // namespace

namespace json_util {

ordered_json block_graph_json(const BlockGraph& graph) {
  ordered_json doc;
  doc["grid"] = graph.grid().extent;
  doc["forloop_range"] = graph.forloop_range();
  ordered_json operands = ordered_json::array();
  for (const TensorType& type : graph.operands()) {
    ordered_json operand;
    write_type(operand, type);
    operands.push_back(std::move(operand));
  }
  doc["operands"] = std::move(operands);
  ordered_json nodes = ordered_json::array();
  for (const BlockNode& node : graph.nodes()) nodes.push_back(block_node_json(node));
  doc["nodes"] = std::move(nodes);
  return doc;
}

}  // namespace json_util

nlohmann::json to_json(const BlockGraph& graph) {
  return nlohmann::json(json_util::block_graph_json(graph));
}

BlockGraph block_graph_from_json(const nlohmann::json& doc, const std::string& path) {
  return BlockGraphReader(doc, path).read();
}

}  // namespace yirage::ir
