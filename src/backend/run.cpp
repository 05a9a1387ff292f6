// Running a graph on a backend with host tensors in and out.
#include <memory>

#include "backend/backend.h"
#include "support/error.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

std::vector<Buffer*> raw_pointers(const std::vector<std::unique_ptr<Buffer>>& buffers) {
  std::vector<Buffer*> pointers;
  for (const auto& buffer : buffers) pointers.push_back(buffer.get());
  return pointers;
}

}  // namespace

void check_fits_memory(std::string_view backend, const DeviceDescription& device,
                       const ir::KernelGraph& graph) {
  const nlohmann::json& memory = device.capabilities.is_object()
                                     ? device.capabilities.value("memory_bytes", nlohmann::json())
                                     : nlohmann::json();
  if (!memory.is_number_unsigned() && !memory.is_number_integer()) return;
  // In double: element counts of absurd shapes overflow 64 bits, and the comparison needs no more
  // than double's precision.
  double needed = 0, largest = -1;
  std::string largest_name;
  for (const ir::Node& node : graph.nodes())
    for (const ir::TensorType& t : node.outputs) {
      double bytes = double(ir::dtype_size(t.dtype));
      for (int64_t d : t.dims) bytes *= double(d);
      needed += bytes;
      if (bytes > largest) largest = bytes, largest_name = node.name;
    }
  const double available = memory.get<double>();
  if (needed > available)
    fail(
        "backend '{}': the graph's tensors need {:.4g} GiB, more than the {:.4g} GiB of memory of "
        "device '{}' (the largest, '{}', {:.4g} GiB)",
        backend, needed / double(1 << 30), available / double(1 << 30), device.name, largest_name,
        largest / double(1 << 30));
}

std::vector<ir::HostTensor> run_on(Backend& backend, const ir::KernelGraph& graph,
                                   const std::vector<ir::HostTensor>& inputs) {
  verify::check_inputs(graph, inputs);

  std::vector<std::unique_ptr<Buffer>> input_buffers;
  for (const ir::HostTensor& input : inputs) {
    input_buffers.push_back(backend.allocate(input.bytes.size()));
    input_buffers.back()->write(input.bytes);
  }

  std::unique_ptr<Module> module = backend.compile(graph);

  // Poisoned outputs make any element the module forgets to write read back as NaN.
  std::vector<ir::HostTensor> outputs;
  std::vector<std::unique_ptr<Buffer>> output_buffers;
  for (const ir::GraphOutput& output : graph.outputs()) {
    ir::HostTensor& host = outputs.emplace_back(graph.type(output.tensor));
    ir::poison(host);
    output_buffers.push_back(backend.allocate(host.bytes.size()));
    output_buffers.back()->write(host.bytes);
  }

  module->launch(raw_pointers(input_buffers), raw_pointers(output_buffers));
  backend.synchronize();

  for (size_t i = 0; i < outputs.size(); ++i) output_buffers[i]->read(outputs[i].bytes);
  return outputs;
}

}  // namespace yirage::backend
