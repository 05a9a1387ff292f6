// The "reference" backend: runs graphs with verify's reference executor in host memory. It is
// slow and always available, so every machine can run every program and check other backends.
#include <cstring>

#include "backend/backend_factories.h"
#include "backend/cpu/cpu_device.h"
#include "backend/fingerprint.h"
#include "support/error.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : data_(bytes) {}

  size_t size() const override { return data_.size(); }
  void write(std::span<const std::byte> bytes) override {
    check_size(bytes.size(), "write");
    std::memcpy(data_.data(), bytes.data(), bytes.size());
  }
  void read(std::span<std::byte> bytes) const override {
    check_size(bytes.size(), "read");
    std::memcpy(bytes.data(), data_.data(), bytes.size());
  }
  void* host_address() override { return data_.data(); }

 private:
  void check_size(size_t bytes, std::string_view what) const {
    if (bytes != data_.size())
      fail("reference buffer {}: {} bytes given for a buffer of {} bytes", what, bytes,
           data_.size());
  }

  std::vector<std::byte> data_;
};

class ReferenceModule final : public Module {
 public:
  explicit ReferenceModule(ir::KernelGraph graph) : graph_(std::move(graph)) {}

  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    std::vector<ir::TensorRef> input_refs = graph_.inputs();
    check_count("input", inputs.size(), input_refs.size());
    check_count("output", outputs.size(), graph_.outputs().size());

    std::vector<ir::HostTensor> host_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& name = graph_.node(input_refs[i].node).name;
      ir::HostTensor& host = host_inputs.emplace_back(graph_.type(input_refs[i]));
      check_buffer("input", name, *inputs[i], host);
      inputs[i]->read(host.bytes);
    }

    std::vector<ir::HostTensor> results = verify::run_reference(graph_, host_inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      check_buffer("output", graph_.outputs()[i].name, *outputs[i], results[i]);
      outputs[i]->write(results[i].bytes);
    }
  }

 private:
  static void check_count(std::string_view what, size_t given, size_t expected) {
    if (given != expected)
      fail("reference launch: {} {} buffers given, the graph has {}", given, what, expected);
  }

  static void check_buffer(std::string_view what, const std::string& name, const Buffer& buffer,
                           const ir::HostTensor& tensor) {
    if (buffer.size() != tensor.bytes.size())
      fail("reference launch: {} '{}' of type {} needs {} bytes, its buffer has {}", what, name,
           ir::format_type(tensor.type), tensor.bytes.size(), buffer.size());
  }

  ir::KernelGraph graph_;
};

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend() : device_(cpu::describe_cpu(cpu::read_host_cpu())) {
    device_.name = "reference (host CPU)";
    device_.fingerprint = fingerprint_of({device_.fingerprint, "reference"});
    // It runs every graph op by op as written: its times rank nothing that runs elsewhere.
    device_.tunable = false;
  }

  std::string_view name() const override { return "reference"; }
  Availability availability() const override { return {true, {}}; }
  DeviceDescription device() const override { return device_; }

  // Host memory from operator new.
  BufferType buffer_type() const override {
    return {.host_visible = true, .alignment = __STDCPP_DEFAULT_NEW_ALIGNMENT__};
  }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }

  // The reference executor implements every op of the IR, and the graph was checked when it was
  // built, so compiling is keeping a copy.
  std::unique_ptr<Module> compile(const ir::KernelGraph& graph) override {
    return std::make_unique<ReferenceModule>(graph);
  }

 private:
  DeviceDescription device_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const BackendOptions&) {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace yirage::backend
