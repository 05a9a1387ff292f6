// YiRage backends: where a program runs.
//
// A backend is three things, after ggml-backend's split: a *device* (what the hardware is: a
// name, a stable fingerprint, and the capabilities the search reads its space from), *buffers*
// (memory on that device), and an *executor* (compile a graph into a module, launch it, time
// it). Every backend lives in backend/<name>/ and is listed once in registry.cpp. Nothing
// outside this folder asks which backend it holds: code takes a `Backend&` and calls the entries
// below. A backend that cannot run on this machine still describes itself and says why it is
// unavailable; asking to run on it is an error, never a silent fallback to another backend.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/ir.h"

namespace yirage::backend {

struct DeviceDescription {
  std::string name;         // "AMD EPYC 9B14", "NVIDIA H200", ...
  std::string fingerprint;  // stable id of this exact device kind; keys the tuning cache
  // Facts the search and the code generators read: cores, vector ISA, cache sizes, shared
  // memory, compute capability, ... Keys are backend-specific and documented in each backend,
  // except "search", which every backend that can run fused kernels fills the same way: the
  // space the superoptimizer may search (src/search), an object of
  //   max_tile_bytes_in_loop  bytes of the tiles one block holds in one loop iteration
  //   max_tile_bytes_total    bytes of all of one block's tiles (loop body, accumulators, after)
  //   max_grid_blocks         blocks in one fused kernel's grid
  //   parallel_units          blocks that run at once (cores, SMs)
  //   bytes_per_second, flops_per_second, launch_seconds
  //                           rough rates for ranking candidates until they are profiled
  // and "library_matmul", which a backend that can run kernel-level matmuls as library calls
  // (ir::MatmulOp::library) fills the same way: {"name": "OpenBLAS 0.3.21", "dtypes": ["f32"],
  // ...} when it can, {"unavailable": why} when its library is missing. The tuner measures such
  // variants of every candidate against the generated ones.
  nlohmann::json capabilities;
};

struct Availability {
  bool available = false;
  std::string reason;  // why not, when not available
};

// Memory on a backend's device.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t size() const = 0;
  // Copies host bytes in and out; `bytes.size()` must equal size().
  virtual void write(std::span<const std::byte> bytes) = 0;
  virtual void read(std::span<std::byte> bytes) const = 0;
  // Optional: the buffer's address when the host can address it directly, else nullptr.
  virtual void* host_address() { return nullptr; }
};

// A graph compiled for one backend.
class Module {
 public:
  virtual ~Module() = default;
  // Runs the program: one buffer per graph input (KernelGraph::inputs() order) and per marked
  // output, each sized for its tensor. May return before the device finishes; see synchronize.
  virtual void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The registry name: "reference", "cpu", "cuda", ...
  virtual std::string_view name() const = 0;
  // Whether this machine can run the backend. Cheap, never throws.
  virtual Availability availability() const = 0;
  // What the device is. Also meaningful when unavailable, as far as can be known.
  virtual DeviceDescription device() const = 0;

  // The entries below throw yirage::Error when the backend is unavailable.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  // Lowers and compiles the program; throws yirage::Error naming the op it cannot handle.
  virtual std::unique_ptr<Module> compile(const ir::KernelGraph& graph) = 0;

  // Optional: waits until every launched module has finished. Backends that run synchronously
  // keep this default.
  virtual void synchronize() {}

  // Optional: the settings of this backend's code generator and runtime that change what a
  // compiled module runs or how fast (features turned on or off, debugging overrides, compiler
  // and flags, threads), as one stable line. The tuning cache keys its entries by it, so that a
  // winner tuned under other settings is never reused. Backends without such settings keep "".
  virtual std::string codegen_settings() const { return {}; }
};

struct BackendInfo {
  std::string name;
  Availability availability;
  DeviceDescription device;
};

// Every backend this build knows, in registry order, available or not.
std::vector<std::string> backend_names();
// The backend by name, created on first use with the default options and kept for the life of the
// process. Throws yirage::Error for an unknown name (listing the known ones) or an unavailable
// backend (with the reason).
Backend& get_backend(std::string_view name);

// What a caller may set when it creates a backend of its own.
struct BackendOptions {
  // Host threads for backends that run kernels on the CPU (cpu); 0: the backend's default
  // (for cpu, YIRAGE_CPU_THREADS, else every core the process may use). Others ignore it.
  int threads = 0;
};
// A new instance of the named backend, owned by the caller: for a setting that must not change
// the shared one, such as an LLM's thread count. Throws as get_backend does.
std::unique_ptr<Backend> create_backend(std::string_view name, const BackendOptions& options);
// Name, availability and device of every known backend; never throws.
std::vector<BackendInfo> describe_backends();
// The backend "auto" stands for: the first available one in the order of preference of
// registry.cpp.
std::string default_backend_name();

// Compiles and runs `graph` on `backend` with host inputs, returning host outputs. Outputs are
// poisoned before the launch so that elements the module never writes show up as NaN.
std::vector<ir::HostTensor> run_on(Backend& backend, const ir::KernelGraph& graph,
                                   const std::vector<ir::HostTensor>& inputs);

}  // namespace yirage::backend
