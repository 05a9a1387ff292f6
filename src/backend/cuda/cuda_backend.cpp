// The "cuda" backend: NVIDIA GPUs through the driver API.
//
// The driver and NVRTC are loaded at run time (driver.h), so one binary runs on machines with
// and without them; without a driver the backend describes nothing and says why. compile()
// lowers the graph to CUDA C++ (codegen.h), compiles each kernel with NVRTC for the device's
// compute capability through the cubin cache, and loads it. A module runs its kernels on one
// stream; the second launch on the same buffers captures them into a CUDA graph, and later
// launches on those buffers replay it.
//
// Kernel-level matmuls are cuBLAS calls when cuBLAS loads (driver.h), on the same stream and
// captured into the same graph, each with the fastest algorithm timed on this GPU (blas.h);
// otherwise generated kernels.
//
// Capabilities: compute_capability, sm_arch, multiprocessors, shared_memory_per_block_optin_bytes,
// l2_bytes, memory_bytes, driver_version, device_count, matmul_library (the cuBLAS and cuBLASLt
// files loaded, or "none: <why>"), and "search" (backend.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "backend/backend_factories.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/driver.h"
#include "backend/fingerprint.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

using namespace cuda;

// A probe step that failed; carries the reason the backend is unavailable.
struct ProbeFailure {
  std::string reason;
};

struct Probe {
  Availability availability;
  DeviceDescription device;
  int index = 0;         // among the driver's devices: BackendOptions::device
  int device_count = 0;  // the driver's devices, where it could be asked
  CUdevice ordinal = 0;
  int max_shared = 48 * 1024;
};

void probe_check(CUresult result, std::string_view call) {
  try {
    check(result, call);
  } catch (const Error& e) {
    throw ProbeFailure{e.what()};
  }
}

int attribute(CUdevice device, int which, std::string_view what) {
  int value = 0;
  probe_check(driver().api.device_get_attribute(&value, which, device),
              fmt::format("cuDeviceGetAttribute({})", what));
  return value;
}

// Describes GPU 0; the count says how many more of the same kind may follow.
DeviceDescription describe_gpu(CUdevice device, int device_count, int driver_version) {
  const DriverApi& api = driver().api;
  char name[256] = {};
  probe_check(api.device_get_name(name, int(sizeof(name)), device), "cuDeviceGetName");
  size_t memory = 0;
  probe_check(api.device_total_mem(&memory, device), "cuDeviceTotalMem_v2");
  int major = attribute(device, kAttrComputeCapabilityMajor, "compute capability major");
  int minor = attribute(device, kAttrComputeCapabilityMinor, "compute capability minor");

  DeviceDescription description;
  description.name = name;
  description.fingerprint = fingerprint_of(
      {description.name, fmt::format("{}.{}", major, minor), std::to_string(driver_version)});
  description.capabilities = {
      {"compute_capability", fmt::format("{}.{}", major, minor)},
      {"sm_arch", fmt::format("sm_{}{}", major, minor)},
      {"multiprocessors", attribute(device, kAttrMultiprocessorCount, "multiprocessor count")},
      {"shared_memory_per_block_optin_bytes",
       attribute(device, kAttrMaxSharedMemoryPerBlockOptin, "shared memory per block")},
      {"l2_bytes", attribute(device, kAttrL2CacheSize, "L2 cache size")},
      {"memory_bytes", memory},
      {"driver_version", driver_version},
      {"device_count", device_count},
  };
  // The weights stream through tensor-core fragments (sm_80 and later) unless switched off.
  CodegenOptions options = cuda::default_codegen_options(description, false, false);
  options.register_weights = major >= 8 && !turned_off("YIRAGE_CUDA_STREAM");
  description.capabilities["search"] = cuda::search_space(options);
  description.capabilities["quant_matmul_formats"] = {"q4_0", "q4_1", "q8_0", "f16", "bf16"};
  return description;
}

Probe probe_driver(int index) {
  Probe probe;
  probe.index = index;
  probe.device.name = "no CUDA device";
  probe.device.capabilities = nlohmann::json::object();
  const Driver& d = driver();
  if (!d.loaded) {
    probe.availability.reason = d.reason;
    return probe;
  }
  try {
    const DriverApi& api = d.api;
    probe_check(api.init(0), "cuInit");
    int driver_version = 0;
    probe_check(api.driver_get_version(&driver_version), "cuDriverGetVersion");
    int count = 0;
    probe_check(api.device_get_count(&count), "cuDeviceGetCount");
    probe.device_count = count;
    if (count == 0) throw ProbeFailure{"the NVIDIA driver reports 0 CUDA devices"};
    if (index >= count)
      throw ProbeFailure{
          fmt::format("there is no CUDA device {}: the driver reports {}", index, count)};
    probe_check(api.device_get(&probe.ordinal, index), "cuDeviceGet");
    probe.device = describe_gpu(probe.ordinal, count, driver_version);
    probe.max_shared = probe.device.capabilities["shared_memory_per_block_optin_bytes"].get<int>();
    std::string why_not;
    if (!nvrtc_available(&why_not) && std::system("nvcc --version > /dev/null 2>&1") != 0)
      throw ProbeFailure{
          fmt::format("found {} but cannot compile kernels: {}, and no nvcc on the PATH",
                      probe.device.name, why_not)};
    probe.device.capabilities["matmul_library"] =
        !blas().loaded ? fmt::format("none: {}", blas().reason)
        : blas().lt_loaded
            ? fmt::format("{} and {} (algorithms timed)", blas().library, blas().lt_library)
            : fmt::format("{} (default algorithm; {})", blas().library, blas().lt_reason);
    probe.availability.available = true;
  } catch (const ProbeFailure& failure) {
    probe.availability.reason = failure.reason;
  }
  return probe;
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CUcontext context, size_t bytes) : context_(context), bytes_(bytes) {
    check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
    // cuMemAlloc refuses 0 bytes; an empty tensor still gets an address.
    check(driver().api.mem_alloc(&ptr_, std::max<size_t>(bytes, 1)),
          fmt::format("cuMemAlloc({} bytes)", bytes));
  }
  ~CudaBuffer() override {
    driver().api.ctx_set_current(context_);
    driver().api.mem_free(ptr_);
  }
  size_t size() const override { return bytes_; }
  void write(std::span<const std::byte> bytes) override {
    if (bytes.size() != bytes_)
      fail("cuda: buffer write of {} bytes into {}", bytes.size(), bytes_);
    check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
    if (bytes_) check(driver().api.memcpy_htod(ptr_, bytes.data(), bytes_), "cuMemcpyHtoD");
  }
  void read(std::span<std::byte> bytes) const override {
    if (bytes.size() != bytes_) fail("cuda: buffer read of {} bytes from {}", bytes.size(), bytes_);
    check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
    if (bytes_) check(driver().api.memcpy_dtoh(bytes.data(), ptr_, bytes_), "cuMemcpyDtoH");
  }
  CUdeviceptr address() const { return ptr_; }

 private:
  CUcontext context_;
  size_t bytes_;
  CUdeviceptr ptr_ = 0;
};

struct LoadedKernel {
  CUfunction function = nullptr;  // null for a library call
  const KernelLaunch* launch = nullptr;
};

// A module's buffers for one launch, resolved: every slot's address; for each group of library
// products (LibraryGemm::group), the device array of its operands' addresses and what was last
// copied there (kept until the stream has read it); and the CUDA graph captured on them. A
// module keeps one for its launches; timing makes one per input set, so that rotating the sets
// replays graphs instead of enqueueing every kernel from the host.
struct Binding {
  Binding() = default;
  Binding(const Binding&) = delete;
  Binding& operator=(const Binding&) = delete;
  ~Binding() { drop_graph(); }

  void drop_graph() {
    const DriverApi& api = driver().api;
    if (exec) api.graph_exec_destroy(exec);
    if (graph) api.graph_destroy(graph);
    exec = nullptr;
    graph = nullptr;
  }

  std::vector<CUdeviceptr> addresses;
  std::vector<std::unique_ptr<CudaBuffer>> tables;  // by kernel; null where it is no group
  std::vector<std::vector<CUdeviceptr>> uploaded;   // by kernel
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

// A CUDA event, destroyed with its scope.
class Event {
 public:
  Event() { check(driver().api.event_create(&event_, 0), "cuEventCreate"); }
  ~Event() { driver().api.event_destroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }

 private:
  CUevent event_ = nullptr;
};

// Launches per timed sample when the plan leaves it to the backend, as the benchmark's
// time_module took them: enough that the GPU has the next replay queued while it runs this
// one, so that a sample times the device, not the host's launch latency.
constexpr int kLaunchesPerSample = 100;

class CudaModule final : public Module {
 public:
  // `programmatic`: kernels that wait on prior grids launch as programmatic dependents.
  CudaModule(CUcontext context, CUstream stream, Program program, const std::string& arch,
             int max_shared, BlasHandle* blas, bool programmatic)
      : context_(context),
        stream_(stream),
        program_(std::move(program)),
        blas_(blas),
        programmatic_(programmatic) {
    const DriverApi& api = driver().api;
    check(api.ctx_set_current(context_), "cuCtxSetCurrent");
    std::map<std::string, CUmodule> by_source;
    for (const KernelLaunch& k : program_.kernels) {
      if (k.gemm) {
        if (!blas_) fail("cuda: {} needs cuBLAS, which is not loaded", k.what);
        blas_->prepare(*k.gemm, k.what);
        LoadedKernel call;
        call.launch = &k;
        kernels_.push_back(call);
        continue;
      }
      auto [at, fresh] = by_source.emplace(k.source, nullptr);
      if (fresh) {
        std::vector<char> cubin =
            cached_cubin(k.source, k.arch_specific ? arch + "a" : arch, k.name);
        check(api.module_load_data(&at->second, cubin.data()),
              fmt::format("cuModuleLoadData for {}", k.what));
        modules_.push_back(at->second);
      }
      LoadedKernel loaded;
      loaded.launch = &k;
      check(api.module_get_function(&loaded.function, at->second, k.name.c_str()),
            fmt::format("cuModuleGetFunction({})", k.name));
      if (k.shared_bytes > size_t(max_shared))
        fail("cuda: {} needs {} bytes of shared memory; the device allows {}", k.what,
             k.shared_bytes, max_shared);
      if (k.shared_bytes > 48 * 1024)
        check(api.func_set_attribute(loaded.function, kFuncAttrMaxDynamicSharedBytes,
                                     int(k.shared_bytes)),
              fmt::format("cuFuncSetAttribute(max dynamic shared memory) for {}", k.what));
      kernels_.push_back(std::move(loaded));
    }
    for (const Slot& slot : program_.slots)
      if (slot.kind == SlotKind::scratch)
        scratch_.push_back(std::make_unique<CudaBuffer>(context_, slot.bytes));
    allocate_tables(current_);
  }

  ~CudaModule() override {
    const DriverApi& api = driver().api;
    api.ctx_set_current(context_);
    current_.drop_graph();  // before the code it runs is unloaded
    for (CUmodule m : modules_) api.module_unload(m);
  }

  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    const DriverApi& api = driver().api;
    check(api.ctx_set_current(context_), "cuCtxSetCurrent");
    std::vector<CUdeviceptr> addresses = resolve(inputs, outputs);
    if (addresses == current_.addresses) {
      if (!current_.exec) capture(current_);
      check(api.graph_launch(current_.exec, stream_), "cuGraphLaunch");
      return;
    }
    current_.drop_graph();
    current_.addresses = std::move(addresses);
    upload_pointer_tables(current_);
    enqueue(current_);
  }

  int kernel_count() const override { return int(kernels_.size()); }

  // Backend::time for this module. Each set is bound, run once directly and captured into a
  // graph of its own, as launch() does on the first two launches on new buffers; each graph is
  // replayed once untimed (its first launch uploads it); then come the plan's warm-up and the
  // samples, each timed by CUDA events around its replays. Both untimed passes cover every set
  // once, so launch k of the plan still runs on set k.
  Timings time(std::span<const LaunchBuffers> sets, const TimingPlan& plan) {
    check_timing_plan(sets, plan);
    const DriverApi& api = driver().api;
    check(api.ctx_set_current(context_), "cuCtxSetCurrent");
    std::vector<std::unique_ptr<Binding>> bindings;
    // Declared after the bindings, so destroyed before them: the stream must be done with their
    // graphs and tables, on every way out.
    struct Drain {
      CUstream stream;
      ~Drain() { driver().api.stream_synchronize(stream); }
    } drain{stream_};
    for (const LaunchBuffers& set : sets) {
      bindings.push_back(std::make_unique<Binding>());
      Binding& binding = *bindings.back();
      binding.addresses = resolve(set.inputs, set.outputs);
      allocate_tables(binding);
      upload_pointer_tables(binding);  // in stream order, before the steps that read them
      enqueue(binding);
      capture(binding);
    }
    size_t next = 0;
    auto replay = [&] {
      check(api.graph_launch(bindings[next]->exec, stream_), "cuGraphLaunch");
      next = (next + 1) % bindings.size();
    };
    for (size_t i = 0; i < bindings.size(); ++i) replay();
    for (int i = 0; i < plan.warmup; ++i) replay();
    Timings timings;
    timings.launches_per_repetition =
        plan.launches_per_repetition > 0 ? plan.launches_per_repetition : kLaunchesPerSample;
    const Event start, stop;
    for (int r = 0; r < plan.repetitions; ++r) {
      check(api.event_record(start.get(), stream_), "cuEventRecord");
      for (int i = 0; i < timings.launches_per_repetition; ++i) replay();
      check(api.event_record(stop.get(), stream_), "cuEventRecord");
      check(api.event_synchronize(stop.get()), "cuEventSynchronize (a kernel failed)");
      float ms = 0;
      check(api.event_elapsed_time(&ms, start.get(), stop.get()), "cuEventElapsedTime");
      timings.seconds_per_launch.push_back(double(ms) * 1e-3 / timings.launches_per_repetition);
    }
    return timings;
  }

 private:
  // The device arrays of the groups' operand addresses, one per group of library products.
  void allocate_tables(Binding& binding) const {
    binding.tables.resize(kernels_.size());
    binding.uploaded.resize(kernels_.size());
    for (size_t i = 0; i < kernels_.size(); ++i) {
      const std::optional<LibraryGemm>& gemm = kernels_[i].launch->gemm;
      if (gemm && gemm->group > 1)
        binding.tables[i] =
            std::make_unique<CudaBuffer>(context_, size_t(3 * gemm->group) * sizeof(CUdeviceptr));
    }
  }

  std::vector<CUdeviceptr> resolve(std::span<Buffer* const> inputs,
                                   std::span<Buffer* const> outputs) const {
    std::vector<CUdeviceptr> addresses;
    size_t scratch = 0;
    for (const Slot& slot : program_.slots) {
      if (slot.kind == SlotKind::view) {
        addresses.push_back(addresses[size_t(slot.index)] + slot.offset);
        continue;
      }
      const CudaBuffer* buffer = nullptr;
      if (slot.kind == SlotKind::scratch) {
        buffer = scratch_[scratch++].get();
      } else {
        std::span<Buffer* const> list = slot.kind == SlotKind::input ? inputs : outputs;
        if (size_t(slot.index) >= list.size())
          fail("cuda: module launched with {} {} buffers, needs more", list.size(),
               slot.kind == SlotKind::input ? "input" : "output");
        buffer = dynamic_cast<const CudaBuffer*>(list[size_t(slot.index)]);
        if (!buffer) fail("cuda: a buffer passed to a cuda module was not allocated by it");
        if (buffer->size() != slot.bytes)
          fail("cuda: {} buffer {} holds {} bytes, the tensor needs {}",
               slot.kind == SlotKind::input ? "input" : "output", slot.index, buffer->size(),
               slot.bytes);
      }
      addresses.push_back(buffer->address());
    }
    return addresses;
  }

  // The addresses of a step's arguments, its slots resolved against `addresses`.
  static std::vector<CUdeviceptr> arguments(const KernelLaunch& step,
                                            const std::vector<CUdeviceptr>& addresses) {
    std::vector<CUdeviceptr> values;
    for (int slot : step.args) values.push_back(addresses[size_t(slot)]);
    return values;
  }

  // The groups' arrays of addresses, for the binding's addresses: copied in stream order, so
  // that calls still queued read the arrays they were enqueued with. A captured graph reads the
  // arrays as they are when it replays, so this runs whenever the addresses change, before the
  // launch that runs the steps directly; the next launch on the same addresses captures them.
  void upload_pointer_tables(Binding& binding) {
    for (size_t i = 0; i < kernels_.size(); ++i) {
      if (!binding.tables[i]) continue;
      const KernelLaunch& k = *kernels_[i].launch;
      std::vector<CUdeviceptr>& uploaded = binding.uploaded[i];
      uploaded = BlasHandle::group_pointers(arguments(k, binding.addresses));
      check(driver().api.memcpy_htod_async(binding.tables[i]->address(), uploaded.data(),
                                           uploaded.size() * sizeof(CUdeviceptr), stream_),
            fmt::format("cuMemcpyHtoDAsync (the operands' addresses) for {}", k.what));
    }
  }

  void enqueue(const Binding& binding) {
    const DriverApi& api = driver().api;
    const std::vector<CUdeviceptr>& addresses = binding.addresses;
    for (size_t i = 0; i < kernels_.size(); ++i) {
      const LoadedKernel& k = kernels_[i];
      if (binding.tables[i]) {
        blas_->gemm_group(*k.launch->gemm, binding.tables[i]->address(), k.launch->what);
        continue;
      }
      if (const std::optional<LibraryGemm>& g = k.launch->gemm) {
        const std::vector<int>& slots = k.launch->args;
        blas_->gemm(*g, addresses[size_t(slots[0])], addresses[size_t(slots[1])],
                    addresses[size_t(slots[2])], g->adds ? addresses[size_t(slots[3])] : 0,
                    k.launch->what);
        continue;
      }
      std::vector<CUdeviceptr> values = arguments(*k.launch, addresses);
      std::vector<void*> params;
      for (CUdeviceptr& v : values) params.push_back(&v);
      std::vector<EncodedTensorMap> maps;
      maps.reserve(k.launch->tensor_maps.size());
      for (const TensorMapArg& m : k.launch->tensor_maps)
        maps.push_back(encode(m, values.at(size_t(m.arg)), k.launch->what));
      for (EncodedTensorMap& m : maps) params.push_back(&m);
      const auto& grid = k.launch->grid;
      if (programmatic_ && k.launch->waits_on_prior_grids) {
        LaunchAttribute programmatic;
        programmatic.id = kLaunchAttrProgrammaticStreamSerialization;
        programmatic.value.flag = 1;
        const LaunchConfig config{{grid[0], grid[1], grid[2]},
                                  {k.launch->threads, 1, 1},
                                  unsigned(k.launch->shared_bytes),
                                  stream_,
                                  &programmatic,
                                  1};
        check(api.launch_kernel_ex(&config, k.function, params.data(), nullptr),
              fmt::format("cuLaunchKernelEx for {}", k.launch->what));
        continue;
      }
      check(api.launch_kernel(k.function, grid[0], grid[1], grid[2], k.launch->threads, 1, 1,
                              unsigned(k.launch->shared_bytes), stream_, params.data(), nullptr),
            fmt::format("cuLaunchKernel for {}", k.launch->what));
    }
  }

  // A CUtensorMap: 128 opaque bytes, 64-byte aligned.
  struct alignas(64) EncodedTensorMap {
    unsigned long long opaque[16];
  };

  static EncodedTensorMap encode(const TensorMapArg& m, CUdeviceptr address,
                                 const std::string& what) {
    const DriverApi& api = driver().api;
    if (!api.tensor_map_encode_tiled)
      fail("cuda: {} needs a tensor map, and this driver lacks cuTensorMapEncodeTiled", what);
    EncodedTensorMap map{};
    const unsigned long long dims[2] = {m.dims[0], m.dims[1]};
    const unsigned long long strides[1] = {m.row_bytes};
    const unsigned box[2] = {m.box[0], m.box[1]}, element_strides[2] = {1, 1};
    check(
        api.tensor_map_encode_tiled(
            &map, m.dtype == ir::DType::bf16 ? kTensorMapBfloat16 : kTensorMapFloat16, 2,
            reinterpret_cast<void*>(address), dims, strides, box, element_strides, 0,
            m.swizzle ? kTensorMapSwizzle128 : kTensorMapSwizzleNone, kTensorMapL2Promotion256, 0),
        fmt::format("cuTensorMapEncodeTiled for {} ([{} x {}] in boxes of {} x {})", what,
                    m.dims[1], m.dims[0], m.box[1], m.box[0]));
    return map;
  }

  void capture(Binding& binding) {
    const DriverApi& api = driver().api;
    check(api.stream_begin_capture(stream_, kCaptureModeThreadLocal), "cuStreamBeginCapture");
    try {
      enqueue(binding);
    } catch (...) {
      CUgraph broken = nullptr;
      api.stream_end_capture(stream_, &broken);
      if (broken) api.graph_destroy(broken);
      throw;
    }
    check(api.stream_end_capture(stream_, &binding.graph), "cuStreamEndCapture");
    check(api.graph_instantiate(&binding.exec, binding.graph, 0), "cuGraphInstantiate");
  }

  CUcontext context_;
  CUstream stream_;
  Program program_;
  BlasHandle* blas_;  // null without cuBLAS
  const bool programmatic_;
  std::vector<CUmodule> modules_;
  std::vector<LoadedKernel> kernels_;
  std::vector<std::unique_ptr<CudaBuffer>> scratch_;
  Binding current_;  // the buffers of the latest launch
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : probe_(probe_driver(device)) {}

  std::string_view name() const override { return "cuda"; }
  Availability availability() const override { return probe_.availability; }
  DeviceDescription device() const override { return probe_.device; }
  int device_count() const override { return std::max(1, probe_.device_count); }
  BackendOptions options() const override { return {.device = probe_.index}; }

  // cuMemAlloc's memory: on the device, aligned for any access (256 bytes in practice; 128 is
  // what TMA needs).
  BufferType buffer_type() const override { return {.host_visible = false, .alignment = 256}; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_unique<CudaBuffer>(context(), bytes);
  }

  std::unique_ptr<Module> compile(const ir::KernelGraph& graph) override {
    CUcontext ctx = context();
    const CodegenOptions options = codegen_options();
    if (options.library_matmul)
      std::call_once(blas_once_,
                     [&] { blas_handle_ = std::make_unique<BlasHandle>(ctx, stream_); });
    return std::make_unique<CudaModule>(ctx, stream_, lower(graph, options), arch(),
                                        probe_.max_shared, blas_handle_.get(),
                                        programmatic_launch_usable());
  }

  // The lowering's own plan of the body's shared memory, which the description's limits estimate.
  std::string reject_body(const ir::BlockGraph& body) const override {
    return cuda::reject_body(body, codegen_options());
  }

  void synchronize() override {
    check(driver().api.ctx_set_current(context()), "cuCtxSetCurrent");
    check(driver().api.stream_synchronize(stream_), "cuStreamSynchronize (a kernel failed)");
  }

  // CUDA events on the modules' stream, around batches of CUDA-graph replays (CudaModule::time).
  Timings time(Module& module, std::span<const LaunchBuffers> sets,
               const TimingPlan& plan) override {
    context();  // throws when unavailable
    auto* cuda_module = dynamic_cast<CudaModule*>(&module);
    if (!cuda_module) fail("cuda: time() needs a module compiled by the cuda backend");
    return cuda_module->time(sets, plan);
  }

  std::string codegen_settings() const override {
    const CodegenOptions o = codegen_options();
    return fmt::format(
        "arch={} library_matmul={} fold_adds={} group_products={} tensor_maps={} "
        "register_weights={} clusters={} register_rows={} wgmma={} programmatic_launch={} "
        "cublaslt={}",
        arch(), o.library_matmul, o.fold_adds, o.group_products, o.tensor_maps, o.register_weights,
        o.clusters, o.register_rows, o.wgmma, programmatic_launch_usable(), blas().lt_loaded);
  }

  std::string arch() const { return probe_.device.capabilities.value("sm_arch", "sm_80"); }

  // The device's defaults, less the features a YIRAGE_CUDA_* switch turns off (for comparing
  // against the code without them; codegen_settings() keys the tuning cache by the result).
  CodegenOptions codegen_options() const {
    CodegenOptions options = cuda::default_codegen_options(
        probe_.device, blas().loaded, driver().api.tensor_map_encode_tiled != nullptr);
    options.fold_adds = options.fold_adds && !turned_off("YIRAGE_CUDA_FOLD_ADDS");
    options.group_products = options.group_products && !turned_off("YIRAGE_CUDA_GROUP_PRODUCTS");
    options.tensor_maps = options.tensor_maps && !turned_off("YIRAGE_CUDA_TMA");
    options.register_weights = options.register_weights && !turned_off("YIRAGE_CUDA_STREAM");
    options.clusters = options.clusters && !turned_off("YIRAGE_CUDA_CLUSTER");
    options.register_rows = options.register_rows && !turned_off("YIRAGE_CUDA_ROWS");
    options.wgmma = options.wgmma && !turned_off("YIRAGE_CUDA_WGMMA");
    return options;
  }

  // Programmatic dependent launch needs sm_90 and cuLaunchKernelEx; YIRAGE_CUDA_PDL=0 turns it
  // off, for comparing.
  bool programmatic_launch_usable() const {
    if (turned_off("YIRAGE_CUDA_PDL")) return false;
    const std::string cc = probe_.device.capabilities.value("compute_capability", "0.0");
    return driver().api.launch_kernel_ex && std::stoi(cc) >= 9;
  }

 private:
  [[noreturn]] void unavailable() const {
    fail("backend '{}' is unavailable: {}", device_name(name(), probe_.index),
         probe_.availability.reason);
  }

  // The device's primary context (the one the CUDA runtime and PyTorch share) and the stream
  // every module runs on, made on first use.
  CUcontext context() {
    if (!probe_.availability.available) unavailable();
    std::call_once(once_, [&] {
      const DriverApi& api = driver().api;
      check(api.primary_ctx_retain(&context_, probe_.ordinal), "cuDevicePrimaryCtxRetain");
      check(api.ctx_set_current(context_), "cuCtxSetCurrent");
      // A blocking stream: it waits for, and is waited on by, the legacy default stream that the
      // synchronous copies of CudaBuffer use, so reads and writes order with launches.
      check(api.stream_create(&stream_, 0), "cuStreamCreate");
    });
    check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
    return context_;
  }

  Probe probe_;
  std::once_flag once_;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::once_flag blas_once_;
  std::unique_ptr<BlasHandle> blas_handle_;
};

}  // namespace

namespace cuda {

// A block is a thread block, whose tiles live in shared memory; the lowering keeps at least three
// buffers of each tile the loop walks (block_lowering.h: deeper pipelines only where room is
// left), one of every other tile, so three stages and the rest must fit the block's shared
// memory, which is the only limit; a grid of up to 64 blocks per SM. The rates are rough per-SM
// figures of recent data-centre GPUs, used only to rank candidates until profiles exist.
nlohmann::json search_space(const CodegenOptions& options) {
  const int64_t multiprocessors = std::max<int64_t>(options.multiprocessors, 1);
  nlohmann::json space = {
      {"max_tile_bytes_total", options.max_shared_bytes},
      {"pipeline_stages", kMinPipelineStages},
      // What the lowering computes where it is read, or folds from registers (block_lowering.h).
      {"in_registers", {"single_use_elementwise", "summed_into_accumulator"}},
      {"max_grid_blocks", multiprocessors * 64},
      {"parallel_units", multiprocessors},
      {"bytes_per_second", 25e9 * double(multiprocessors)},
      {"flops_per_second", 2e12 * double(multiprocessors)},
      {"launch_seconds", 4e-6},
  };
  if (nlohmann::json streamed = streamed_weights_space(options); !streamed.is_null())
    space["streamed_weights"] = std::move(streamed);
  return space;
}

CodegenOptions default_codegen_options(const DeviceDescription& device, bool library_matmul,
                                       bool tensor_map_encoding) {
  const std::string cc = device.capabilities.value("compute_capability", "0.0");
  const bool hopper_or_later = std::stoi(cc) >= 9;
  CodegenOptions options;
  options.max_shared_bytes =
      device.capabilities.value("shared_memory_per_block_optin_bytes", options.max_shared_bytes);
  options.multiprocessors = device.capabilities.value("multiprocessors", int64_t{0});
  options.library_matmul = library_matmul;
  options.tensor_maps = tensor_map_encoding && hopper_or_later;
  options.clusters = hopper_or_later;
  // wgmma exists on sm_90a only: compute capability 9.0 exactly.
  options.wgmma = cc == "9.0";
  return options;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options.device);
}

}  // namespace yirage::backend
