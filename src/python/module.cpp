// The `yirage._yirage` extension module: dtypes, backends, errors, and the parts bound in
// graph.cpp, optimize.cpp and llm.cpp. python/yirage/__init__.py re-exports it.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "backend/backend.h"
#include "python/bindings.h"
#include "support/error.h"
#include "support/version.h"
#include "tune/tune.h"

namespace yirage::python {

ir::DType to_dtype(nb::handle object) {
  if (nb::isinstance<ir::DType>(object)) return nb::cast<ir::DType>(object);
  std::string name;
  if (nb::isinstance<nb::str>(object)) {
    name = nb::cast<std::string>(object);
  } else {
    // numpy.float16, numpy.dtype('float32'), ml_dtypes.bfloat16, ...
    try {
      name =
          nb::cast<std::string>(nb::module_::import_("numpy").attr("dtype")(object).attr("name"));
    } catch (nb::python_error&) {
      fail("dtype: cannot read {} as a dtype; use yirage.float16, bfloat16 or float32",
           nb::cast<std::string>(nb::repr(object)));
    }
  }
  if (std::optional<ir::DType> dtype = ir::parse_dtype(name)) return *dtype;
  fail("dtype: '{}' is not a YiRage dtype (float32, float16, bfloat16, int32, int8, uint8)", name);
}

}  // namespace yirage::python

NB_MODULE(_yirage, m) {
  using namespace yirage;
  using namespace yirage::python;
  using namespace nb::literals;

  m.doc() = "YiRage's C++ core: kernel graphs, the superoptimizer, and backends.";
  m.attr("__version__") = kVersion;

  // nanobind reports objects still alive at interpreter exit as leaks; a daemon thread's frame or a
  // KeyboardInterrupt traceback holding a graph is enough, and users cannot act on the report.
  nb::set_leak_warnings(false);

  // yirage::Error carries one line naming the problem; Python sees the same line.
  nb::exception<Error>(m, "Error", PyExc_ValueError);

  nb::enum_<ir::DType>(m, "DType", "Element types of kernel-graph tensors.")
      .value("float32", ir::DType::f32)
      .value("float16", ir::DType::f16)
      .value("bfloat16", ir::DType::bf16)
      .value("int32", ir::DType::i32)
      .value("int8", ir::DType::i8)
      .value("uint8", ir::DType::u8)
      .def_prop_ro(
          "itemsize", [](ir::DType t) { return ir::dtype_size(t); }, "Bytes per element.");

  // The Python interpreter cannot serve as a tuning worker, so python/yirage/__init__.py names
  // the `yirage` command installed with this module (tune.h, candidate isolation).
  m.def("_set_tune_worker", &tune::set_worker_command, "command"_a,
        "The command that checks and profiles tuning candidates in a process of their own.");
  m.attr("_TUNE_WORKER_FLAG") = nb::str(tune::kWorkerFlag.data(), tune::kWorkerFlag.size());

  // Backends probe the machine when first asked (the cpu backend builds and loads a module), so
  // these run without the GIL.
  m.def(
      "get_available_backends",
      [] {
        std::vector<std::string> names;
        for (const backend::BackendInfo& info : backend::describe_backends())
          if (info.availability.available) names.push_back(info.name);
        return names;
      },
      nb::call_guard<nb::gil_scoped_release>(),
      "Names of the backends that can run on this machine, in order of preference.");
  m.def("get_default_backend", &backend::default_backend_name,
        nb::call_guard<nb::gil_scoped_release>(),
        "The backend 'auto' stands for: the first available one in order of preference.");
  m.def(
      "describe_backends",
      [] {
        std::vector<backend::BackendInfo> infos;
        {
          nb::gil_scoped_release release;
          infos = backend::describe_backends();
        }
        nb::list result;
        for (const backend::BackendInfo& info : infos) {
          nb::dict d;
          d["name"] = info.name;
          d["device_index"] = info.device_index;
          d["available"] = info.availability.available;
          d["reason"] = info.availability.reason;
          d["device"] = info.device.name;
          d["fingerprint"] = info.device.fingerprint;
          d["capabilities"] = info.device.capabilities.dump();
          result.append(d);
        }
        return result;
      },
      "Every backend this build knows, available or not: name, available, reason (why not),\n"
      "device, fingerprint, capabilities (JSON text).");

  nb::class_<Graph> graph_class = bind_graph(m);
  bind_optimize(m, graph_class);
  bind_llm(m);
  bind_verify(m);
#ifdef YIRAGE_PYTHON_SERVER
  bind_serve(m);
#endif
}
