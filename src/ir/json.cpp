// Kernel graphs as JSON: the file format of YiRage programs.
//
// Layout, version 1:
//   {"schema": "yirage.kernel_graph", "version": 1, "nodes": [...], "outputs": [...]}
//
// "nodes" lists the nodes in topological order: a node may only read nodes listed before it.
// Every node has
//   "name"    string, unique in the graph.
//   "op"      one of the names of ops.h op_name(): input, matmul, exp, silu, ..., rope.
//   "inputs"  array of tensor refs (absent on input nodes). A ref is "node" for the node's first
//             output and "node:port" for another one ("parts:1"). A ref is split at its last ':'
//             only when a decimal number follows, so the writer appends ":0" to a name that
//             itself contains ':' to keep the ref unambiguous.
//   "dtype", "shape"  the result type. Required on input nodes. Optional on other nodes, where a
//             present value must equal the inferred one: it documents and checks a hand-written
//             file. split and fused have a varying number of results and write "outputs":
//             [{"dtype", "shape"}, ...] instead.
// plus the attributes of its op:
//   matmul             "library" (default false): true makes it a call of the backend's BLAS
//                      library (ops.h MatmulOp); written only when true, so files and
//                      structural hashes of graphs without it are unchanged
//   mul_scalar         "scalar" (number)
//   sum, mean, max     "dim" (integer, negative counts from the end), "keepdim" (default true)
//   rms_norm           "normalized_shape", "eps" (default 1e-6), "has_weight"
//   layer_norm         "normalized_shape", "eps" (default 1e-5), "has_weight", "has_bias"
//   softmax, concat    "dim"
//   split              "dim", "sizes"
//   reshape            "shape": the target shape, which is also the result shape; on load one
//                      entry may be -1 and is inferred from the element count.
//   permute            "perm": output dim i is input dim perm[i]
//   rope               "theta" (default 10000), "style": "interleaved" (default) or "neox"
//   fused              "body": the fused kernel's block graph (block_json.cpp documents it); the
//                      node's inputs are its operands, its results one per saver
// The norms' optional operands follow x in the order weight, bias. When "has_weight"/"has_bias"
// are absent they are implied by the operand count (2 operands: a weight; 3: weight and bias);
// a layer_norm with a bias but no weight must say so explicitly.
//
// "outputs" lists the graph outputs in order: {"tensor": ref, "name": string}; "name" is optional
// and defaults as in KernelGraph::mark_output.
//
// The writer emits every field but a false "library", with axes normalised, so that a saved graph
// loads back to the same JSON text; save_kernel_graph prints a node on one line when it fits in 100
// columns. The reader rejects unknown fields and duplicate keys, since a misspelled "kepdim"
// silently taking its default would change the program without a word. Every error names the JSON
// path of the offending value, e.g. `$.nodes[3].inputs[1]: ...`.
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/json_util.h"
#include "ir/serialize.h"
#include "support/error.h"

namespace yirage::ir {
namespace {

using namespace json_util;

constexpr std::string_view kSchema = "yirage.kernel_graph";

// ---------------------------------------------------------------------------------------------
// Writing

std::string ref_text(const KernelGraph& graph, TensorRef ref) {
  const std::string& name = graph.node(ref.node).name;
  if (ref.port == 0 && name.find(':') == std::string::npos) return name;
  return fmt::format("{}:{}", name, ref.port);
}

// Ops whose result count varies write "outputs": [{"dtype", "shape"}, ...] rather than one type.
bool has_result_list(const Op& op) {
  return std::holds_alternative<SplitOp>(op) || std::holds_alternative<FusedOp>(op);
}

ordered_json node_json(const KernelGraph& graph, const Node& node) {
  ordered_json j;
  j["name"] = node.name;
  j["op"] = op_name(node.op);
  if (std::holds_alternative<InputOp>(node.op)) {
    write_type(j, node.outputs[0]);
    return j;
  }
  ordered_json inputs = ordered_json::array();
  for (TensorRef ref : node.inputs) inputs.push_back(ref_text(graph, ref));
  j["inputs"] = std::move(inputs);
  write_attributes(j, node.op);
  if (has_result_list(node.op)) {
    ordered_json results = ordered_json::array();
    for (const TensorType& type : node.outputs) {
      ordered_json r;
      write_type(r, type);
      results.push_back(std::move(r));
    }
    j["outputs"] = std::move(results);
  } else {
    write_type(j, node.outputs[0]);
  }
  return j;
}

// Built with ordered_json so that saved files read "name", "op", "inputs" first.
ordered_json graph_json(const KernelGraph& graph) {
  ordered_json doc;
  doc["schema"] = kSchema;
  doc["version"] = kKernelGraphSchemaVersion;
  ordered_json nodes = ordered_json::array();
  for (const Node& node : graph.nodes()) nodes.push_back(node_json(graph, node));
  doc["nodes"] = std::move(nodes);
  ordered_json outputs = ordered_json::array();
  for (const GraphOutput& out : graph.outputs())
    outputs.push_back({{"tensor", ref_text(graph, out.tensor)}, {"name", out.name}});
  doc["outputs"] = std::move(outputs);
  return doc;
}

// nlohmann's dump(2) gives every dim of a shape a line of its own, which buries the program. This
// prints a value on one line when it fits and otherwise one element per line, so that a graph
// file reads one node per line, as in the README.
constexpr size_t kLineWidth = 100;

std::string one_line(const ordered_json& j) {
  std::vector<std::string> parts;
  if (j.is_array()) {
    for (const ordered_json& e : j) parts.push_back(one_line(e));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  if (j.is_object()) {
    for (const auto& [key, value] : j.items())
      parts.push_back(fmt::format("{}: {}", ordered_json(key).dump(), one_line(value)));
    return fmt::format("{{{}}}", fmt::join(parts, ", "));
  }
  return j.dump();
}

// Appends `j`, which starts at `column` of a line indented by `indent`.
void append_pretty(std::string& out, const ordered_json& j, size_t indent, size_t column) {
  std::string flat = one_line(j);
  if (!j.is_structured() || column + flat.size() + 1 <= kLineWidth) {  // + 1: a trailing comma
    out += flat;
    return;
  }
  const std::string inner(indent + 2, ' ');
  out += j.is_array() ? "[\n" : "{\n";
  size_t i = 0;
  for (const auto& [key, value] : j.items()) {
    out += inner;
    size_t start = inner.size();
    if (j.is_object()) {
      std::string label = ordered_json(key).dump() + ": ";
      out += label;
      start += label.size();
    }
    append_pretty(out, value, inner.size(), start);
    out += ++i < j.size() ? ",\n" : "\n";
  }
  out += std::string(indent, ' ') + (j.is_array() ? "]" : "}");
}

// ---------------------------------------------------------------------------------------------
// Reading ops

Fields allowed_node_fields(const Op& op) {
  if (std::holds_alternative<InputOp>(op)) return {"name", "op", "dtype", "shape"};
  Fields fields = attribute_fields(op);
  fields.insert({"name", "op", "inputs"});
  if (has_result_list(op)) {
    fields.insert("outputs");
  } else {
    fields.insert({"dtype", "shape"});
  }
  return fields;
}

// Splits "name:port" at the last ':' when a decimal number follows; otherwise the whole text
// is a name.
std::pair<std::string, std::optional<std::string>> split_ref(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return {text, std::nullopt};
  std::string port = text.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos) return {text, std::nullopt};
  return {text.substr(0, colon), port};
}

class GraphReader {
 public:
  explicit GraphReader(const json& doc) : doc_(doc, "$") {}

  KernelGraph read() {
    check_header();
    const std::string nodes_path = doc_.path("nodes");
    const json& nodes = get_array(doc_.at("nodes"), nodes_path);
    index_names(nodes);
    for (size_t i = 0; i < nodes.size(); ++i) read_node(Object(nodes[i], item_path("$.nodes", i)));
    const std::string outputs_path = doc_.path("outputs");
    const json& outputs = get_array(doc_.at("outputs"), outputs_path);
    for (size_t i = 0; i < outputs.size(); ++i)
      read_output(Object(outputs[i], item_path("$.outputs", i)));
    return std::move(graph_);
  }

 private:
  void check_header() const {
    std::string schema = get_string(doc_.at("schema"), doc_.path("schema"));
    if (schema != kSchema)
      fail("{}: expected \"{}\", got \"{}\"; this is not a YiRage kernel graph",
           doc_.path("schema"), kSchema, schema);
    const json& version = doc_.at("version");
    if (!version.is_number_integer() || version.get<int64_t>() != kKernelGraphSchemaVersion)
      fail("{}: unsupported version {}; this build reads version {}", doc_.path("version"),
           version.dump(), kKernelGraphSchemaVersion);
    doc_.reject_unknown_fields({"schema", "version", "nodes", "outputs"}, "a kernel graph");
  }

  // Remembers where each name is defined so that a reference to a later node can say so.
  void index_names(const json& nodes) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].is_object())
        if (auto it = nodes[i].find("name"); it != nodes[i].end() && it->is_string())
          json_index_.try_emplace(it->get<std::string>(), i);
  }

  void read_node(const Object& node) {
    std::string name = get_string(node.at("name"), node.path("name"));
    if (name.empty()) fail("{}: a node name must not be empty", node.path("name"));
    if (int32_t first = graph_.find(name); first >= 0)
      fail("{}: duplicate node name \"{}\"; first defined at $.nodes[{}]", node.path("name"), name,
           first);
    Op op = op_from_name(get_string(node.at("op"), node.path("op")), node.path("op"));
    node.reject_unknown_fields(allowed_node_fields(op),
                               fmt::format("a node with op \"{}\"", op_name(op)));
    if (std::holds_alternative<InputOp>(op)) {
      Dims dims = get_dims(node.at("shape"), node.path("shape"));
      DType dtype = get_dtype(node.at("dtype"), node.path("dtype"));
      try {
        graph_.input(std::move(name), std::move(dims), dtype);
      } catch (const Error& e) {
        fail("{}: {}", node.path(), e.what());
      }
      return;
    }
    const std::string inputs_path = node.path("inputs");
    const json& inputs = get_array(node.at("inputs"), inputs_path);
    std::vector<TensorRef> operands;
    for (size_t i = 0; i < inputs.size(); ++i)
      operands.push_back(resolve(inputs[i], item_path(node.path("inputs"), i), name));
    read_attributes(op, node, operands.size());
    try {
      graph_.add_node(std::move(op), std::move(operands), std::move(name));
    } catch (const Error& e) {
      fail("{}: {}", node.path(), e.what());
    }
    check_results(node, graph_.nodes().back());
  }

  void check_results(const Object& object, const Node& node) const {
    if (!has_result_list(node.op)) {
      check_declared_type(object, node.outputs[0], !std::holds_alternative<ReshapeOp>(node.op));
      return;
    }
    const json* results = object.find("outputs");
    if (!results) return;
    std::string path = object.path("outputs");
    if (get_array(*results, path).size() != node.outputs.size())
      fail("{}: declares {} results, but the {} produces {}", path, results->size(),
           op_name(node.op), node.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      Object result((*results)[i], item_path(path, i));
      result.reject_unknown_fields({"dtype", "shape"}, "a result type");
      check_declared_type(result, node.outputs[i], true);
    }
  }

  // `reader` is the name of the node whose operand this is; empty for a graph output.
  TensorRef resolve(const json& v, const std::string& path, std::string_view reader) const {
    std::string text = get_string(v, path);
    auto [name, port_text] = split_ref(text);
    int32_t id = graph_.find(name);
    if (id < 0) {
      if (!reader.empty() && name == reader)
        fail("{}: node \"{}\" reads its own output (a cycle)", path, name);
      if (auto later = json_index_.find(name); later != json_index_.end())
        fail(
            "{}: \"{}\" is defined later, at $.nodes[{}]; a node may only read nodes listed "
            "before it (forward reference or cycle)",
            path, name, later->second);
      fail("{}: unknown tensor \"{}\": no node is named \"{}\"", path, text, name);
    }
    const Node& node = graph_.node(id);
    int32_t port = 0;
    if (port_text) {
      auto [end, ec] =
          std::from_chars(port_text->data(), port_text->data() + port_text->size(), port);
      if (ec != std::errc() || size_t(port) >= node.outputs.size())
        fail("{}: node \"{}\" has {} output{}, so port {} does not exist", path, name,
             node.outputs.size(), node.outputs.size() == 1 ? "" : "s", *port_text);
    }
    return {id, port};
  }

  void read_output(const Object& output) {
    output.reject_unknown_fields({"tensor", "name"}, "a graph output");
    TensorRef tensor = resolve(output.at("tensor"), output.path("tensor"), {});
    std::string name;
    if (const json* v = output.find("name")) name = get_string(*v, output.path("name"));
    try {
      graph_.mark_output(tensor, std::move(name));
    } catch (const Error& e) {
      fail("{}: {}", output.path(), e.what());
    }
  }

  Object doc_;
  KernelGraph graph_;
  std::unordered_map<std::string, size_t> json_index_;
};

// nlohmann keeps the last of two equal keys without a word; a repeated "dim" in a hand-edited
// file is as much a typo as a misspelled one. This parse callback tracks the JSON path so that
// the error can name it.
class DuplicateKeyCheck {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    using Event = json::parse_event_t;
    switch (event) {
      case Event::object_start: open(false); break;
      case Event::array_start: open(true); break;
      case Event::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.key).second)
          fail("{}: duplicate key \"{}\"", frame.path, frame.key);
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Event::value: element_done(); break;
    }
    return true;
  }

 private:
  struct Frame {
    std::string path;
    bool is_array = false;
    size_t next_index = 0;
    std::string key;
    std::set<std::string> keys;
  };

  void open(bool is_array) {
    Frame frame;
    frame.path = child_path();
    frame.is_array = is_array;
    frames_.push_back(std::move(frame));
  }

  std::string child_path() const {
    if (frames_.empty()) return "$";
    const Frame& f = frames_.back();
    return f.is_array ? item_path(f.path, f.next_index) : fmt::format("{}.{}", f.path, f.key);
  }

  void element_done() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().next_index;
  }

  std::vector<Frame> frames_;
};

// Drops nlohmann's "[json.exception.parse_error.101] " prefix, which means nothing to a user.
std::string without_exception_id(const std::string& what) {
  size_t end = what.find("] ");
  return what.starts_with("[json.exception.") && end != std::string::npos ? what.substr(end + 2)
                                                                          : what;
}

}  // namespace

nlohmann::json to_json(const KernelGraph& graph) {
  return nlohmann::json(graph_json(graph));
}

KernelGraph from_json(const nlohmann::json& doc) {
  return GraphReader(doc).read();
}

KernelGraph parse_kernel_graph(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text, DuplicateKeyCheck());
  } catch (const json::parse_error& e) {
    // The detail reads "parse error at line 1, column 5: syntax error while parsing ...".
    std::string detail = without_exception_id(e.what());
    constexpr std::string_view kPrefix = "parse error at ";
    if (detail.starts_with(kPrefix)) detail.erase(0, kPrefix.size());
    fail("JSON syntax error at byte {}: {}", e.byte, detail);
  } catch (const json::exception& e) {  // a number too large for a double
    fail("JSON syntax error: {}", without_exception_id(e.what()));
  }
  return from_json(doc);
}

KernelGraph load_kernel_graph(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("{}: cannot open for reading: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail("{}: cannot read: {}", path, std::strerror(errno));
  try {
    return parse_kernel_graph(text.str());
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

void save_kernel_graph(const KernelGraph& graph, const std::string& path) {
  std::string text;
  try {
    append_pretty(text, graph_json(graph), 0, 0);
    text += "\n";
  } catch (const json::exception& e) {
    // Node and output names are the only free text; JSON requires them to be valid UTF-8.
    fail("{}: cannot save the graph: {}", path, without_exception_id(e.what()));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  file << text;
  file.close();
  if (!file) fail("{}: cannot write: {}", path, std::strerror(errno));
}

}  // namespace yirage::ir
