// Shared declarations of the `yirage._yirage` extension (nanobind).
//
// The extension is a thin layer: every check, inference and error message comes from the C++
// stages, and yirage::Error becomes the Python exception `yirage.Error` with the same message.
// Python-side conveniences (dtype aliases, bfloat16 views through ml_dtypes) live in
// python/yirage/__init__.py.
#pragma once

#include <memory>
#include <string>

#include <nanobind/nanobind.h>

#include "ir/ir.h"

namespace yirage::python {

namespace nb = nanobind;

// A kernel graph under construction. Tensors share ownership of the graph, so a tensor stays
// valid (and its shape readable) after the graph object is gone.
struct Graph {
  std::shared_ptr<ir::KernelGraph> graph = std::make_shared<ir::KernelGraph>();
};

// One tensor of a graph: the graph and the node output.
struct Tensor {
  std::shared_ptr<ir::KernelGraph> graph;
  ir::TensorRef ref;

  const ir::TensorType& type() const { return graph->type(ref); }
  // "x", or "parts:1" for a port other than 0.
  std::string name() const;
};

// A dtype given as yirage.DType, a string ("float16", "f16") or anything numpy.dtype() takes.
ir::DType to_dtype(nb::handle object);

// Each adds its part of the module; superoptimize is a method of the graph class.
nb::class_<Graph> bind_graph(nb::module_& m);
void bind_optimize(nb::module_& m, nb::class_<Graph>& graph_class);
void bind_llm(nb::module_& m);
void bind_verify(nb::module_& m);  // yirage.verify (verify.cpp)
void bind_serve(nb::module_& m);   // yirage._Server (serve.cpp), where YIRAGE_SERVER is on

}  // namespace yirage::python
