#include "toy_backend.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "support/error.h"
#include "verify/verify.h"

namespace yirage::toy {
namespace {

using backend::Buffer;

class ToyBuffer final : public Buffer {
 public:
  explicit ToyBuffer(size_t bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  void write(std::span<const std::byte> bytes) override {
    if (bytes.size() != bytes_.size()) fail("toy: write of {} bytes into {}", bytes.size(), size());
    std::memcpy(bytes_.data(), bytes.data(), bytes.size());
  }
  void read(std::span<std::byte> bytes) const override {
    if (bytes.size() != bytes_.size()) fail("toy: read of {} bytes from {}", bytes.size(), size());
    std::memcpy(bytes.data(), bytes_.data(), bytes.size());
  }
  void* host_address() override { return bytes_.data(); }

 private:
  std::vector<std::byte> bytes_;
};

class ToyModule final : public backend::Module {
 public:
  explicit ToyModule(ir::KernelGraph graph) : graph_(std::move(graph)) {}
  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    const std::vector<ir::TensorRef> refs = graph_.inputs();
    if (inputs.size() != refs.size() || outputs.size() != graph_.outputs().size())
      fail("toy: {} inputs and {} outputs given, the graph has {} and {}", inputs.size(),
           outputs.size(), refs.size(), graph_.outputs().size());
    std::vector<ir::HostTensor> host;
    for (size_t i = 0; i < refs.size(); ++i)
      inputs[i]->read(host.emplace_back(graph_.type(refs[i])).bytes);
    std::vector<ir::HostTensor> results = verify::run_reference(graph_, host);
    for (size_t o = 0; o < results.size(); ++o) outputs[o]->write(results[o].bytes);
  }
  int kernel_count() const override { return int(graph_.nodes().size() - graph_.inputs().size()); }

 private:
  ir::KernelGraph graph_;
};

// Two devices of one kind, as a machine with two identical GPUs has.
class ToyBackend final : public backend::Backend {
 public:
  explicit ToyBackend(int device) : device_(device) {}
  std::string_view name() const override { return "toy"; }
  backend::Availability availability() const override { return {true, {}}; }
  int device_count() const override { return kToyDevices; }
  backend::BackendOptions options() const override { return {.device = device_}; }
  backend::DeviceDescription device() const override {
    backend::DeviceDescription d;
    d.name = fmt::format("toy device {}", device_);
    d.fingerprint = "toy-1";
    // A small space, so that the search has something to enumerate on this device too.
    d.capabilities = {{"search",
                       {{"max_tile_bytes_in_loop", 1 << 16},
                        {"max_tile_bytes_total", 1 << 17},
                        {"max_grid_blocks", 64},
                        {"parallel_units", 4},
                        {"bytes_per_second", 1e10},
                        {"flops_per_second", 1e10},
                        {"launch_seconds", 1e-6}}}};
    return d;
  }
  backend::BufferType buffer_type() const override {
    return {.host_visible = true, .alignment = alignof(std::max_align_t)};
  }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_unique<ToyBuffer>(bytes);
  }
  std::unique_ptr<backend::Module> compile(const ir::KernelGraph& graph) override {
    return std::make_unique<ToyModule>(graph);
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<backend::Backend> make_toy_backend(const backend::BackendOptions& options) {
  return std::make_unique<ToyBackend>(options.device);
}

}  // namespace yirage::toy
