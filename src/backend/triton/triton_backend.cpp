// The "triton" backend: kernel graphs and their µGraphs as Triton kernels on NVIDIA GPUs.
//
// compile() lowers the graph to Triton source (codegen.h), compiles every kernel ahead of time
// with Triton's own compiler to a cubin (aot.h, cached), and loads the cubins through the CUDA
// driver that the cuda backend loads (backend/cuda/driver.h). Launches go through the driver
// alone, one kernel after another on the legacy default stream, so no Python runs on the launch
// path. It is available where the driver finds a CUDA device and Python imports triton; otherwise
// its reason names what is missing. Where it cannot run, generated_source() still shows the code,
// which CI runs under Triton's interpreter (tests/triton).
//
// Capabilities: compute_capability, multiprocessors, shared_memory_per_block_optin_bytes,
// memory_bytes, triton_version, and "search" (backend.h), as the cuda backend's for the same GPU.
#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "backend/backend_factories.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/driver.h"
#include "backend/fingerprint.h"
#include "backend/triton/aot.h"
#include "backend/triton/codegen.h"
#include "support/error.h"

namespace yirage::backend::triton {
namespace {

// Declared here, in the innermost scope, so that a unity batch that also holds another backend's
// `using namespace` (cuda's, opencl's) still finds these first.
using cuda::check;
using cuda::CUcontext;
using cuda::CUdevice;
using cuda::CUdeviceptr;
using cuda::CUfunction;
using cuda::CUmodule;
using cuda::driver;
using cuda::Driver;
using cuda::DriverApi;
using cuda::kAttrComputeCapabilityMajor;
using cuda::kAttrComputeCapabilityMinor;
using cuda::kAttrMaxSharedMemoryPerBlockOptin;
using cuda::kAttrMultiprocessorCount;
using cuda::kFuncAttrMaxDynamicSharedBytes;

struct TritonProbe {
  Availability availability;
  DeviceDescription device;
  int index = 0;         // among the driver's devices: BackendOptions::device
  int device_count = 0;  // the driver's devices, where it could be asked
  CUdevice ordinal = 0;
  int arch = 0;  // compute capability as Triton spells it: 90
};

int device_attribute(CUdevice device, int which) {
  int value = 0;
  check(driver().api.device_get_attribute(&value, which, device), "cuDeviceGetAttribute");
  return value;
}

// GPU probe.index, or why there is none (empty when there is).
std::string find_gpu(TritonProbe& probe) {
  const Driver& d = driver();
  if (!d.loaded) return fmt::format("no CUDA device ({})", d.reason);
  try {
    const DriverApi& api = d.api;
    check(api.init(0), "cuInit");
    int count = 0;
    check(api.device_get_count(&count), "cuDeviceGetCount");
    probe.device_count = count;
    if (count == 0) return "no CUDA device (the NVIDIA driver reports 0 devices)";
    if (probe.index >= count)
      return fmt::format("no CUDA device {} (the NVIDIA driver reports {})", probe.index, count);
    check(api.device_get(&probe.ordinal, probe.index), "cuDeviceGet");
    char name[256] = {};
    check(api.device_get_name(name, int(sizeof(name)), probe.ordinal), "cuDeviceGetName");
    size_t memory = 0;
    check(api.device_total_mem(&memory, probe.ordinal), "cuDeviceTotalMem_v2");
    const int major = device_attribute(probe.ordinal, kAttrComputeCapabilityMajor);
    const int minor = device_attribute(probe.ordinal, kAttrComputeCapabilityMinor);
    const int sms = device_attribute(probe.ordinal, kAttrMultiprocessorCount);
    const int shared = device_attribute(probe.ordinal, kAttrMaxSharedMemoryPerBlockOptin);
    probe.arch = major * 10 + minor;
    probe.device.name = name;
    // The cuda backend's space, less its weights streamed through registers: Triton's programs
    // hold every tile they load.
    cuda::CodegenOptions lowering;
    lowering.multiprocessors = sms;
    lowering.max_shared_bytes = shared;
    lowering.register_weights = false;
    probe.device.capabilities = {
        {"compute_capability", fmt::format("{}.{}", major, minor)},
        {"multiprocessors", sms},
        {"shared_memory_per_block_optin_bytes", shared},
        {"memory_bytes", memory},
        {"search", cuda::search_space(lowering)},
    };
  } catch (const Error& e) {
    return fmt::format("no usable CUDA device ({})", e.what());
  }
  return {};
}

TritonProbe probe_triton(int index) {
  TritonProbe probe;
  probe.index = index;
  probe.device.name = "no CUDA device";
  probe.device.capabilities = nlohmann::json::object();
  std::vector<std::string> missing;
  if (std::string why = find_gpu(probe); !why.empty()) missing.push_back(why);
  std::string why_no_triton;
  const std::string version = triton::triton_version(&why_no_triton);
  if (version.empty()) missing.push_back(why_no_triton);
  probe.device.capabilities["triton_version"] = version.empty() ? "none" : version;
  if (!missing.empty()) {
    probe.availability.reason = fmt::format("{}", fmt::join(missing, "; "));
    return probe;
  }
  probe.device.fingerprint =
      fingerprint_of({"triton", probe.device.name, std::to_string(probe.arch), version});
  probe.availability.available = true;
  return probe;
}

class TritonMemory {
 public:
  explicit TritonMemory(size_t bytes) : bytes_(bytes) {
    // cuMemAlloc refuses 0 bytes; an empty tensor still gets an address.
    check(driver().api.mem_alloc(&ptr_, std::max<size_t>(bytes, 1)),
          fmt::format("cuMemAlloc({} bytes)", bytes));
  }
  ~TritonMemory() { driver().api.mem_free(ptr_); }
  TritonMemory(const TritonMemory&) = delete;
  TritonMemory& operator=(const TritonMemory&) = delete;
  CUdeviceptr address() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  CUdeviceptr ptr_ = 0;
};

class TritonBuffer final : public Buffer {
 public:
  explicit TritonBuffer(size_t bytes) : memory_(bytes) {}
  size_t size() const override { return memory_.size(); }
  void write(std::span<const std::byte> bytes) override {
    if (bytes.size() != size())
      fail("triton: buffer write of {} bytes into {}", bytes.size(), size());
    if (!bytes.empty())
      check(driver().api.memcpy_htod(memory_.address(), bytes.data(), bytes.size()),
            "cuMemcpyHtoD");
  }
  void read(std::span<std::byte> bytes) const override {
    if (bytes.size() != size())
      fail("triton: buffer read of {} bytes from {}", bytes.size(), size());
    if (!bytes.empty())
      check(driver().api.memcpy_dtoh(bytes.data(), memory_.address(), bytes.size()),
            "cuMemcpyDtoH");
  }
  CUdeviceptr address() const { return memory_.address(); }

 private:
  TritonMemory memory_;
};

struct LoadedCubin {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  triton::CompiledKernel compiled;
  std::unique_ptr<TritonMemory> global_scratch, profile_scratch;
};

class TritonModule final : public Module {
 public:
  TritonModule(triton::Program program, std::vector<triton::CompiledKernel> compiled)
      : program_(std::move(program)) {
    const DriverApi& api = driver().api;
    for (const triton::Slot& slot : program_.slots)
      scratch_.push_back(slot.kind == triton::SlotKind::scratch
                             ? std::make_unique<TritonMemory>(slot.bytes)
                             : nullptr);
    for (size_t i = 0; i < compiled.size(); ++i) {
      const triton::TritonKernel& k = program_.kernels[i];
      LoadedCubin& loaded = kernels_.emplace_back();
      loaded.compiled = std::move(compiled[i]);
      check(api.module_load_data(&loaded.module, loaded.compiled.cubin.data()),
            fmt::format("cuModuleLoadData for {}", k.what));
      check(api.module_get_function(&loaded.function, loaded.module,
                                    loaded.compiled.function.c_str()),
            fmt::format("cuModuleGetFunction({})", loaded.compiled.function));
      if (loaded.compiled.shared_bytes > 48 * 1024)
        check(api.func_set_attribute(loaded.function, kFuncAttrMaxDynamicSharedBytes,
                                     int(loaded.compiled.shared_bytes)),
              fmt::format("cuFuncSetAttribute for {}", k.what));
      const size_t programs = size_t(k.grid[0]) * k.grid[1] * k.grid[2];
      if (loaded.compiled.global_scratch_bytes)
        loaded.global_scratch =
            std::make_unique<TritonMemory>(programs * loaded.compiled.global_scratch_bytes +
                                           loaded.compiled.global_scratch_alignment);
      if (loaded.compiled.profile_scratch_bytes)
        loaded.profile_scratch =
            std::make_unique<TritonMemory>(programs * loaded.compiled.profile_scratch_bytes);
    }
  }

  ~TritonModule() override {
    for (LoadedCubin& k : kernels_)
      if (k.module) driver().api.module_unload(k.module);
  }

  int kernel_count() const override { return int(kernels_.size()); }

  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    std::vector<CUdeviceptr> addresses;
    for (size_t s = 0; s < program_.slots.size(); ++s) {
      const triton::Slot& slot = program_.slots[s];
      if (slot.kind == triton::SlotKind::scratch) {
        addresses.push_back(scratch_[s]->address());
        continue;
      }
      const bool input = slot.kind == triton::SlotKind::input;
      const std::span<Buffer* const> list = input ? inputs : outputs;
      if (size_t(slot.index) >= list.size())
        fail("triton: module launched with {} {} buffers, needs more", list.size(),
             input ? "input" : "output");
      auto* buffer = dynamic_cast<TritonBuffer*>(list[size_t(slot.index)]);
      if (!buffer)
        fail("triton: {} {} is not a triton buffer", input ? "input" : "output", slot.index);
      if (buffer->size() != slot.bytes)
        fail("triton: {} {} holds {} bytes, needs {}", input ? "input" : "output", slot.index,
             buffer->size(), slot.bytes);
      addresses.push_back(buffer->address());
    }
    for (size_t i = 0; i < kernels_.size(); ++i) run(program_.kernels[i], kernels_[i], addresses);
  }

 private:
  static void run(const triton::TritonKernel& k, const LoadedCubin& loaded,
                  const std::vector<CUdeviceptr>& addresses) {
    std::vector<CUdeviceptr> values;
    for (int slot : k.args) values.push_back(addresses[size_t(slot)]);
    const size_t align = loaded.compiled.global_scratch_alignment;
    values.push_back(
        loaded.global_scratch ? (loaded.global_scratch->address() + align - 1) / align * align : 0);
    values.push_back(loaded.profile_scratch ? loaded.profile_scratch->address() : 0);
    std::vector<void*> params;
    for (CUdeviceptr& v : values) params.push_back(&v);
    check(driver().api.launch_kernel(
              loaded.function, k.grid[0], k.grid[1], k.grid[2], unsigned(loaded.compiled.threads),
              1, 1, unsigned(loaded.compiled.shared_bytes), nullptr, params.data(), nullptr),
          fmt::format("cuLaunchKernel for {}", k.what));
  }

  triton::Program program_;
  std::vector<std::unique_ptr<TritonMemory>> scratch_;  // by slot; null but for scratch slots
  std::vector<LoadedCubin> kernels_;
};

class TritonBackend final : public Backend {
 public:
  explicit TritonBackend(int device) : probe_(probe_triton(device)) {}

  std::string_view name() const override { return "triton"; }
  Availability availability() const override { return probe_.availability; }
  DeviceDescription device() const override { return probe_.device; }
  int device_count() const override { return std::max(1, probe_.device_count); }
  BackendOptions options() const override { return {.device = probe_.index}; }
  BufferType buffer_type() const override { return {.host_visible = false, .alignment = 256}; }

  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    context();
    return std::make_unique<TritonBuffer>(bytes);
  }

  std::unique_ptr<Module> compile(const ir::KernelGraph& graph) override {
    context();
    check_fits_memory(name(), probe_.device, graph);
    triton::Program program = triton::lower(graph);
    std::vector<triton::CompiledKernel> compiled = triton::compile_kernels(program, probe_.arch);
    return std::make_unique<TritonModule>(std::move(program), std::move(compiled));
  }

  void synchronize() override {
    context();
    check(driver().api.stream_synchronize(nullptr), "cuStreamSynchronize (a kernel failed)");
  }

  nlohmann::json generated_source(const ir::KernelGraph& graph) const override {
    return triton::to_json(triton::lower(graph));
  }

  std::string codegen_settings() const override {
    return fmt::format("triton={} arch={}", probe_.device.capabilities.value("triton_version", ""),
                       probe_.arch);
  }

 private:
  // The device's primary context, current on this thread.
  void context() {
    if (!probe_.availability.available)
      fail("backend '{}' is unavailable: {}", device_name(name(), probe_.index),
           probe_.availability.reason);
    std::call_once(once_, [&] {
      check(driver().api.primary_ctx_retain(&context_, probe_.ordinal), "cuDevicePrimaryCtxRetain");
    });
    check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
  }

  TritonProbe probe_;
  std::once_flag once_;
  CUcontext context_ = nullptr;
};

}  // namespace
}  // namespace yirage::backend::triton

namespace yirage::backend {

std::unique_ptr<Backend> make_triton_backend(const BackendOptions& options) {
  return std::make_unique<triton::TritonBackend>(options.device);
}

}  // namespace yirage::backend
