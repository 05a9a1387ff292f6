// The "opencl" backend: any OpenCL 1.2 device through the ICD loader (GPUs of AMD, Intel, Arm and
// Qualcomm, and CPUs through PoCL).
//
// The ICD loader is loaded at run time (opencl_api.h), so one binary runs with and without it;
// without a loader, a platform or a device the backend describes nothing and says why. The device
// is the first one of the first platform that has any. compile() lowers the graph to one OpenCL C
// program (codegen.h), builds it for the device, or loads its binary from the kernel cache (keyed
// by the device's fingerprint, the build options and the source), and runs its steps on one
// in-order queue with profiling on. time() measures with the queue's event clock: from the start
// of a sample's first command to the end of its last.
//
// Capabilities: platform, driver_version, opencl_c_version, device_type, compute_units,
// local_memory_bytes, max_work_group_size, max_allocation_bytes, memory_bytes, cl_khr_fp16 (what
// the device reports; the generated code never needs it), and "search" (backend.h).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "backend/backend_factories.h"
#include "backend/cpu/jit.h"
#include "backend/fingerprint.h"
#include "backend/opencl/codegen.h"
#include "backend/opencl/opencl_api.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

namespace fs = std::filesystem;
using namespace opencl;

// Build options of every program: the language version the code is written in.
constexpr const char* kBuildOptions = "-cl-std=CL1.2";

struct ProbeFailure {
  std::string reason;
};

void probe_check(cl_int code, std::string_view call) {
  if (code != CL_SUCCESS) throw ProbeFailure{fmt::format("{} failed: {}", call, error_name(code))};
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  probe_check(cl().GetPlatformInfo(platform, what, 0, nullptr, &size), "clGetPlatformInfo");
  std::string text(size, '\0');
  probe_check(cl().GetPlatformInfo(platform, what, size, text.data(), nullptr),
              "clGetPlatformInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

std::string device_string(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  probe_check(cl().GetDeviceInfo(device, what, 0, nullptr, &size), "clGetDeviceInfo");
  std::string text(size, '\0');
  probe_check(cl().GetDeviceInfo(device, what, size, text.data(), nullptr), "clGetDeviceInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

template <typename T>
T device_value(cl_device_id device, cl_device_info what) {
  T value{};
  probe_check(cl().GetDeviceInfo(device, what, sizeof(T), &value, nullptr), "clGetDeviceInfo");
  return value;
}

std::string device_type_name(cl_device_type type) {
  if (type & CL_DEVICE_TYPE_GPU) return "gpu";
  if (type & CL_DEVICE_TYPE_CPU) return "cpu";
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  return "other";
}

struct Probe {
  Availability availability;
  DeviceDescription device;
  int index = 0;         // among the platforms' devices: BackendOptions::device
  int device_count = 0;  // the platforms' devices, where they could be listed
  cl_device_id id = nullptr;
  DeviceLimits limits;
};

// A block is a work-group, whose tiles all live in local memory as f32 (codegen_block.cpp), so
// half of it bounds the search's tiles (which count an f16 iterator's at 2 bytes) and a quarter
// the loop body's. The rates are rough, for ranking candidates until they are profiled.
nlohmann::json search_space(int64_t compute_units, int64_t local_memory, bool gpu) {
  return {
      {"max_tile_bytes_in_loop", local_memory / 4},
      {"max_tile_bytes_total", local_memory / 2},
      {"max_grid_blocks", compute_units * 1024},
      {"parallel_units", compute_units},
      {"bytes_per_second", (gpu ? 20e9 : 5e9) * double(compute_units)},
      {"flops_per_second", (gpu ? 1e11 : 1e10) * double(compute_units)},
      {"launch_seconds", gpu ? 10e-6 : 20e-6},
  };
}

// Every device of every platform, in the loader's order: the backend's devices 0, 1, ...
std::vector<std::pair<cl_platform_id, cl_device_id>> list_devices() {
  cl_uint count = 0;
  const cl_int found = cl().GetPlatformIDs(0, nullptr, &count);
  if (found == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (found == CL_SUCCESS && count == 0))
    throw ProbeFailure{
        "the OpenCL ICD loader found no platform (none registered in /etc/OpenCL/vendors or "
        "$OCL_ICD_VENDORS); install one such as pocl-opencl-icd"};
  probe_check(found, "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(count);
  probe_check(cl().GetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<std::pair<cl_platform_id, cl_device_id>> devices;
  for (cl_platform_id platform : platforms) {
    cl_uint n = 0;
    if (cl().GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0)
      continue;
    std::vector<cl_device_id> ids(n);
    probe_check(cl().GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr),
                "clGetDeviceIDs");
    for (cl_device_id id : ids) devices.emplace_back(platform, id);
  }
  if (devices.empty())
    throw ProbeFailure{fmt::format("none of the {} OpenCL platforms has a device", count)};
  return devices;
}

// Describes the device, its limits and the search space it gives the search.
void describe_device(cl_platform_id platform, cl_device_id device, Probe& probe) {
  probe.id = device;
  const std::string platform_name = platform_string(platform, CL_PLATFORM_NAME);
  const std::string driver = device_string(device, CL_DRIVER_VERSION);
  const std::string c_version = device_string(device, CL_DEVICE_OPENCL_C_VERSION);
  const std::string extensions = device_string(device, CL_DEVICE_EXTENSIONS);
  const auto type = device_value<cl_device_type>(device, CL_DEVICE_TYPE);
  const auto units = int64_t(device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS));
  const auto local = int64_t(device_value<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE));
  const auto group = int64_t(device_value<size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  probe.device.name = device_string(device, CL_DEVICE_NAME);
  probe.device.fingerprint =
      fingerprint_of({"opencl", platform_name, probe.device.name, driver, c_version});
  probe.device.capabilities = {
      {"platform", platform_name},
      {"driver_version", driver},
      {"opencl_c_version", c_version},
      {"device_type", device_type_name(type)},
      {"compute_units", units},
      {"local_memory_bytes", local},
      {"max_work_group_size", group},
      {"max_allocation_bytes", device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE)},
      {"memory_bytes", device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE)},
      {"cl_khr_fp16", extensions.find("cl_khr_fp16") != std::string::npos},
      {"search", search_space(units, local, (type & CL_DEVICE_TYPE_GPU) != 0)},
  };
  probe.limits = {.local_memory_bytes = local, .max_work_group_size = group};
}

Probe probe_device(int index) {
  Probe probe;
  probe.index = index;
  probe.device.name = "no OpenCL device";
  probe.device.capabilities = nlohmann::json::object();
  if (!loader().loaded) {
    probe.availability.reason = loader().reason;
    return probe;
  }
  try {
    const std::vector<std::pair<cl_platform_id, cl_device_id>> devices = list_devices();
    probe.device_count = int(devices.size());
    if (index >= probe.device_count)
      throw ProbeFailure{fmt::format("there is no OpenCL device {}: the platforms have {}", index,
                                     devices.size())};
    describe_device(devices[size_t(index)].first, devices[size_t(index)].second, probe);
    probe.availability.available = true;
  } catch (const ProbeFailure& failure) {
    probe.availability.reason = failure.reason;
  }
  return probe;
}

class ClBuffer final : public Buffer {
 public:
  ClBuffer(cl_context context, cl_command_queue queue, size_t bytes)
      : queue_(queue), bytes_(bytes) {
    cl_int status = CL_SUCCESS;
    // clCreateBuffer refuses 0 bytes; an empty tensor still gets a buffer.
    mem_ =
        cl().CreateBuffer(context, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &status);
    check(status, fmt::format("clCreateBuffer({} bytes)", bytes));
  }
  ~ClBuffer() override { cl().ReleaseMemObject(mem_); }
  size_t size() const override { return bytes_; }
  void write(std::span<const std::byte> bytes) override {
    if (bytes.size() != bytes_)
      fail("opencl: buffer write of {} bytes into {}", bytes.size(), bytes_);
    if (bytes_)
      check(cl().EnqueueWriteBuffer(queue_, mem_, CL_TRUE, 0, bytes_, bytes.data(), 0, nullptr,
                                    nullptr),
            "clEnqueueWriteBuffer");
  }
  void read(std::span<std::byte> bytes) const override {
    if (bytes.size() != bytes_)
      fail("opencl: buffer read of {} bytes from {}", bytes.size(), bytes_);
    if (bytes_)
      check(cl().EnqueueReadBuffer(queue_, mem_, CL_TRUE, 0, bytes_, bytes.data(), 0, nullptr,
                                   nullptr),
            "clEnqueueReadBuffer (a kernel before it may have failed)");
  }
  cl_mem mem() const { return mem_; }

 private:
  cl_command_queue queue_;
  size_t bytes_;
  cl_mem mem_ = nullptr;
};

// An OpenCL event, released with its scope.
struct Event {
  cl_event event = nullptr;
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }
  void reset() {
    if (event) cl().ReleaseEvent(event);
    event = nullptr;
  }
  cl_ulong at(cl_profiling_info which) const {
    cl_ulong ns = 0;
    check(cl().GetEventProfilingInfo(event, which, sizeof(ns), &ns, nullptr),
          "clGetEventProfilingInfo");
    return ns;
  }
};

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  cl().GetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  cl().GetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log.size() > 2000 ? log.substr(0, 2000) + "\n..." : log;
}

// Builds `source` for the device, from the binary in the kernel cache when there is one (a
// binary the device refuses is built again from source), and stores the binary after a build.
// Cache files are written under a unique name and renamed into place, so that processes sharing
// the cache never read half a file.
cl_program build_program(cl_context context, cl_device_id device, const std::string& fingerprint,
                         const std::string& source) {
  const fs::path dir = cpu::kernel_cache_dir() / "opencl";
  const fs::path file = dir / (fingerprint_of({fingerprint, kBuildOptions, source}) + ".bin");
  cl_int status = CL_SUCCESS;
  if (std::ifstream cached{file, std::ios::binary}) {
    const std::string binary{std::istreambuf_iterator<char>(cached), {}};
    const auto* bytes = reinterpret_cast<const unsigned char*>(binary.data());
    const size_t size = binary.size();
    cl_int binary_status = CL_SUCCESS;
    cl_program program =
        cl().CreateProgramWithBinary(context, 1, &device, &size, &bytes, &binary_status, &status);
    if (status == CL_SUCCESS && binary_status == CL_SUCCESS &&
        cl().BuildProgram(program, 1, &device, kBuildOptions, nullptr, nullptr) == CL_SUCCESS)
      return program;
    if (program) cl().ReleaseProgram(program);
  }
  const char* text = source.c_str();
  cl_program program = cl().CreateProgramWithSource(context, 1, &text, nullptr, &status);
  check(status, "clCreateProgramWithSource");
  if (cl().BuildProgram(program, 1, &device, kBuildOptions, nullptr, nullptr) != CL_SUCCESS) {
    const std::string log = build_log(program, device);
    cl().ReleaseProgram(program);
    fail("opencl: building the generated program failed:\n{}", log);
  }
  size_t size = 0;
  if (cl().GetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) ==
          CL_SUCCESS &&
      size > 0) {
    std::string binary(size, '\0');
    unsigned char* bytes = reinterpret_cast<unsigned char*>(binary.data());
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec && cl().GetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(bytes), &bytes, nullptr) ==
                   CL_SUCCESS) {
      const fs::path temporary = file.string() + fmt::format(".{}.tmp", std::random_device{}());
      std::ofstream(temporary, std::ios::binary).write(binary.data(), std::streamsize(size));
      fs::rename(temporary, file, ec);
      if (ec) fs::remove(temporary, ec);
    }
  }
  return program;
}

class ClModule final : public Module {
 public:
  ClModule(cl_context context, cl_command_queue queue, const Probe& probe, Program program)
      : queue_(queue), program_(std::move(program)) {
    const uint64_t max_alloc = probe.device.capabilities["max_allocation_bytes"].get<uint64_t>();
    for (const Slot& slot : program_.slots)
      if (slot.bytes > max_alloc)
        fail("opencl: a tensor of {} bytes exceeds the device's largest buffer, {} bytes",
             slot.bytes, max_alloc);
    cl_program_ = build_program(context, probe.id, probe.device.fingerprint, program_.source);
    for (const Step& step : program_.steps) {
      cl_kernel kernel = nullptr;
      if (!step.kernel.empty()) {
        cl_int status = CL_SUCCESS;
        kernel = cl().CreateKernel(cl_program_, step.kernel.c_str(), &status);
        if (status != CL_SUCCESS) release();
        check(status, fmt::format("clCreateKernel for {}", step.what));
      }
      kernels_.push_back(kernel);
    }
    for (const Slot& slot : program_.slots)
      if (slot.kind == SlotKind::scratch)
        scratch_.push_back(std::make_unique<ClBuffer>(context, queue, slot.bytes));
  }
  ~ClModule() override { release(); }

  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    enqueue(inputs, outputs, nullptr, nullptr);
  }

  int kernel_count() const override {
    return int(std::count_if(kernels_.begin(), kernels_.end(), [](cl_kernel k) { return k; }));
  }

  // Enqueues every step; `first` and `last`, where given, receive the events of the first and
  // last command (a program of one command gives it to `first` only).
  void enqueue(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs, Event* first,
               Event* last) {
    std::lock_guard lock(mutex_);
    const std::vector<cl_mem> mems = resolve(inputs, outputs);
    for (size_t s = 0; s < program_.steps.size(); ++s) {
      const Step& step = program_.steps[s];
      cl_event* event = nullptr;
      if (first && s == 0)
        event = &first->event;
      else if (last && s + 1 == program_.steps.size())
        event = &last->event;
      if (step.kernel.empty()) {
        if (step.copy_bytes)
          check(
              cl().EnqueueCopyBuffer(queue_, mems[size_t(step.args[0])], mems[size_t(step.args[1])],
                                     0, 0, step.copy_bytes, 0, nullptr, event),
              fmt::format("clEnqueueCopyBuffer for {}", step.what));
      } else {
        cl_kernel kernel = kernels_[s];
        for (size_t a = 0; a < step.args.size(); ++a)
          check(cl().SetKernelArg(kernel, cl_uint(a), sizeof(cl_mem), &mems[size_t(step.args[a])]),
                fmt::format("clSetKernelArg for {}", step.what));
        const bool chosen_local = step.local[0] == 0;
        check(cl().EnqueueNDRangeKernel(
                  queue_, kernel, cl_uint(step.dims), nullptr, step.global.data(),
                  chosen_local ? nullptr : step.local.data(), 0, nullptr, event),
              fmt::format("clEnqueueNDRangeKernel for {}", step.what));
      }
    }
  }

 private:
  std::vector<cl_mem> resolve(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) {
    std::vector<cl_mem> mems;
    size_t scratch = 0;
    for (const Slot& slot : program_.slots) {
      Buffer* buffer = nullptr;
      if (slot.kind == SlotKind::scratch) {
        buffer = scratch_[scratch++].get();
      } else {
        const auto& list = slot.kind == SlotKind::input ? inputs : outputs;
        if (size_t(slot.index) >= list.size())
          fail("opencl: launch with {} {} buffers; the module needs more", list.size(),
               slot.kind == SlotKind::input ? "input" : "output");
        buffer = list[size_t(slot.index)];
      }
      auto* cl_buffer = dynamic_cast<ClBuffer*>(buffer);
      if (!cl_buffer) fail("opencl: launch with a buffer the opencl backend did not allocate");
      if (cl_buffer->size() < slot.bytes)
        fail("opencl: a buffer of {} bytes where the module needs {}", cl_buffer->size(),
             slot.bytes);
      mems.push_back(cl_buffer->mem());
    }
    return mems;
  }

  void release() {
    for (cl_kernel k : kernels_)
      if (k) cl().ReleaseKernel(k);
    kernels_.clear();
    if (cl_program_) cl().ReleaseProgram(cl_program_);
    cl_program_ = nullptr;
  }

  cl_command_queue queue_;
  Program program_;
  cl_program cl_program_ = nullptr;
  std::vector<cl_kernel> kernels_;  // per step; null for a copy
  std::vector<std::unique_ptr<ClBuffer>> scratch_;
  std::mutex mutex_;
};

class OpenclBackend final : public Backend {
 public:
  explicit OpenclBackend(int device) : probe_(probe_device(device)) {}
  ~OpenclBackend() override {
    if (queue_) cl().ReleaseCommandQueue(queue_);
    if (context_) cl().ReleaseContext(context_);
  }

  std::string_view name() const override { return "opencl"; }
  Availability availability() const override { return probe_.availability; }
  DeviceDescription device() const override { return probe_.device; }
  int device_count() const override { return std::max(1, probe_.device_count); }
  BackendOptions options() const override { return {.device = probe_.index}; }

  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    start();
    return std::make_unique<ClBuffer>(context_, queue_, bytes);
  }

  std::unique_ptr<Module> compile(const ir::KernelGraph& graph) override {
    start();
    check_fits_memory("opencl", probe_.device, graph);
    return std::make_unique<ClModule>(context_, queue_, probe_, lower(graph, probe_.limits));
  }

  void synchronize() override {
    start();
    check(cl().Finish(queue_), "clFinish (a kernel failed)");
  }

  // The queue's event clock, from the start of a sample's first command to the end of its last.
  Timings time(Module& module, std::span<const LaunchBuffers> sets,
               const TimingPlan& plan) override {
    start();
    check_timing_plan(sets, plan);
    auto* cl_module = dynamic_cast<ClModule*>(&module);
    if (!cl_module) fail("opencl: time() needs a module compiled by the opencl backend");
    size_t next = 0;
    auto launch = [&](Event* first, Event* last) {
      cl_module->enqueue(sets[next].inputs, sets[next].outputs, first, last);
      next = (next + 1) % sets.size();
    };
    for (int i = 0; i < plan.warmup; ++i) launch(nullptr, nullptr);
    synchronize();
    Timings timings;
    timings.launches_per_repetition = std::max(plan.launches_per_repetition, 1);
    for (int r = 0; r < plan.repetitions; ++r) {
      Event first, last;
      const int n = timings.launches_per_repetition;
      for (int i = 0; i < n; ++i) launch(i == 0 ? &first : nullptr, i + 1 == n ? &last : nullptr);
      synchronize();
      const cl_ulong end = (last.event ? last : first).at(CL_PROFILING_COMMAND_END);
      const cl_ulong begin = first.at(CL_PROFILING_COMMAND_START);
      timings.seconds_per_launch.push_back(double(end - begin) * 1e-9 / n);
    }
    return timings;
  }

  std::string codegen_settings() const override { return kBuildOptions; }

 private:
  // The context and the one in-order, profiling queue every module runs on, made on first use.
  void start() {
    if (!probe_.availability.available)
      fail("backend '{}' is unavailable: {}", device_name(name(), probe_.index),
           probe_.availability.reason);
    std::call_once(once_, [&] {
      cl_int status = CL_SUCCESS;
      context_ = cl().CreateContext(nullptr, 1, &probe_.id, nullptr, nullptr, &status);
      check(status, "clCreateContext");
      queue_ = cl().CreateCommandQueue(context_, probe_.id, CL_QUEUE_PROFILING_ENABLE, &status);
      check(status, "clCreateCommandQueue");
    });
  }

  Probe probe_;
  std::once_flag once_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const BackendOptions& options) {
  return std::make_unique<OpenclBackend>(options.device);
}

}  // namespace yirage::backend
