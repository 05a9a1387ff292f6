// Loading the ICD loader and naming its errors.
#include "backend/opencl/opencl_api.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "support/error.h"

namespace yirage::backend::opencl {
namespace {

Loader load_icd_loader() {
  Loader result;
  void* handle = nullptr;
  for (const char* file : {"libOpenCL.so.1", "libOpenCL.so"})
    if ((handle = dlopen(file, RTLD_NOW | RTLD_LOCAL))) break;
  if (!handle) {
    const char* why = dlerror();
    result.reason = fmt::format(
        "no OpenCL ICD loader (libOpenCL.so.1) could be loaded: {}; install ocl-icd-libopencl1 "
        "and a platform such as pocl-opencl-icd",
        why ? why : "not found");
    return result;
  }
#define YR_OPENCL_LOOKUP(name)                                                              \
  result.api.name = reinterpret_cast<decltype(result.api.name)>(dlsym(handle, "cl" #name)); \
  if (!result.api.name) {                                                                   \
    result.reason = "the OpenCL ICD loader lacks cl" #name ", an OpenCL 1.2 entry";         \
    return result;                                                                          \
  }
  YR_OPENCL_ENTRIES(YR_OPENCL_LOOKUP)
#undef YR_OPENCL_LOOKUP
  result.loaded = true;  // the handle stays open for the life of the process
  return result;
}

}  // namespace

const Loader& loader() {
  static const Loader instance = load_icd_loader();
  return instance;
}

std::string error_name(cl_int code) {
  switch (code) {
#define YR_CL_ERROR(name) \
  case name: return #name;
    YR_CL_ERROR(CL_DEVICE_NOT_FOUND)
    YR_CL_ERROR(CL_DEVICE_NOT_AVAILABLE)
    YR_CL_ERROR(CL_COMPILER_NOT_AVAILABLE)
    YR_CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    YR_CL_ERROR(CL_OUT_OF_RESOURCES)
    YR_CL_ERROR(CL_OUT_OF_HOST_MEMORY)
    YR_CL_ERROR(CL_PROFILING_INFO_NOT_AVAILABLE)
    YR_CL_ERROR(CL_BUILD_PROGRAM_FAILURE)
    YR_CL_ERROR(CL_INVALID_VALUE)
    YR_CL_ERROR(CL_INVALID_PLATFORM)
    YR_CL_ERROR(CL_INVALID_DEVICE)
    YR_CL_ERROR(CL_INVALID_CONTEXT)
    YR_CL_ERROR(CL_INVALID_COMMAND_QUEUE)
    YR_CL_ERROR(CL_INVALID_MEM_OBJECT)
    YR_CL_ERROR(CL_INVALID_BINARY)
    YR_CL_ERROR(CL_INVALID_BUILD_OPTIONS)
    YR_CL_ERROR(CL_INVALID_PROGRAM)
    YR_CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE)
    YR_CL_ERROR(CL_INVALID_KERNEL_NAME)
    YR_CL_ERROR(CL_INVALID_KERNEL)
    YR_CL_ERROR(CL_INVALID_ARG_INDEX)
    YR_CL_ERROR(CL_INVALID_ARG_VALUE)
    YR_CL_ERROR(CL_INVALID_ARG_SIZE)
    YR_CL_ERROR(CL_INVALID_KERNEL_ARGS)
    YR_CL_ERROR(CL_INVALID_WORK_DIMENSION)
    YR_CL_ERROR(CL_INVALID_WORK_GROUP_SIZE)
    YR_CL_ERROR(CL_INVALID_WORK_ITEM_SIZE)
    YR_CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE)
    YR_CL_ERROR(CL_INVALID_EVENT)
    YR_CL_ERROR(CL_INVALID_BUFFER_SIZE)
    YR_CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
#undef YR_CL_ERROR
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return fmt::format("error {}", code);
  }
}

void check(cl_int code, std::string_view call) {
  if (code != CL_SUCCESS) fail("opencl: {} failed: {}", call, error_name(code));
}

}  // namespace yirage::backend::opencl
