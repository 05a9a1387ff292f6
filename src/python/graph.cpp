// yirage.KernelGraph and yirage.Tensor: building kernel graphs from Python with the seeds' and
// Mirage's names. Every builder goes through ir::KernelGraph, which checks the operands and
// infers the result type, so a bad program fails at the call that breaks a rule, with the IR's
// one-line message.
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "python/bindings.h"
#include "support/error.h"

namespace yirage::python {
namespace {

using namespace nb::literals;

// Tensors carry their graph; mixing graphs would wire a node to another graph's node ids.
ir::TensorRef ref_in(const Graph& g, const Tensor& t, std::string_view op) {
  if (t.graph != g.graph)
    fail("{}: tensor '{}' belongs to another graph; build each graph from its own tensors", op,
         t.name());
  return t.ref;
}

Tensor wrap(const Graph& g, ir::TensorRef ref) {
  return Tensor{g.graph, ref};
}

std::string fresh_input_name(const ir::KernelGraph& graph) {
  for (size_t i = graph.inputs().size();; ++i) {
    std::string name = fmt::format("input{}", i);
    if (graph.find(name) < 0) return name;
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail("{}: cannot write the file", path);
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

ir::ReduceFn reduce_fn(std::string_view kind) {
  if (kind == "sum") return ir::ReduceFn::sum;
  if (kind == "mean") return ir::ReduceFn::mean;
  if (kind == "max") return ir::ReduceFn::max;
  fail("reduction: kind '{}' is not one of sum, mean, max", kind);
}

struct UnaryEntry {
  const char* name;
  ir::UnaryFn fn;
  const char* doc;
};

constexpr UnaryEntry kUnary[] = {
    {"exp", ir::UnaryFn::exp, "Elementwise e**x."},
    {"silu", ir::UnaryFn::silu, "Elementwise x * sigmoid(x)."},
    {"gelu", ir::UnaryFn::gelu, "Elementwise GELU, the exact erf form."},
    {"relu", ir::UnaryFn::relu, "Elementwise max(x, 0)."},
    {"sqrt", ir::UnaryFn::sqrt, "Elementwise square root."},
    {"rsqrt", ir::UnaryFn::rsqrt, "Elementwise 1 / sqrt(x)."},
    {"square", ir::UnaryFn::square, "Elementwise x * x."},
    {"neg", ir::UnaryFn::neg, "Elementwise -x."},
    {"reciprocal", ir::UnaryFn::reciprocal, "Elementwise 1 / x."},
};

struct BinaryEntry {
  const char* name;
  ir::BinaryFn fn;
  const char* doc;
};

constexpr BinaryEntry kBinary[] = {
    {"add", ir::BinaryFn::add, "a + b with NumPy broadcasting; both of one dtype."},
    {"sub", ir::BinaryFn::sub, "a - b with NumPy broadcasting; both of one dtype."},
    {"mul", ir::BinaryFn::mul, "a * b with NumPy broadcasting; both of one dtype."},
    {"div", ir::BinaryFn::div, "a / b with NumPy broadcasting; both of one dtype."},
    {"pow", ir::BinaryFn::pow, "a ** b with NumPy broadcasting; both of one dtype."},
};

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> tensor(m, "Tensor",
                            "A tensor of a kernel graph (Mirage's DTensor): a node's output, with "
                            "its shape and dtype known once the node is added.");
  tensor.def_prop_ro(
      "shape", [](const Tensor& t) { return t.type().dims; }, "The dims, outermost first.");
  tensor.def_prop_ro(
      "dims", [](const Tensor& t) { return t.type().dims; }, "Same as shape.");
  tensor.def_prop_ro(
      "num_dims", [](const Tensor& t) { return t.type().dims.size(); }, "The rank.");
  tensor.def(
      "dim",
      [](const Tensor& t, int i) {
        const ir::Dims& dims = t.type().dims;
        std::optional<int> axis = ir::normalize_axis(i, int(dims.size()));
        if (!axis) fail("dim({}): out of range for a tensor of rank {}", i, dims.size());
        return dims[size_t(*axis)];
      },
      "i"_a, "The extent of dim i (negative counts from the end).");
  tensor.def_prop_ro(
      "dtype", [](const Tensor& t) { return t.type().dtype; }, "The element type.");
  tensor.def_prop_ro("name", &Tensor::name, "The producing node's name (':port' for port > 0).");
  tensor.def("__repr__", [](const Tensor& t) {
    return fmt::format("<yirage.Tensor {} : {}>", t.name(), ir::format_type(t.type()));
  });
  // Arithmetic operators build nodes in the tensor's own graph, like the named builders.
  for (const BinaryEntry& entry : kBinary) {
    if (entry.fn == ir::BinaryFn::pow) continue;
    ir::BinaryFn fn = entry.fn;
    std::string dunder =
        fmt::format("__{}__", entry.fn == ir::BinaryFn::div ? "truediv" : entry.name);
    tensor.def(
        dunder.c_str(),
        [fn](const Tensor& a, const Tensor& b) {
          Graph g{a.graph};
          return wrap(g, a.graph->binary(fn, a.ref, ref_in(g, b, ir::binary_name(fn))));
        },
        "other"_a, entry.doc);
  }
}

}  // namespace

std::string Tensor::name() const {
  const std::string& node = graph->node(ref.node).name;
  return ref.port == 0 ? node : fmt::format("{}:{}", node, ref.port);
}

nb::class_<Graph> bind_graph(nb::module_& m) {
  bind_tensor(m);

  nb::class_<Graph> graph(
      m, "KernelGraph",
      "A kernel graph: the program to superoptimize, built op by op.\n\n"
      "Each builder checks its operands and infers the result's shape and dtype, raising\n"
      "yirage.Error with a message naming the op and the rule broken. Create one with\n"
      "yirage.new_kernel_graph() or yirage.from_json().");
  graph.def(nb::init<>());

  graph.def(
      "new_input",
      [](Graph& g, ir::Dims dims, nb::handle dtype, std::optional<std::string> name) {
        std::string input_name = name ? *name : fresh_input_name(*g.graph);
        return wrap(g, g.graph->input(std::move(input_name), std::move(dims), to_dtype(dtype)));
      },
      "dims"_a, "dtype"_a = ir::DType::f16, "name"_a = nb::none(),
      "Adds a graph input of the given dims and dtype (yirage.float16, bfloat16, float32, or\n"
      "a name such as 'float32'). Inputs are fed in the order they are added. The name\n"
      "defaults to 'input<N>'.");

  graph.def(
      "matmul",
      [](Graph& g, const Tensor& a, const Tensor& b) {
        return wrap(g, g.graph->matmul(ref_in(g, a, "matmul"), ref_in(g, b, "matmul")));
      },
      "a"_a, "b"_a, "[..., M, K] @ [..., K, N] -> [..., M, N]; batch dims broadcast.");

  for (const UnaryEntry& entry : kUnary) {
    ir::UnaryFn fn = entry.fn;
    graph.def(
        entry.name,
        [fn](Graph& g, const Tensor& x) {
          return wrap(g, g.graph->unary(fn, ref_in(g, x, ir::unary_name(fn))));
        },
        "x"_a, entry.doc);
  }
  graph.def(
      "mul_scalar",
      [](Graph& g, const Tensor& x, double scalar) {
        return wrap(g, g.graph->mul_scalar(ref_in(g, x, "mul_scalar"), scalar));
      },
      "x"_a, "scalar"_a, "Elementwise x * scalar.");

  for (const BinaryEntry& entry : kBinary) {
    ir::BinaryFn fn = entry.fn;
    graph.def(
        entry.name,
        [fn](Graph& g, const Tensor& a, const Tensor& b) {
          std::string_view op = ir::binary_name(fn);
          return wrap(g, g.graph->binary(fn, ref_in(g, a, op), ref_in(g, b, op)));
        },
        "a"_a, "b"_a, entry.doc);
  }

  graph.def(
      "reduction",
      [](Graph& g, const Tensor& x, int dim, bool keepdim, std::string_view kind) {
        ir::ReduceFn fn = reduce_fn(kind);
        return wrap(g, g.graph->reduce(fn, ref_in(g, x, ir::reduce_name(fn)), dim, keepdim));
      },
      "x"_a, "dim"_a, "keepdim"_a = true, "kind"_a = "sum",
      "Reduces dim (negative counts from the end) by 'sum', 'mean' or 'max'. As in Mirage,\n"
      "the reduced dim stays with extent 1 unless keepdim=False.");
  graph.def(
      "rms_norm",
      [](Graph& g, const Tensor& x, ir::Dims normalized_shape, std::optional<Tensor> weight,
         double eps) {
        std::optional<ir::TensorRef> w;
        if (weight) w = ref_in(g, *weight, "rms_norm");
        return wrap(
            g, g.graph->rms_norm(ref_in(g, x, "rms_norm"), std::move(normalized_shape), w, eps));
      },
      "x"_a, "normalized_shape"_a, "weight"_a = nb::none(), "eps"_a = 1e-6,
      "x / sqrt(mean(x**2 over the trailing normalized_shape dims) + eps), times weight\n"
      "(of shape normalized_shape) when given.");
  graph.def(
      "layer_norm",
      [](Graph& g, const Tensor& x, ir::Dims normalized_shape, std::optional<Tensor> weight,
         std::optional<Tensor> bias, double eps) {
        std::optional<ir::TensorRef> w, b;
        if (weight) w = ref_in(g, *weight, "layer_norm");
        if (bias) b = ref_in(g, *bias, "layer_norm");
        return wrap(g, g.graph->layer_norm(ref_in(g, x, "layer_norm"), std::move(normalized_shape),
                                           w, b, eps));
      },
      "x"_a, "normalized_shape"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5,
      "(x - mean) / sqrt(var + eps) over the trailing normalized_shape dims, then * weight\n"
      "and + bias when given.");
  graph.def(
      "softmax",
      [](Graph& g, const Tensor& x, int dim) {
        return wrap(g, g.graph->softmax(ref_in(g, x, "softmax"), dim));
      },
      "x"_a, "dim"_a = -1, "Softmax along dim (negative counts from the end).");
  graph.def(
      "concat",
      [](Graph& g, const std::vector<Tensor>& xs, int dim) {
        std::vector<ir::TensorRef> refs;
        for (const Tensor& x : xs) refs.push_back(ref_in(g, x, "concat"));
        return wrap(g, g.graph->concat(std::move(refs), dim));
      },
      "tensors"_a, "dim"_a = -1,
      "Joins two or more tensors, equal in every dim but dim, along dim.");
  graph.def(
      "split",
      [](Graph& g, const Tensor& x, int dim, ir::Dims sizes) {
        std::vector<Tensor> parts;
        for (ir::TensorRef ref : g.graph->split(ref_in(g, x, "split"), dim, std::move(sizes)))
          parts.push_back(wrap(g, ref));
        return parts;
      },
      "x"_a, "dim"_a, "sizes"_a, "Splits dim into parts of the given sizes, which add up to it.");
  graph.def(
      "reshape",
      [](Graph& g, const Tensor& x, ir::Dims dims) {
        return wrap(g, g.graph->reshape(ref_in(g, x, "reshape"), std::move(dims)));
      },
      "x"_a, "dims"_a, "Row-major reshape; one entry may be -1.");
  graph.def(
      "permute",
      [](Graph& g, const Tensor& x, std::vector<int> perm) {
        return wrap(g, g.graph->permute(ref_in(g, x, "permute"), std::move(perm)));
      },
      "x"_a, "perm"_a, "Output dim i is input dim perm[i].");
  graph.def(
      "transpose",
      [](Graph& g, const Tensor& x, int dim0, int dim1) {
        return wrap(g, g.graph->transpose(ref_in(g, x, "transpose"), dim0, dim1));
      },
      "x"_a, "dim0"_a = -2, "dim1"_a = -1, "Swaps two dims.");

  graph.def(
      "mark_output",
      [](Graph& g, const Tensor& t, std::optional<std::string> name) {
        g.graph->mark_output(ref_in(g, t, "mark_output"), name.value_or(""));
      },
      "t"_a, "name"_a = nb::none(),
      "Makes t an output of the graph. Outputs are returned in the order they are marked.");

  graph.def_prop_ro(
      "inputs",
      [](const Graph& g) {
        std::vector<Tensor> inputs;
        for (ir::TensorRef ref : g.graph->inputs()) inputs.push_back(wrap(g, ref));
        return inputs;
      },
      "The inputs, in the order a call takes them.");
  graph.def_prop_ro(
      "outputs",
      [](const Graph& g) {
        std::vector<Tensor> outputs;
        for (const ir::GraphOutput& output : g.graph->outputs())
          outputs.push_back(wrap(g, output.tensor));
        return outputs;
      },
      "The marked outputs, in order.");
  graph.def("__len__", [](const Graph& g) { return g.graph->nodes().size(); });

  graph.def(
      "to_json", [](const Graph& g, int indent) { return ir::to_json(*g.graph).dump(indent); },
      "indent"_a = 2,
      "The graph as versioned JSON text (the format `yirage graph show` and `yirage run` read).");
  graph.def(
      "save",
      [](const Graph& g, const std::string& path) { ir::save_kernel_graph(*g.graph, path); },
      "path"_a, "Writes the graph's JSON to path.");
  graph.def(
      "to_dot", [](const Graph& g) { return ir::to_dot(*g.graph); },
      "The graph as Graphviz DOT text.");
  graph.def(
      "visualize",
      [](const Graph& g, const std::string& path) {
        std::string dot = ir::to_dot(*g.graph);
        if (ends_with(path, ".svg")) {
          nb::gil_scoped_release release;  // graphviz runs as a child process
          ir::write_svg(dot, path);
        } else {
          write_text(path, dot);
        }
        return path;
      },
      "path"_a,
      "Renders the graph: SVG when path ends in '.svg' (needs graphviz's `dot`), else DOT text.\n"
      "Returns path.");
  graph.def(
      "structural_hash", [](const Graph& g) { return ir::structural_hash_hex(*g.graph); },
      "A hash of the program, independent of node order and names (keys the tuning cache).");
  graph.def("__repr__", [](const Graph& g) {
    return fmt::format("<yirage.KernelGraph: {} nodes, {} inputs, {} outputs, hash {}>",
                       g.graph->nodes().size(), g.graph->inputs().size(), g.graph->outputs().size(),
                       ir::structural_hash_hex(*g.graph));
  });

  m.def(
      "from_json",
      [](const std::string& text) {
        Graph g;
        *g.graph = ir::parse_kernel_graph(text);
        return g;
      },
      "text"_a, "Parses a kernel graph from its JSON text (as written by KernelGraph.to_json()).");
  m.def(
      "load",
      [](const std::string& path) {
        Graph g;
        *g.graph = ir::load_kernel_graph(path);
        return g;
      },
      "path"_a, "Reads a kernel graph JSON file.");
  return graph;
}

}  // namespace yirage::python
