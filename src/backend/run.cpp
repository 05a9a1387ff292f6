// Running a graph on a backend with host tensors in and out.
#include <memory>

#include "backend/backend.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

std::vector<Buffer*> raw_pointers(const std::vector<std::unique_ptr<Buffer>>& buffers) {
  std::vector<Buffer*> pointers;
  for (const auto& buffer : buffers) pointers.push_back(buffer.get());
  return pointers;
}

}  // namespace

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
