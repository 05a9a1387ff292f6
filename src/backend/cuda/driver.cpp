// Loading libcuda and NVRTC with dlopen, NVRTC compilation with an nvcc fallback, and the cubin
// cache.
#include "backend/cuda/driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/fingerprint.h"
#include "support/error.h"

namespace yirage::backend::cuda {
namespace {

// A failed step of loading a library; carries the reason.
struct LoadFailure {
  std::string reason;
};

template <typename Fn>
void bind(void* library, const char* library_name, Fn& slot, const char* name) {
  void* address = dlsym(library, name);
  if (!address) throw LoadFailure{fmt::format("{} lacks {}", library_name, name)};
  slot = reinterpret_cast<Fn>(address);
}

// The first of `names` that dlopen loads, and its name; null when none does.
void* open_first(std::initializer_list<const char*> names, std::string* opened = nullptr) {
  for (const char* name : names)
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      if (opened) *opened = name;
      return lib;
    }
  return nullptr;
}

// An optional library: the first of `names` that loads, unless the environment variable
// `switch_name` is "0"; else null, with the reason in `reason`.
void* open_optional(const char* switch_name, std::string_view what,
                    std::initializer_list<const char*> names, std::string& opened,
                    std::string& reason) {
  if (turned_off(switch_name)) {
    reason = fmt::format("turned off by {}=0", switch_name);
    return nullptr;
  }
  void* lib = open_first(names, &opened);
  if (!lib) reason = fmt::format("{} not found (tried {})", what, fmt::join(names, ", "));
  return lib;
}

Driver load_driver() {
  Driver d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    d.reason =
        fmt::format("no NVIDIA driver: libcuda.so.1 not found ({})", why ? why : "no detail");
    return d;
  }
  try {
    const char* n = "libcuda.so.1";
    DriverApi& a = d.api;
    bind(lib, n, a.init, "cuInit");
    bind(lib, n, a.driver_get_version, "cuDriverGetVersion");
    bind(lib, n, a.device_get_count, "cuDeviceGetCount");
    bind(lib, n, a.device_get, "cuDeviceGet");
    bind(lib, n, a.device_get_name, "cuDeviceGetName");
    bind(lib, n, a.device_get_attribute, "cuDeviceGetAttribute");
    bind(lib, n, a.device_total_mem, "cuDeviceTotalMem_v2");
    bind(lib, n, a.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    bind(lib, n, a.ctx_set_current, "cuCtxSetCurrent");
    bind(lib, n, a.mem_alloc, "cuMemAlloc_v2");
    bind(lib, n, a.mem_free, "cuMemFree_v2");
    bind(lib, n, a.memcpy_htod, "cuMemcpyHtoD_v2");
    bind(lib, n, a.memcpy_dtoh, "cuMemcpyDtoH_v2");
    bind(lib, n, a.memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
    bind(lib, n, a.memcpy_htod_async, "cuMemcpyHtoDAsync_v2");
    bind(lib, n, a.module_load_data, "cuModuleLoadData");
    bind(lib, n, a.module_unload, "cuModuleUnload");
    bind(lib, n, a.module_get_function, "cuModuleGetFunction");
    bind(lib, n, a.func_set_attribute, "cuFuncSetAttribute");
    bind(lib, n, a.launch_kernel, "cuLaunchKernel");
    bind(lib, n, a.stream_create, "cuStreamCreate");
    bind(lib, n, a.stream_synchronize, "cuStreamSynchronize");
    bind(lib, n, a.stream_begin_capture, "cuStreamBeginCapture_v2");
    bind(lib, n, a.stream_end_capture, "cuStreamEndCapture");
    bind(lib, n, a.graph_instantiate, "cuGraphInstantiateWithFlags");
    bind(lib, n, a.graph_launch, "cuGraphLaunch");
    bind(lib, n, a.graph_exec_destroy, "cuGraphExecDestroy");
    bind(lib, n, a.graph_destroy, "cuGraphDestroy");
    bind(lib, n, a.event_create, "cuEventCreate");
    bind(lib, n, a.event_record, "cuEventRecord");
    bind(lib, n, a.event_synchronize, "cuEventSynchronize");
    bind(lib, n, a.event_destroy, "cuEventDestroy_v2");
    bind(lib, n, a.memset_d8_async, "cuMemsetD8Async");
    // CUDA 12.8 added the _v2 elapsed-time entry; older drivers have only the first.
    if (void* v2 = dlsym(lib, "cuEventElapsedTime_v2"))
      a.event_elapsed_time = reinterpret_cast<decltype(a.event_elapsed_time)>(v2);
    else
      bind(lib, n, a.event_elapsed_time, "cuEventElapsedTime");
    a.get_error_name = reinterpret_cast<decltype(a.get_error_name)>(dlsym(lib, "cuGetErrorName"));
    a.launch_kernel_ex =
        reinterpret_cast<decltype(a.launch_kernel_ex)>(dlsym(lib, "cuLaunchKernelEx"));
    a.tensor_map_encode_tiled =
        reinterpret_cast<decltype(a.tensor_map_encode_tiled)>(dlsym(lib, "cuTensorMapEncodeTiled"));
    d.loaded = true;
  } catch (const LoadFailure& failure) {
    d.reason = failure.reason;
  }
  return d;
}

void load_blas_lt(Blas& b) {
  void* lib = open_optional("YIRAGE_CUDA_CUBLASLT", "cuBLASLt",
                            {"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"},
                            b.lt_library, b.lt_reason);
  if (!lib) return;
  try {
    const char* l = "libcublasLt";
    BlasLtApi& a = b.lt;
    bind(lib, l, a.create, "cublasLtCreate");
    bind(lib, l, a.destroy, "cublasLtDestroy");
    bind(lib, l, a.matmul_desc_create, "cublasLtMatmulDescCreate");
    bind(lib, l, a.matmul_desc_destroy, "cublasLtMatmulDescDestroy");
    bind(lib, l, a.layout_create, "cublasLtMatrixLayoutCreate");
    bind(lib, l, a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    bind(lib, l, a.layout_set_attribute, "cublasLtMatrixLayoutSetAttribute");
    bind(lib, l, a.preference_create, "cublasLtMatmulPreferenceCreate");
    bind(lib, l, a.preference_destroy, "cublasLtMatmulPreferenceDestroy");
    bind(lib, l, a.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
    bind(lib, l, a.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(lib, l, a.matmul, "cublasLtMatmul");
    b.lt_loaded = true;
  } catch (const LoadFailure& failure) {
    b.lt_reason = failure.reason;
  }
}

Blas load_blas() {
  Blas b;
  void* lib =
      open_optional("YIRAGE_CUDA_CUBLAS", "cuBLAS",
                    {"libcublas.so", "libcublas.so.13", "libcublas.so.12"}, b.library, b.reason);
  if (!lib) return b;
  try {
    const char* l = "libcublas";
    BlasApi& a = b.api;
    bind(lib, l, a.create, "cublasCreate_v2");
    bind(lib, l, a.destroy, "cublasDestroy_v2");
    bind(lib, l, a.set_stream, "cublasSetStream_v2");
    bind(lib, l, a.set_workspace, "cublasSetWorkspace_v2");
    bind(lib, l, a.gemm_strided_batched, "cublasGemmStridedBatchedEx");
    bind(lib, l, a.gemm_batched, "cublasGemmBatchedEx");
    b.loaded = true;
  } catch (const LoadFailure& failure) {
    b.reason = failure.reason;
    return b;
  }
  load_blas_lt(b);
  return b;
}

// ---- NVRTC ----------------------------------------------------------------------------------

using NvrtcProgram = struct _nvrtcProgram*;
struct NvrtcApi {
  bool loaded = false;
  std::string reason;
  std::string version;
  int (*version_fn)(int*, int*);
  int (*create)(NvrtcProgram*, const char*, const char*, int, const char* const*,
                const char* const*);
  int (*compile)(NvrtcProgram, int, const char* const*);
  int (*log_size)(NvrtcProgram, size_t*);
  int (*log)(NvrtcProgram, char*);
  int (*cubin_size)(NvrtcProgram, size_t*);
  int (*cubin)(NvrtcProgram, char*);
  int (*destroy)(NvrtcProgram*);
};

NvrtcApi load_nvrtc() {
  NvrtcApi n;
  // The unversioned name needs the -dev package; the versioned ones cover CUDA 13, 12 and 11.
  void* lib = open_first({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"});
  if (!lib) {
    n.reason = "NVRTC not found (tried libnvrtc.so, .so.13, .so.12, .so.11.2)";
    return n;
  }
  try {
    const char* l = "libnvrtc";
    bind(lib, l, n.version_fn, "nvrtcVersion");
    bind(lib, l, n.create, "nvrtcCreateProgram");
    bind(lib, l, n.compile, "nvrtcCompileProgram");
    bind(lib, l, n.log_size, "nvrtcGetProgramLogSize");
    bind(lib, l, n.log, "nvrtcGetProgramLog");
    bind(lib, l, n.cubin_size, "nvrtcGetCUBINSize");
    bind(lib, l, n.cubin, "nvrtcGetCUBIN");
    bind(lib, l, n.destroy, "nvrtcDestroyProgram");
    int major = 0, minor = 0;
    n.version_fn(&major, &minor);
    n.version = fmt::format("nvrtc-{}.{}", major, minor);
    n.loaded = true;
  } catch (const LoadFailure& failure) {
    n.reason = failure.reason;
  }
  return n;
}

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = load_nvrtc();
  return api;
}

// -O3 is NVRTC's default; fast-math stays off so that exp, division and sqrt keep f32 accuracy.
// YIRAGE_CUDA_LINEINFO=1 adds line tables, so that ncu's source view maps stalls to the source.
std::vector<std::string> compile_options(const std::string& arch) {
  std::vector<std::string> options{"--gpu-architecture=" + arch, "--std=c++17", "-default-device",
                                   "--restrict"};
  if (const char* lineinfo = std::getenv("YIRAGE_CUDA_LINEINFO"); lineinfo && *lineinfo == '1')
    options.push_back("-lineinfo");
  return options;
}

CompileResult compile_nvrtc(const std::string& source, const std::string& arch,
                            const std::string& what) {
  const NvrtcApi& n = nvrtc();
  NvrtcProgram program = nullptr;
  if (n.create(&program, source.c_str(), (what + ".cu").c_str(), 0, nullptr, nullptr) != 0)
    fail("cuda: nvrtcCreateProgram failed for kernel '{}'", what);
  std::vector<std::string> options = compile_options(arch);
  std::vector<const char*> pointers;
  for (const std::string& o : options) pointers.push_back(o.c_str());
  int status = n.compile(program, int(pointers.size()), pointers.data());
  CompileResult result;
  size_t log_size = 0;
  n.log_size(program, &log_size);
  result.log.resize(log_size);
  if (log_size > 0) n.log(program, result.log.data());
  while (!result.log.empty() && (result.log.back() == '\0' || result.log.back() == '\n'))
    result.log.pop_back();
  if (status != 0) {
    n.destroy(&program);
    fail("cuda: NVRTC could not compile kernel '{}' for {}: {}", what, arch, result.log);
  }
  size_t size = 0;
  n.cubin_size(program, &size);
  result.cubin.resize(size);
  n.cubin(program, result.cubin.data());
  n.destroy(&program);
  return result;
}

std::string temp_path(const std::filesystem::path& dir, std::string_view suffix) {
  std::random_device rd;
  return (dir / fmt::format("yirage-{}-{:x}{}", getpid(), rd(), suffix)).string();
}

CompileResult compile_nvcc(const std::string& source, const std::string& arch,
                           const std::string& what) {
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::string cu = temp_path(dir, ".cu"), cubin = cu + ".cubin", log = cu + ".log";
  std::ofstream(cu) << source;
  std::string command =
      fmt::format("nvcc -cubin -std=c++17 -arch={} -o '{}' '{}' > '{}' 2>&1", arch, cubin, cu, log);
  int status = std::system(command.c_str());
  CompileResult result;
  std::ifstream log_file(log);
  result.log.assign(std::istreambuf_iterator<char>(log_file), {});
  std::ifstream cubin_file(cubin, std::ios::binary);
  result.cubin.assign(std::istreambuf_iterator<char>(cubin_file), {});
  std::error_code ignored;
  for (const std::string& p : {cu, cubin, log}) std::filesystem::remove(p, ignored);
  if (status != 0 || result.cubin.empty())
    fail("cuda: nvcc could not compile kernel '{}' for {} (NVRTC unavailable: {}): {}", what, arch,
         nvrtc().reason, result.log);
  return result;
}

std::filesystem::path cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "yirage" / "cuda";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "yirage" / "cuda";
  return {};
}

}  // namespace

bool turned_off(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::string_view(value) == "0";
}

const Blas& blas() {
  static const Blas b = load_blas();
  return b;
}

void check_blas(int status, std::string_view call) {
  if (status != 0) fail("{} failed with cublasStatus_t {}", call, status);
}

const Driver& driver() {
  static const Driver d = load_driver();
  return d;
}

void check(CUresult result, std::string_view call) {
  if (result == 0) return;
  const char* name = nullptr;
  if (driver().api.get_error_name) driver().api.get_error_name(result, &name);
  if (name) fail("cuda: {} failed with CUresult {} ({})", call, result, name);
  fail("cuda: {} failed with CUresult {}", call, result);
}

bool nvrtc_available(std::string* reason) {
  if (reason) *reason = nvrtc().reason;
  return nvrtc().loaded;
}

std::string compiler_id() {
  return nvrtc().loaded ? nvrtc().version : "nvcc";
}

CompileResult compile_cuda(const std::string& source, const std::string& arch,
                           const std::string& what) {
  if (nvrtc().loaded) return compile_nvrtc(source, arch, what);
  return compile_nvcc(source, arch, what);
}

std::vector<char> cached_cubin(const std::string& source, const std::string& arch,
                               const std::string& what) {
  std::string options;
  for (const std::string& o : compile_options(arch)) options += o + " ";
  std::string key = fingerprint_of({source, arch, options, compiler_id()});
  std::filesystem::path dir = cache_dir();
  std::filesystem::path file = dir.empty() ? dir : dir / (key + ".cubin");
  if (!dir.empty()) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> cubin{std::istreambuf_iterator<char>(in), {}};
    if (!cubin.empty()) return cubin;
  }
  // YIRAGE_CUDA_DUMP=DIR keeps each compiled source, for reading, nvcc -Xptxas -v or cuobjdump.
  if (const char* dump = std::getenv("YIRAGE_CUDA_DUMP"); dump && *dump) {
    std::error_code error;
    std::filesystem::create_directories(dump, error);
    std::ofstream(std::filesystem::path(dump) / (what + "-" + key + ".cu")) << source;
  }
  std::vector<char> cubin = compile_cuda(source, arch, what).cubin;
  if (!dir.empty()) {
    // Written to a temporary name and renamed, so that a concurrent reader never sees half a
    // file.
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    std::string tmp = temp_path(dir, ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(cubin.data(), std::streamsize(cubin.size()));
    }
    std::filesystem::rename(tmp, file, error);
    if (error) std::filesystem::remove(tmp, error);
  }
  return cubin;
}

}  // namespace yirage::backend::cuda
