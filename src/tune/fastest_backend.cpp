// Backend "auto": tune on every backend that can run here, keep the fastest (tune.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"
#include "tune/tune.h"

namespace yirage::tune {

FastestBackendResult optimize_on_fastest_backend(const ir::KernelGraph& graph,
                                                 const OptimizeOptions& options) {
  FastestBackendResult out;
  std::vector<std::string> failures;
  bool any = false;
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    if (!info.availability.available || !info.device.tunable) continue;
    BackendTuning tuning;
    tuning.backend = info.name;
    try {
      tuning.result = optimize(graph, backend::get_backend(info.name), options);
      if (!any || tuning.result->entry.chosen_seconds <
                      out.backends[out.chosen].result->entry.chosen_seconds)
        out.chosen = out.backends.size();
      any = true;
    } catch (const Error& e) {
      tuning.error = e.what();
      failures.push_back(fmt::format("{}: {}", info.name, e.what()));
    }
    if (options.log && tuning.result)
      options.log(fmt::format("backend {}: {} at {:.4g} ms", info.name,
                              tuning.result->entry.winner().label,
                              tuning.result->entry.chosen_seconds * 1e3));
    out.backends.push_back(std::move(tuning));
  }
  if (out.backends.empty()) fail("auto: no backend that can be tuned is available on this machine");
  if (!any) fail("auto: tuning failed on every backend: {}", fmt::join(failures, "; "));
  if (options.log)
    options.log(fmt::format("chose backend {} ({:.4g} ms)", out.winner().backend,
                            out.winner().result->entry.chosen_seconds * 1e3));
  return out;
}

}  // namespace yirage::tune
