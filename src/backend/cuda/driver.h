// The CUDA driver and NVRTC, loaded at run time. Internal to backend/cuda.
//
// Both libraries are opened with dlopen and their few entry points declared here by hand, so that
// building YiRage needs neither the CUDA toolkit nor a GPU, and one binary runs on machines with
// and without them: a missing library becomes the reason the backend is unavailable (or, for
// NVRTC alone, the reason generated kernels cannot be compiled), never a link or load error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace yirage::backend::cuda {

// From cuda.h: handles are opaque pointers, CUresult an enum whose success value is 0.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;

// cuLaunchKernelEx's CUlaunchAttribute (an id, then a 64-byte value union at offset 8) and
// CUlaunchConfig, laid out as in cuda.h.
struct alignas(8) LaunchAttribute {
  int id = 0;
  char pad[4]{};
  union {
    char bytes[64];
    int flag;
  } value{};
};
struct LaunchConfig {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  CUstream stream;
  LaunchAttribute* attributes;
  unsigned attribute_count;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56);

struct DriverApi {
  CUresult (*init)(unsigned int);
  CUresult (*driver_get_version)(int*);
  CUresult (*device_get_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_name)(char*, int, CUdevice);
  CUresult (*device_get_attribute)(int*, int, CUdevice);
  CUresult (*device_total_mem)(size_t*, CUdevice);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_unload)(CUmodule);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*func_set_attribute)(CUfunction, int, int);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**);
  CUresult (*stream_create)(CUstream*, unsigned int);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*stream_begin_capture)(CUstream, int);
  CUresult (*stream_end_capture)(CUstream, CUgraph*);
  CUresult (*graph_instantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*graph_launch)(CUgraphExec, CUstream);
  CUresult (*graph_exec_destroy)(CUgraphExec);
  CUresult (*graph_destroy)(CUgraph);
  CUresult (*event_create)(CUevent*, unsigned int);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_synchronize)(CUevent);
  CUresult (*event_elapsed_time)(float*, CUevent, CUevent);
  CUresult (*event_destroy)(CUevent);
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*get_error_name)(CUresult, const char**);  // may be null: only improves messages
  // cuLaunchKernelEx (CUDA 12+): may be null, and kernels then launch plainly, one after another.
  CUresult (*launch_kernel_ex)(const LaunchConfig*, CUfunction, void**, void**);
  // cuTensorMapEncodeTiled (CUDA 12+): may be null, and the lowering then uses no tensor maps.
  CUresult (*tensor_map_encode_tiled)(void* map, int dtype, unsigned rank, void* address,
                                      const unsigned long long* dims,
                                      const unsigned long long* strides, const unsigned* box,
                                      const unsigned* element_strides, int interleave, int swizzle,
                                      int l2_promotion, int oob_fill);
};

// CUdevice_attribute and other enum values from cuda.h.
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr int kAttrL2CacheSize = 38;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kFuncAttrMaxDynamicSharedBytes = 8;
inline constexpr int kStreamNonBlocking = 1;
inline constexpr int kCaptureModeThreadLocal = 1;
inline constexpr int kLaunchAttrProgrammaticStreamSerialization = 6;
inline constexpr int kTensorMapFloat16 = 6;
inline constexpr int kTensorMapBfloat16 = 9;
inline constexpr int kTensorMapSwizzleNone = 0;
inline constexpr int kTensorMapSwizzle128 = 3;
inline constexpr int kTensorMapL2Promotion256 = 3;

// Whether the environment variable `variable` (a YIRAGE_CUDA_* switch) is "0": the features it
// names are then off, for comparing.
bool turned_off(const char* variable);

// The driver, or why it cannot be had. Loaded once per process and never unloaded: after cuInit
// the driver has registered exit handlers, and unloading it under them is not safe.
struct Driver {
  bool loaded = false;
  std::string reason;  // when not loaded
  DriverApi api{};
};
const Driver& driver();

// Throws yirage::Error "<call> failed with CUresult N (NAME)" unless `result` is success.
void check(CUresult result, std::string_view call);

// cuBLAS, for kernel-level matmuls (codegen.h's LibraryGemm). Optional: without it those matmuls
// run as generated kernels.
using CublasHandle = struct cublasContext*;
struct BlasApi {
  int (*create)(CublasHandle*);
  int (*destroy)(CublasHandle);
  int (*set_stream)(CublasHandle, CUstream);
  int (*set_workspace)(CublasHandle, void*, size_t);
  int (*gemm_strided_batched)(CublasHandle, int transa, int transb, int m, int n, int k,
                              const void* alpha, const void* a, int a_type, int lda,
                              long long stride_a, const void* b, int b_type, int ldb,
                              long long stride_b, const void* beta, void* c, int c_type, int ldc,
                              long long stride_c, int batches, int compute_type, int algo);
  // Products whose operands are device arrays of pointers, one entry per product.
  int (*gemm_batched)(CublasHandle, int transa, int transb, int m, int n, int k, const void* alpha,
                      const void* const* a, int a_type, int lda, const void* const* b, int b_type,
                      int ldb, const void* beta, void* const* c, int c_type, int ldc, int batches,
                      int compute_type, int algo);
};
// Values from cublas_api.h and library_types.h.
inline constexpr int kCublasOpN = 0;
inline constexpr int kCublasCompute32F = 68;
inline constexpr int kCublasGemmDefault = -1;
inline constexpr int kCudaR32F = 0;
inline constexpr int kCudaR16F = 2;
inline constexpr int kCudaR16BF = 14;

// cuBLASLt, whose heuristic offers several algorithms for one product (blas.h times them). Its
// descriptors are opaque pointers; an algorithm and a heuristic result are laid out as in
// cublasLt.h.
using CublasLtHandle = struct cublasLtContext*;
using CublasLtMatmulDesc = struct CublasLtMatmulDescOpaque*;
using CublasLtLayout = struct CublasLtLayoutOpaque*;
using CublasLtPreference = struct CublasLtPreferenceOpaque*;
struct CublasLtAlgo {
  uint64_t data[8];
};
struct CublasLtHeuristicResult {
  CublasLtAlgo algo;
  size_t workspace_bytes;
  int state;  // a cublasStatus_t
  float waves;
  int reserved[4];
};
static_assert(sizeof(CublasLtHeuristicResult) == 96);
struct BlasLtApi {
  int (*create)(CublasLtHandle*);
  int (*destroy)(CublasLtHandle);
  int (*matmul_desc_create)(CublasLtMatmulDesc*, int compute_type, int scale_type);
  int (*matmul_desc_destroy)(CublasLtMatmulDesc);
  int (*layout_create)(CublasLtLayout*, int type, uint64_t rows, uint64_t cols, int64_t ld);
  int (*layout_destroy)(CublasLtLayout);
  int (*layout_set_attribute)(CublasLtLayout, int attribute, const void* value, size_t bytes);
  int (*preference_create)(CublasLtPreference*);
  int (*preference_destroy)(CublasLtPreference);
  int (*preference_set_attribute)(CublasLtPreference, int attribute, const void* value,
                                  size_t bytes);
  int (*algo_get_heuristic)(CublasLtHandle, CublasLtMatmulDesc, CublasLtLayout a, CublasLtLayout b,
                            CublasLtLayout c, CublasLtLayout d, CublasLtPreference, int requested,
                            CublasLtHeuristicResult* results, int* returned);
  int (*matmul)(CublasLtHandle, CublasLtMatmulDesc, const void* alpha, const void* a,
                CublasLtLayout, const void* b, CublasLtLayout, const void* beta, const void* c,
                CublasLtLayout, void* d, CublasLtLayout, const CublasLtAlgo* algo, void* workspace,
                size_t workspace_bytes, CUstream);
};
// Values from cublasLt.h.
inline constexpr int kCublasLtLayoutBatchCount = 5;
inline constexpr int kCublasLtLayoutStridedBatchOffset = 6;
inline constexpr int kCublasLtPreferenceMaxWorkspaceBytes = 1;
inline constexpr int kCublasStatusNotSupported = 15;

struct Blas {
  bool loaded = false;
  std::string reason;   // when not loaded
  std::string library;  // the file name that loaded
  BlasApi api{};
  // Optional: without cuBLASLt (or with YIRAGE_CUDA_CUBLASLT=0), every product takes cuBLAS's
  // default algorithm.
  bool lt_loaded = false;
  std::string lt_reason;   // when not loaded
  std::string lt_library;  // the file name that loaded
  BlasLtApi lt{};
};
// Loaded once per process, on first use; YIRAGE_CUDA_CUBLAS=0 leaves it unloaded (the generated
// matmul kernels then run everywhere).
const Blas& blas();
// Throws yirage::Error "<call> failed with cublasStatus_t N" unless `status` is 0.
void check_blas(int status, std::string_view call);

// NVRTC: compiles CUDA C++ to a cubin for one architecture ("sm_90").
struct CompileResult {
  std::vector<char> cubin;
  std::string log;
};
// Whether NVRTC could be loaded, and why not.
bool nvrtc_available(std::string* reason = nullptr);
// Compiles `source` for `arch`; throws yirage::Error with the compiler log on failure, naming
// `what` (the kernel). When NVRTC is missing, falls back to `nvcc` on the PATH.
CompileResult compile_cuda(const std::string& source, const std::string& arch,
                           const std::string& what);
// A string that changes whenever the compiler would: NVRTC's version or "nvcc".
std::string compiler_id();

// compile_cuda through an on-disk cubin cache, keyed by a hash of the source, the architecture,
// the options and compiler_id(): $XDG_CACHE_HOME/yirage/cuda (else ~/.cache/yirage/cuda). A
// cache that cannot be written is skipped, not an error. YIRAGE_CUDA_DUMP=DIR also writes each
// source compiled into DIR.
std::vector<char> cached_cubin(const std::string& source, const std::string& arch,
                               const std::string& what);

}  // namespace yirage::backend::cuda
