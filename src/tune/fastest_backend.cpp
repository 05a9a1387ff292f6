// Backend "auto": tune on every backend that can run here, keep the one whose call is fastest,
// host transfers included (tune.h).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/shape.h"
#include "support/error.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

size_t tensor_bytes(const ir::KernelGraph& graph, ir::TensorRef tensor) {
  const ir::TensorType& type = graph.type(tensor);
  return static_cast<size_t>(ir::num_elements(type.dims)) * ir::dtype_size(type.dtype);
}

// One call's copies: every input in, every output out.
class TransferSet {
 public:
  TransferSet(backend::Backend& backend, const ir::KernelGraph& graph) : backend_(backend) {
    for (ir::TensorRef in : graph.inputs()) add(inputs_, tensor_bytes(graph, in));
    for (const ir::GraphOutput& out : graph.outputs())
      add(outputs_, tensor_bytes(graph, out.tensor));
  }

  double timed_copy() {
    const auto start = std::chrono::steady_clock::now();
    for (Staged& s : inputs_) s.buffer->write(s.host);
    backend_.synchronize();
    for (Staged& s : outputs_) s.buffer->read(s.host);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  struct Staged {
    std::unique_ptr<backend::Buffer> buffer;
    std::vector<std::byte> host;
  };

  void add(std::vector<Staged>& to, size_t bytes) {
    Staged s{backend_.allocate(bytes), std::vector<std::byte>(bytes)};
    // Bytes that vary, so that no copy path can shortcut a constant page.
    for (size_t i = 0; i < bytes; ++i) s.host[i] = static_cast<std::byte>(i * 131 + 7);
    to.push_back(std::move(s));
  }

  backend::Backend& backend_;
  std::vector<Staged> inputs_, outputs_;
};

constexpr int kTransferSamples = 5;

}  // namespace

double host_transfer_seconds(backend::Backend& backend, const ir::KernelGraph& graph) {
  if (backend.buffer_type().host_visible) return 0;
  TransferSet set(backend, graph);
  set.timed_copy();  // untimed: first touches of the buffers and the host pages
  std::vector<double> samples;
  for (int i = 0; i < kTransferSamples; ++i) samples.push_back(set.timed_copy());
  std::nth_element(samples.begin(), samples.begin() + kTransferSamples / 2, samples.end());
  return samples[kTransferSamples / 2];
}

FastestBackendResult optimize_on_fastest_backend(const ir::KernelGraph& graph,
                                                 const OptimizeOptions& options,
                                                 DataPlacement data) {
  FastestBackendResult out;
  std::vector<std::string> failures;
  bool any = false;
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    // "auto" chooses among kinds of device: a second device of one kind would only repeat the
    // first's tuning (they share a fingerprint, and with it the cache's entries).
    if (!info.availability.available || !info.device.tunable || info.device_index > 0) continue;
    BackendTuning tuning;
    tuning.backend = info.name;
    try {
      backend::Backend& backend = backend::get_backend(info.name);
      tuning.result = optimize(graph, backend, options);
      if (data == DataPlacement::host)
        tuning.transfer_seconds = host_transfer_seconds(backend, graph);
      if (!any || tuning.call_seconds() < out.backends[out.chosen].call_seconds())
        out.chosen = out.backends.size();
      any = true;
    } catch (const Error& e) {
      tuning.result.reset();
      tuning.error = e.what();
      failures.push_back(fmt::format("{}: {}", info.name, e.what()));
    }
    if (options.log && tuning.result)
      options.log(fmt::format(
          "backend {}: {} at {:.4g} ms{}", info.name, tuning.result->entry.winner().label,
          tuning.result->entry.chosen_seconds * 1e3,
          tuning.transfer_seconds > 0 ? fmt::format(" + {:.4g} ms copying to and from the host",
                                                    tuning.transfer_seconds * 1e3)
                                      : ""));
    out.backends.push_back(std::move(tuning));
  }
  if (out.backends.empty()) fail("auto: no backend that can be tuned is available on this machine");
  if (!any) fail("auto: tuning failed on every backend: {}", fmt::join(failures, "; "));
  if (options.log)
    options.log(fmt::format("chose backend {} ({:.4g} ms a call)", out.winner().backend,
                            out.winner().call_seconds() * 1e3));
  return out;
}

}  // namespace yirage::tune
