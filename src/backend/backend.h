// YiRage backends: where a program runs.
//
// A backend is three things, after ggml-backend's split: a *device* (what the hardware is: a
// name, a stable fingerprint, the capabilities the search reads its space from, and typed
// facts such as whether tuning on it is worth it), *buffers* (memory on that device, of a type
// that says whether the host sees it and how it is aligned), and an *executor* (compile a graph
// into a module, launch it, time it with the backend's own clock). Every backend lives in
// backend/<name>/ and is listed once in registry.cpp. Nothing outside this folder asks which
// backend it holds: code takes a `Backend&` and calls the entries below, and branches on what
// the backend states about itself, never on its name. As in ggml-backend-impl.h, every entry is
// commented and the optional ones (with a default here) say so. A backend that cannot run on
// this machine still describes itself and says why it is unavailable; asking to run on it is an
// error, never a silent fallback to another backend.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device.h"
#include "ir/ir.h"

namespace yirage::backend {

// What a backend's buffers are, as ggml-backend's buffer type says it.
struct BufferType {
  // Buffer::host_address() of every buffer allocate() returns is the host's pointer to its
  // bytes, so modules of this backend also take buffers over host memory the caller owns.
  bool host_visible = false;
  size_t alignment = 1;  // of the first byte of every buffer allocate() returns
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

// What buffer_from_host_ptr's buffer lets Buffer::write do to the caller's memory.
enum class HostAccess { read_only, read_write };

// A graph compiled for one backend.
class Module {
 public:
  virtual ~Module() = default;
  // Runs the program: one buffer per graph input (KernelGraph::inputs() order) and per marked
  // output, each sized for its tensor. May return before the device finishes; see synchronize.
  virtual void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) = 0;
  // Optional: how many device kernels one launch runs (library calls included), for reports;
  // -1 where the backend does not count them.
  virtual int kernel_count() const { return -1; }
};

// The buffers of one launch, as Module::launch takes them.
struct LaunchBuffers {
  std::span<Buffer* const> inputs;
  std::span<Buffer* const> outputs;
};

// What Backend::time runs: `warmup` untimed launches, then `repetitions` timed samples of
// `launches_per_repetition` launches each (0: as many as the backend's clock needs, see its
// time()).
struct TimingPlan {
  int warmup = 2;
  int repetitions = 5;
  int launches_per_repetition = 0;
};

// What Backend::time measured: one time per sample, in seconds per launch (the sample's time
// divided by its launches), in the order taken.
struct Timings {
  std::vector<double> seconds_per_launch;
  int launches_per_repetition = 1;  // as run
};

// What a caller may set when it creates a backend of its own.
struct BackendOptions {
  // Host threads for backends that run kernels on the CPU (cpu); 0: the backend's default
  // (for cpu, YIRAGE_CPU_THREADS, else every core the process may use). Others ignore it.
  int threads = 0;
  // Which of the backend's devices the instance runs on, from 0 to Backend::device_count() - 1.
  // The registry names the instance of device k "<backend>:k" ("cuda:1"); a plain name is device
  // 0. Backends of one device ignore it (the registry refuses an index past their count).
  int device = 0;
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
  // Optional: how many devices of this kind the machine has, as ggml-backend's registry counts a
  // backend's devices; the registry makes the instance of device k with BackendOptions::device = k.
  // Asked of device 0's instance; cheap, never throws. The default, 1, is right for backends of
  // one device (the host's CPU, the reference executor).
  virtual int device_count() const { return 1; }

  // Optional: what allocate() returns; cheap, never throws, also meaningful when unavailable.
  // The default promises nothing: device memory, no alignment.
  virtual BufferType buffer_type() const { return {}; }

  // The entries below throw yirage::Error when the backend is unavailable.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;

  // Optional: a buffer over `bytes` bytes of host memory at `data`, which the caller owns and keeps
  // alive while the buffer lives, that this backend's modules read and write in place, as
  // ggml-backend's buffer_from_host_ptr: a model's mapped weights, a NumPy array. The default
  // gives one where buffer_type() is host_visible, and nullptr elsewhere: the caller then copies
  // through allocate()'s buffers. With HostAccess::read_only, Buffer::write is an error; `what`
  // names the memory in the buffer's errors.
  virtual std::unique_ptr<Buffer> buffer_from_host_ptr(void* data, size_t bytes, HostAccess access,
                                                       std::string what);
  // Lowers and compiles the program; throws yirage::Error naming the op it cannot handle.
  virtual std::unique_ptr<Module> compile(const ir::KernelGraph& graph) = 0;

  // Optional: why this backend could not lower `body`, a fused kernel's block graph that fits the
  // description's limits (capabilities["search"], which only estimate the backend's memory), or
  // empty when it could. The search drops the bodies rejected here before proving them. Works
  // also where the backend is unavailable; the default, for backends whose limits are exact,
  // rejects nothing.
  virtual std::string reject_body(const ir::BlockGraph& body) const {
    (void)body;
    return {};
  }

  // Optional: waits until every launched module has finished. Backends that run synchronously
  // keep this default.
  virtual void synchronize() {}

  // Optional: times launches of `module` (compiled by this backend) by `plan` with this
  // backend's own clock. Launch k of the call (warm-up included) runs on sets[k % sets.size()],
  // so that a caller can rotate copies of the inputs and time weights from memory rather than
  // from the caches they would not stay in. The default times each sample with the host's
  // steady clock, from before its first launch to after a synchronize() that follows its last,
  // one launch per sample unless the plan says otherwise: right for backends that run on the
  // host. A backend whose launches run on a device times there (cuda: CUDA events around
  // batches of CUDA-graph replays, so the host's launch cost is not counted). Throws
  // yirage::Error for an empty `sets`, a negative count in `plan`, or a failed launch.
  virtual Timings time(Module& module, std::span<const LaunchBuffers> sets, const TimingPlan& plan);

  // Optional: the settings of this backend's code generator and runtime that change what a
  // compiled module runs or how fast (features turned on or off, debugging overrides, compiler
  // and flags, threads), as one stable line. The tuning cache keys its entries by it, so that a
  // winner tuned under other settings is never reused. Backends without such settings keep "".
  virtual std::string codegen_settings() const { return {}; }

  // Optional: the code this backend generates for `graph`, as JSON whose shape is the backend's
  // own (triton: backend/triton/codegen.h), for reading, golden tests, and running it outside
  // YiRage. Works also where the backend is unavailable, since generating code needs no device.
  // Throws yirage::Error naming the node it cannot lower; the default, for backends that keep no
  // source text of their own, throws saying so.
  virtual nlohmann::json generated_source(const ir::KernelGraph& graph) const;

  // Optional: the options this instance runs with (defaults resolved), so that another process,
  // such as the tuner's worker (tune.h), can create an identical instance with create_backend.
  // Backends that take no options keep the default.
  virtual BackendOptions options() const { return {}; }
};

struct BackendInfo {
  std::string name;  // what get_backend takes: "cuda" for device 0, "cuda:1" for device 1
  int device_index = 0;
  Availability availability;
  DeviceDescription device;
};

// The registry's name of a backend's device: "cuda" for device 0, "cuda:1" for device 1.
std::string device_name(std::string_view backend, int device);

// Every backend this build knows, in registry order, available or not.
std::vector<std::string> backend_names();
// The backend by name, created on first use with the default options and kept for the life of the
// process; "<backend>:k" names the instance of its device k (see BackendOptions::device). Throws
// yirage::Error for an unknown name (listing the known ones), a device index the machine does
// not have, or an unavailable backend (with the reason).
Backend& get_backend(std::string_view name);

// The backend by name, available or not, for the entries that mean something where it cannot
// run (device(), generated_source()). Throws yirage::Error for an unknown name.
Backend& find_backend(std::string_view name);

// A new instance of the named backend, owned by the caller: for a setting that must not change
// the shared one, such as an LLM's thread count. A "<backend>:k" name sets options.device to k.
// Throws as get_backend does.
std::unique_ptr<Backend> create_backend(std::string_view name, const BackendOptions& options);
// Name, availability and device of every known backend, in registry order; a backend with
// several devices on this machine has one entry per device ("cuda", "cuda:1", ...), all of one
// kind sharing a fingerprint (the tuning cache's entries serve each). Never throws.
std::vector<BackendInfo> describe_backends();
// The backend "auto" stands for: the first available one in the order of preference of
// registry.cpp.
std::string default_backend_name();

// Makes a backend; the registry calls it once for the shared instance and again for each
// create_backend.
using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;
// Adds a backend built outside this library (a plugin, a test's own backend) to the registry,
// after the built-in ones, so "auto" still prefers those. From then on every front end finds it
// by name like the others. Throws yirage::Error for an empty name, a name already registered,
// or an empty factory.
void register_backend(std::string name, BackendFactory make);

// For implementations of Backend::compile: throws yirage::Error, with the numbers and the largest
// tensor, when the tensors of `graph` (inputs, outputs and every intermediate, as if all were live
// at once) need more bytes than the device's memory (capabilities "memory_bytes"), so that such a
// graph is refused before anything is allocated. A device that does not state its memory is not
// checked.
void check_fits_memory(std::string_view backend, const DeviceDescription& device,
                       const ir::KernelGraph& graph);

// For implementations of Backend::time: throws yirage::Error for an empty `sets` or a negative
// count in `plan`.
void check_timing_plan(std::span<const LaunchBuffers> sets, const TimingPlan& plan);

// Compiles and runs `graph` on `backend` with host inputs, returning host outputs. Outputs are
// poisoned before the launch so that elements the module never writes show up as NaN.
std::vector<ir::HostTensor> run_on(Backend& backend, const ir::KernelGraph& graph,
                                   const std::vector<ir::HostTensor>& inputs);

}  // namespace yirage::backend
