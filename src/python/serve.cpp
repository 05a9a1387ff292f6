// yirage._Server: the OpenAI-compatible server of the serve stage (serve/serve.h), in the
// interpreter's process. yirage.ray runs one in each Ray Serve replica and forwards the HTTP
// requests that Ray routes to it, so a replica answers with the same parser, continuous batching
// and error objects as `yirage serve` rather than a second implementation of the API in Python.
#include <memory>
#include <string>

#include <nanobind/stl/string.h>

#include "backend/backend.h"
#include "python/bindings.h"
#include "serve/serve.h"
#include "support/error.h"

namespace yirage::python {

void bind_serve(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<serve::Server> cls(m, "_Server",
                                "`yirage serve` in this process: load, bind(), run() in a thread, "
                                "stop() from any other.");
  cls.def(
      "__init__",
      [](serve::Server* self, const std::string& model, int threads, int context_length,
         double kv_memory_mib, int max_batch, int max_queue, bool fused_blocks,
         const std::string& backend_name, const std::string& host, int port) {
        if (!(kv_memory_mib > 0)) fail("kv_memory_mib {} must be positive", kv_memory_mib);
        serve::ServeOptions options;
        options.model = model;
        options.host = host;
        options.port = port;
        options.threads = threads;
        options.context_length = context_length;
        options.kv_memory_bytes = static_cast<size_t>(kv_memory_mib * (1 << 20));
        options.max_batch = max_batch;
        options.max_queue = max_queue;
        options.fused_blocks = fused_blocks;
        nb::gil_scoped_release release;  // loading optimizes the block graphs: seconds
        options.backend = backend::create_backend(
            backend_name == "auto" ? backend::default_backend_name() : backend_name,
            {.threads = threads});
        new (self) serve::Server(options);
      },
      "model"_a, "threads"_a = 2, "context_length"_a = 0, "kv_memory_mib"_a = 512.0,
      "max_batch"_a = 16, "max_queue"_a = 64, "fused_blocks"_a = true, "backend"_a = "cpu",
      "host"_a = "127.0.0.1", "port"_a = 0,
      "Loads the model as `yirage serve` does (the same options); port 0 takes a free one.");
  cls.def("bind", &serve::Server::bind, nb::call_guard<nb::gil_scoped_release>(),
          "Listens on host:port and returns the port.");
  cls.def("run", &serve::Server::run, nb::call_guard<nb::gil_scoped_release>(),
          "Serves until stop(); blocks the calling thread (without the GIL).");
  cls.def(
      "stop", &serve::Server::stop, nb::call_guard<nb::gil_scoped_release>(),
      "Cancels the requests in flight and stops serving; safe from any thread, more than once.");
  cls.def_prop_ro("url", &serve::Server::url);
  cls.def("describe", &serve::Server::describe);
}

}  // namespace yirage::python
