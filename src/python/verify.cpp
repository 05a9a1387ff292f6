// yirage.verify: a µGraph a user wrote against the kernel graph it should compute, the check
// `yirage verify` runs (search/user_mugraph.h). The report crosses as JSON text, which
// python/yirage/__init__.py turns into a dict, so that both front ends print the same fields.
#include <optional>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "python/bindings.h"
#include "search/user_mugraph.h"

namespace yirage::python {

void bind_verify(nb::module_& m) {
  m.def(
      "_verify",
      [](const Graph& graph, const Graph& mugraph, std::optional<uint64_t> seed) {
        search::MuGraphVerdict verdict;
        {
          nb::gil_scoped_release release;  // seconds of reference execution at model sizes
          verdict = search::verify_mugraph(*graph.graph, *mugraph.graph, seed, seed.value_or(0));
        }
        return verdict.to_json().dump();
      },
      nb::arg("graph"), nb::arg("mugraph"), nb::arg("seed") = nb::none(),
      "The verification report of `mugraph` against `graph`, as JSON text.");
}

}  // namespace yirage::python
