// driver.h declares the driver's, cuBLAS's and cuBLASLt's values and structs by hand, so that
// YiRage builds without the CUDA toolkit. Where the toolkit's headers are installed (CI has
// them), this file checks every one of them against the headers at compile time: a wrong value
// fails the build, not a GPU run.
#include <gtest/gtest.h>

#include <cstddef>

#include "backend/cuda/driver.h"

#if YIRAGE_HAVE_CUDA_HEADERS
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>

namespace c = yirage::backend::cuda;

static_assert(c::kAttrMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(c::kAttrL2CacheSize == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
static_assert(c::kAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(c::kAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(c::kAttrMaxSharedMemoryPerBlockOptin ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(c::kFuncAttrMaxDynamicSharedBytes == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(c::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(c::kCaptureModeThreadLocal == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(c::kLaunchAttrProgrammaticStreamSerialization ==
              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
static_assert(c::kTensorMapFloat16 == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
static_assert(c::kTensorMapBfloat16 == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
static_assert(c::kTensorMapSwizzleNone == CU_TENSOR_MAP_SWIZZLE_NONE);
static_assert(c::kTensorMapSwizzle128 == CU_TENSOR_MAP_SWIZZLE_128B);
static_assert(c::kTensorMapL2Promotion256 == CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
static_assert(sizeof(c::LaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(c::LaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(sizeof(c::LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(c::LaunchConfig, stream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(c::LaunchConfig, attributes) == offsetof(CUlaunchConfig, attrs));

static_assert(c::kCublasOpN == CUBLAS_OP_N);
static_assert(c::kCublasCompute32F == CUBLAS_COMPUTE_32F);
static_assert(c::kCublasGemmDefault == CUBLAS_GEMM_DEFAULT);
static_assert(c::kCudaR32F == CUDA_R_32F);
static_assert(c::kCudaR16F == CUDA_R_16F);
static_assert(c::kCudaR16BF == CUDA_R_16BF);

static_assert(c::kCublasLtLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(c::kCublasLtLayoutStridedBatchOffset == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(c::kCublasLtPreferenceMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(c::kCublasStatusNotSupported == CUBLAS_STATUS_NOT_SUPPORTED);
static_assert(sizeof(c::CublasLtAlgo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(c::CublasLtHeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(c::CublasLtHeuristicResult, workspace_bytes) ==
              offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(c::CublasLtHeuristicResult, state) ==
              offsetof(cublasLtMatmulHeuristicResult_t, state));
static_assert(offsetof(c::CublasLtHeuristicResult, waves) ==
              offsetof(cublasLtMatmulHeuristicResult_t, wavesCount));
#endif

TEST(CudaDriverAbi, DeclaredValuesMatchTheToolkitHeaders) {
#if !YIRAGE_HAVE_CUDA_HEADERS
  GTEST_SKIP() << "no CUDA toolkit headers found at configure time; nothing to check against";
#endif
}
