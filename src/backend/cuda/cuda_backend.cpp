// The "cuda" backend: NVIDIA GPUs through the driver API. Only the device probe exists so far;
// until the code generator lands the backend describes the GPU it finds and says it cannot run.
//
// The driver is loaded at run time with dlopen, and the few entry points the probe needs are
// declared here by hand, so that building YiRage needs neither the CUDA toolkit nor a GPU and
// one binary runs on machines with and without a driver.
#include <dlfcn.h>

#include <cstddef>

#include <fmt/format.h>

#include "backend/backend_factories.h"
#include "backend/fingerprint.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

// From cuda.h: CUresult is an enum whose success value is 0, CUdevice an int ordinal.
using CUresult = int;
using CUdevice = int;
constexpr CUresult kCudaSuccess = 0;

using CuInit = CUresult (*)(unsigned int flags);
using CuDriverGetVersion = CUresult (*)(int* version);
using CuDeviceGetCount = CUresult (*)(int* count);
using CuDeviceGet = CUresult (*)(CUdevice* device, int ordinal);
using CuDeviceGetName = CUresult (*)(char* name, int length, CUdevice device);
using CuDeviceGetAttribute = CUresult (*)(int* value, int attribute, CUdevice device);
using CuDeviceTotalMem = CUresult (*)(size_t* bytes, CUdevice device);
using CuGetErrorName = CUresult (*)(CUresult error, const char** name);

// CUdevice_attribute values from cuda.h.
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrL2CacheSize = 38;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;

struct DriverApi {
  CuInit init = nullptr;
  CuDriverGetVersion driver_get_version = nullptr;
  CuDeviceGetCount device_get_count = nullptr;
  CuDeviceGet device_get = nullptr;
  CuDeviceGetName device_get_name = nullptr;
  CuDeviceGetAttribute device_get_attribute = nullptr;
  CuDeviceTotalMem device_total_mem = nullptr;
  CuGetErrorName get_error_name = nullptr;  // optional: only improves messages
};

struct Probe {
  Availability availability;
  DeviceDescription device;
};

// A probe step that failed; carries the reason the backend is unavailable.
struct ProbeFailure {
  std::string reason;
};

template <typename Fn>
Fn symbol(void* library, const char* name) {
  void* address = dlsym(library, name);
  if (!address) throw ProbeFailure{fmt::format("libcuda.so.1 lacks {}", name)};
  return reinterpret_cast<Fn>(address);
}

DriverApi load_driver_api(void* library) {
  DriverApi api;
  api.init = symbol<CuInit>(library, "cuInit");
  api.driver_get_version = symbol<CuDriverGetVersion>(library, "cuDriverGetVersion");
  api.device_get_count = symbol<CuDeviceGetCount>(library, "cuDeviceGetCount");
  api.device_get = symbol<CuDeviceGet>(library, "cuDeviceGet");
  api.device_get_name = symbol<CuDeviceGetName>(library, "cuDeviceGetName");
  api.device_get_attribute = symbol<CuDeviceGetAttribute>(library, "cuDeviceGetAttribute");
  api.device_total_mem = symbol<CuDeviceTotalMem>(library, "cuDeviceTotalMem_v2");
  api.get_error_name = reinterpret_cast<CuGetErrorName>(dlsym(library, "cuGetErrorName"));
  return api;
}

void check(const DriverApi& api, CUresult result, std::string_view call) {
  if (result == kCudaSuccess) return;
  const char* name = nullptr;
  if (api.get_error_name) api.get_error_name(result, &name);
  throw ProbeFailure{name ? fmt::format("{} failed with CUresult {} ({})", call, result, name)
                          : fmt::format("{} failed with CUresult {}", call, result)};
}

int attribute(const DriverApi& api, CUdevice device, int which, std::string_view what) {
  int value = 0;
  check(api, api.device_get_attribute(&value, which, device),
        fmt::format("cuDeviceGetAttribute({})", what));
  return value;
}

// Describes GPU 0; the count says how many more of the same kind may follow.
DeviceDescription describe_gpu(const DriverApi& api, int device_count, int driver_version) {
  CUdevice device = 0;
  check(api, api.device_get(&device, 0), "cuDeviceGet");
  char name[256] = {};
  check(api, api.device_get_name(name, int(sizeof(name)), device), "cuDeviceGetName");
  size_t memory = 0;
  check(api, api.device_total_mem(&memory, device), "cuDeviceTotalMem_v2");
  int major = attribute(api, device, kAttrComputeCapabilityMajor, "compute capability major");
  int minor = attribute(api, device, kAttrComputeCapabilityMinor, "compute capability minor");

  DeviceDescription description;
  description.name = name;
  description.fingerprint = fingerprint_of(
      {description.name, fmt::format("{}.{}", major, minor), std::to_string(driver_version)});
  description.capabilities = {
      {"compute_capability", fmt::format("{}.{}", major, minor)},
      {"sm_arch", fmt::format("sm_{}{}", major, minor)},
      {"multiprocessors", attribute(api, device, kAttrMultiprocessorCount, "multiprocessor count")},
      {"shared_memory_per_block_optin_bytes",
       attribute(api, device, kAttrMaxSharedMemoryPerBlockOptin, "shared memory per block")},
      {"l2_bytes", attribute(api, device, kAttrL2CacheSize, "L2 cache size")},
      {"memory_bytes", memory},
      {"driver_version", driver_version},
      {"device_count", device_count},
  };
  return description;
}

Probe probe_driver() {
  Probe probe;
  probe.device.name = "no CUDA device";
  probe.device.capabilities = nlohmann::json::object();
  // Kept loaded for the life of the process: after cuInit the driver has registered exit
  // handlers, and unloading it under them is not safe.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    probe.availability.reason =
        fmt::format("no NVIDIA driver: libcuda.so.1 not found ({})", why ? why : "no detail");
    return probe;
  }
  try {
    DriverApi api = load_driver_api(library);
    check(api, api.init(0), "cuInit");
    int driver_version = 0;
    check(api, api.driver_get_version(&driver_version), "cuDriverGetVersion");
    int count = 0;
    check(api, api.device_get_count(&count), "cuDeviceGetCount");
    if (count == 0) throw ProbeFailure{"the NVIDIA driver reports 0 CUDA devices"};
    probe.device = describe_gpu(api, count, driver_version);
    probe.availability.reason = fmt::format(
        "found {} ({}) but the cuda backend's code generator is not built yet (it lands with the "
        "CUDA backend issue)",
        probe.device.name, probe.device.capabilities["sm_arch"].get<std::string>());
  } catch (const ProbeFailure& failure) {
    probe.availability.reason = failure.reason;
  }
  return probe;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() : probe_(probe_driver()) {}

  std::string_view name() const override { return "cuda"; }
  Availability availability() const override { return probe_.availability; }
  DeviceDescription device() const override { return probe_.device; }

  std::unique_ptr<Buffer> allocate(size_t) override { unavailable(); }
  std::unique_ptr<Module> compile(const ir::KernelGraph&) override { unavailable(); }

 private:
  [[noreturn]] void unavailable() const {
    fail("backend 'cuda' is unavailable: {}", probe_.availability.reason);
  }

  Probe probe_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  return std::make_unique<CudaBackend>();
}

}  // namespace yirage::backend
