// The "cpu" backend: kernel graphs and fused kernels lowered to C++ with SIMD (codegen*.cpp),
// compiled by the system compiler into a shared object (jit.cpp) and run on the host's cores.
//
// It is available when a C++ compiler with OpenMP is found and can build and load a probe
// module; availability() says what failed otherwise. Threads: BackendOptions::threads, else
// YIRAGE_CPU_THREADS, else the cores the process may use (the device description's "cores").
// Compiles run with a timeout of YIRAGE_CPU_COMPILE_TIMEOUT seconds (default 300).
//
// Library matmuls (ops.h MatmulOp::library) call OpenBLAS's cblas_sgemm (blas.h). The device
// description's capabilities "library_matmul" is {"name": "OpenBLAS 0.3.21", "threading",
// "config", "dtypes": ["f32"]} when the library loaded, else {"unavailable": why}; compiling a
// library matmul without it is an error naming the node, never a silent fallback to generated
// code. The library's name and threading are part of codegen_settings(). Capabilities
// "quant_matmul_prefetch" is true: quant_matmul honours ops.h QuantMatmulOp::prefetch; its
// "quant_matmul_formats" are the GGUF block formats, not 16-bit float weights.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend_factories.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/codegen.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/jit.h"
#include "support/error.h"
#include "support/system_memory.h"

namespace yirage::backend {
namespace {

using WorkspaceFn = size_t (*)(int);
using RunFn = int (*)(void* const*, void* const*, char*, int, char*, size_t);

// Host memory aligned for the widest vectors. Large buffers (weights) are asked for transparent
// huge pages, as NumPy asks for its arrays: the hardware prefetchers stop at every 4 KiB page
// boundary, and streaming a 470 MB f32 weight on 2 threads went from 9.6-13.6 ms to 8.3-8.7 ms
// with 2 MiB pages (git show 94f00b8:bench/cpu_gemm_micro.cpp, 1x28672x4096, interleaved runs).
class CpuBuffer final : public Buffer {
 public:
  static constexpr size_t kAlignment = 64;  // the least alignment of any buffer

  explicit CpuBuffer(size_t bytes) : size_(bytes) {
    constexpr size_t kHugePage = size_t(2) << 20;
    const bool huge = bytes >= 2 * kHugePage;
    const size_t align = huge ? kHugePage : kAlignment;
    const size_t padded = (bytes + 64 + align - 1) / align * align;
    data_ = static_cast<std::byte*>(std::aligned_alloc(align, padded));
    if (!data_) fail("cpu backend: cannot allocate a buffer of {} bytes", bytes);
    // Advice only: where the kernel has no transparent huge pages this fails and changes nothing.
    if (huge) madvise(data_, padded, MADV_HUGEPAGE);
  }
  ~CpuBuffer() override { std::free(data_); }
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;

  size_t size() const override { return size_; }
  void write(std::span<const std::byte> bytes) override {
    check(bytes.size(), "write");
    std::memcpy(data_, bytes.data(), bytes.size());
  }
  void read(std::span<std::byte> bytes) const override {
    check(bytes.size(), "read");
    std::memcpy(bytes.data(), data_, bytes.size());
  }
  void* host_address() override { return data_; }

 private:
  void check(size_t bytes, std::string_view what) const {
    if (bytes != size_)
      fail("cpu buffer {}: {} bytes given for a buffer of {} bytes", what, bytes, size_);
  }
  size_t size_;
  std::byte* data_;
};

class CpuModule final : public Module {
 public:
  // `blas`: the library for the graph's library matmuls; null when it has none.
  CpuModule(const ir::KernelGraph& graph, std::shared_ptr<cpu::SharedObject> object, int threads,
            const cpu::BlasLibrary* blas)
      : object_(std::move(object)), threads_(threads) {
    run_ = reinterpret_cast<RunFn>(object_->symbol("yr_run"));
    // The same library's functions each time, so a module loaded twice sees the same values.
    if (blas) *static_cast<cpu::BlasTable*>(object_->symbol("yr_blas")) = blas->table;
    auto workspace = reinterpret_cast<WorkspaceFn>(object_->symbol("yr_workspace_bytes"));
    workspace_ = std::make_unique<CpuBuffer>(workspace(threads_));
    for (const ir::TensorRef& in : graph.inputs()) {
      input_names_.push_back(graph.node(in.node).name);
      input_bytes_.push_back(bytes_of(graph.type(in)));
    }
    for (const ir::GraphOutput& out : graph.outputs()) {
      output_names_.push_back(out.name);
      output_bytes_.push_back(bytes_of(graph.type(out.tensor)));
    }
  }

  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    std::vector<void*> in = addresses("input", inputs, input_names_, input_bytes_);
    std::vector<void*> out = addresses("output", outputs, output_names_, output_bytes_);
    std::lock_guard lock(mutex_);  // one workspace: launches of one module run one at a time
    char error[512] = {};
    const int status = run_(in.data(), out.data(), static_cast<char*>(workspace_->host_address()),
                            threads_, error, sizeof error);
    if (status != 0) fail("cpu launch: {}", error);
  }

 private:
  static size_t bytes_of(const ir::TensorType& t) {
    return size_t(ir::num_elements(t.dims)) * ir::dtype_size(t.dtype);
  }

  static std::vector<void*> addresses(std::string_view what, std::span<Buffer* const> buffers,
                                      const std::vector<std::string>& names,
                                      const std::vector<size_t>& bytes) {
    if (buffers.size() != names.size())
      fail("cpu launch: {} {} buffers given, the graph has {}", buffers.size(), what, names.size());
    std::vector<void*> result;
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i]->size() != bytes[i])
        fail("cpu launch: {} '{}' needs {} bytes, its buffer has {}", what, names[i], bytes[i],
             buffers[i]->size());
      void* address = buffers[i]->host_address();
      if (!address)
        fail("cpu launch: {} '{}' is not in host memory; allocate it with the cpu backend", what,
             names[i]);
      result.push_back(address);
    }
    return result;
  }

  std::shared_ptr<cpu::SharedObject> object_;
  int threads_;
  RunFn run_ = nullptr;
  std::unique_ptr<CpuBuffer> workspace_;
  std::vector<std::string> input_names_, output_names_;
  std::vector<size_t> input_bytes_, output_bytes_;
  std::mutex mutex_;
};

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  const int parsed = std::atoi(value);
  return parsed > 0 ? parsed : fallback;
}

// A module with every kind of code the generator emits: OpenMP, vectors, f16 conversions.
constexpr const char* kProbeGraph = R"({"schema": "yirage.kernel_graph", "version": 1,
  "nodes": [{"name": "x", "op": "input", "dtype": "f16", "shape": [4, 8]},
            {"name": "w", "op": "input", "dtype": "f16", "shape": [8, 4]},
            {"name": "y", "op": "matmul", "inputs": ["x", "w"]}],
  "outputs": [{"tensor": "y", "name": "y"}]})";

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : device_(cpu::describe_cpu(cpu::read_host_cpu())) {
    const nlohmann::json& cores = device_.capabilities["cores"];
    threads_ = options.threads > 0 ? options.threads
                                   : env_int("YIRAGE_CPU_THREADS",
                                             cores.is_number_integer() ? cores.get<int>() : 1);
  }

  std::string_view name() const override { return "cpu"; }

  Availability availability() const override {
    std::call_once(probe_once_, [this] {
      try {
        toolchain_ = cpu::make_toolchain(device_);
        ir::KernelGraph probe = ir::parse_kernel_graph(kProbeGraph);
        cpu::CompiledObject object =
            cpu::compile_and_load(cpu::generate_source(probe), *toolchain_, timeout());
        object.object->symbol("yr_run");
        availability_ = {true, {}};
      } catch (const std::exception& e) {
        availability_ = {false, e.what()};
      }
    });
    return availability_;
  }

  DeviceDescription device() const override {
    DeviceDescription d = device_;
    d.capabilities["threads"] = threads_;
    d.capabilities["quant_matmul_prefetch"] = true;
    d.capabilities["quant_matmul_formats"] = {"q4_0", "q4_1", "q8_0"};
    if (const std::optional<uint64_t> memory = physical_memory_bytes())
      d.capabilities["memory_bytes"] = *memory;
    std::string why;
    if (const auto& blas = cpu::openblas(why))
      d.capabilities["library_matmul"] = {{"name", blas->name},
                                          {"threading", blas->threading},
                                          {"config", blas->config},
                                          {"dtypes", {"f32"}}};
    else
      d.capabilities["library_matmul"] = {{"unavailable", why}};
    return d;
  }

  BufferType buffer_type() const override {
    return {.host_visible = true, .alignment = CpuBuffer::kAlignment};
  }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    require_available();
    return std::make_unique<CpuBuffer>(bytes);
  }

  // The compiler, its flags and the thread count: each changes which candidate is fastest.
  std::string codegen_settings() const override {
    if (!availability().available) return "unavailable";
    std::string why;
    const auto& blas = cpu::openblas(why);
    return fmt::format("compiler={} flags={} threads={} blas={}", toolchain_->version,
                       fmt::join(toolchain_->flags, " "), threads_,
                       blas ? fmt::format("{} ({})", blas->name, blas->threading) : "none");
  }

  BackendOptions options() const override { return {.threads = threads_}; }

  std::unique_ptr<Module> compile(const ir::KernelGraph& graph) override {
    require_available();
    check_fits_memory("cpu", device(), graph);
    const cpu::BlasLibrary* blas = library_for(graph);
    const std::string source = cpu::generate_source(graph);
    cpu::CompiledObject object = cpu::compile_and_load(source, *toolchain_, timeout());
    return std::make_unique<CpuModule>(graph, object.object, threads_, blas);
  }

 private:
  void require_available() const {
    Availability a = availability();
    if (!a.available) fail("backend 'cpu' is unavailable: {}", a.reason);
  }

  // The BLAS for the graph's library matmuls, null when it has none; an error naming the first
  // one when the library is missing.
  static const cpu::BlasLibrary* library_for(const ir::KernelGraph& graph) {
    for (const ir::Node& node : graph.nodes()) {
      if (!ir::is_library_matmul(node.op)) continue;
      std::string why;
      const auto& blas = cpu::openblas(why);
      if (!blas)
        fail("cpu backend: node '{}' is a library matmul, but no BLAS library is available: {}",
             node.name, why);
      return &*blas;
    }
    return nullptr;
  }

  static double timeout() { return double(env_int("YIRAGE_CPU_COMPILE_TIMEOUT", 300)); }

  DeviceDescription device_;
  int threads_ = 1;
  mutable std::once_flag probe_once_;
  mutable Availability availability_;
  mutable std::optional<cpu::Toolchain> toolchain_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace yirage::backend
