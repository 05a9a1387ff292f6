// The OpenCL API, loaded at run time from the ICD loader (libOpenCL.so.1, Debian's ocl-icd), so
// that one binary runs on machines with and without OpenCL and says why where it cannot. Only the
// OpenCL 1.2 entries the backend calls are looked up. Internal to backend/opencl.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>
#include <string_view>

namespace yirage::backend::opencl {

// One function pointer per entry, named after it without the "cl" prefix.
// clang-format off
#define YR_OPENCL_ENTRIES(X) \
  X(GetPlatformIDs) \
  X(GetPlatformInfo) \
  X(GetDeviceIDs) \
  X(GetDeviceInfo) \
  X(CreateContext) \
  X(ReleaseContext) \
  X(CreateCommandQueue) \
  X(ReleaseCommandQueue) \
  X(CreateBuffer) \
  X(ReleaseMemObject) \
  X(EnqueueWriteBuffer) \
  X(EnqueueReadBuffer) \
  X(EnqueueCopyBuffer) \
  X(CreateProgramWithSource) \
  X(CreateProgramWithBinary) \
  X(BuildProgram) \
  X(GetProgramBuildInfo) \
  X(GetProgramInfo) \
  X(ReleaseProgram) \
  X(CreateKernel) \
  X(ReleaseKernel) \
  X(SetKernelArg) \
  X(EnqueueNDRangeKernel) \
  X(Finish) \
  X(GetEventProfilingInfo) \
  X(ReleaseEvent)
// clang-format on

struct Api {
#define YR_OPENCL_MEMBER(name) decltype(&::cl##name) name = nullptr;
  YR_OPENCL_ENTRIES(YR_OPENCL_MEMBER)
#undef YR_OPENCL_MEMBER
};

struct Loader {
  bool loaded = false;
  std::string reason;  // why not, when not loaded
  Api api;
};

// Loads the ICD loader once per process; never throws.
const Loader& loader();
inline const Api& cl() {
  return loader().api;
}

// The name of an OpenCL error code: "CL_OUT_OF_RESOURCES", or "error -9999" for one it does not
// know.
std::string error_name(cl_int code);
// Throws yirage::Error "opencl: <call> failed: CL_..." unless `code` is CL_SUCCESS.
void check(cl_int code, std::string_view call);

}  // namespace yirage::backend::opencl
