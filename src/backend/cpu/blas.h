// The BLAS library behind library matmuls (ops.h MatmulOp::library). Internal to backend/cpu.
//
// OpenBLAS is found by CMake at build time (find_library, path in YIRAGE_OPENBLAS_LIBRARY) and
// loaded with dlopen when first asked for; $YIRAGE_CPU_OPENBLAS names another file, or "off"
// to do without. The generated code does not link it: a module with library matmuls defines
// the table `yr_blas` (the layout of BlasTable), which the backend fills with the functions of
// the library it loaded, so that a module always calls exactly the library that the device
// description and the tuning cache key name.
#pragma once

#include <optional>
#include <string>

namespace yirage::backend::cpu {

// cblas_sgemm with CBLAS's enums as ints and 32-bit blasint (a USE64BITINT build is refused).
using SgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);

// cblas_sgemv, likewise.
using SgemvFn = void (*)(int order, int trans, int m, int n, float alpha, const float* a, int lda,
                         const float* x, int incx, float beta, float* y, int incy);

// The layout of the generated code's `yr_blas` (codegen.cpp emits the same members).
struct BlasTable {
  SgemmFn sgemm = nullptr;
  void (*set_threads)(int) = nullptr;  // openblas_set_num_threads
  int (*get_threads)() = nullptr;      // openblas_get_num_threads
  SgemvFn sgemv = nullptr;
};

struct BlasLibrary {
  std::string name;       // "OpenBLAS 0.3.21"
  std::string config;     // openblas_get_config(): build options and the core it chose
  std::string threading;  // "openmp", "pthreads" or "sequential" (openblas_get_parallel)
  std::string path;       // the file loaded
  BlasTable table;
};

// The library, loaded once per process; nullopt with the reason in `why` when there is none.
const std::optional<BlasLibrary>& openblas(std::string& why);

}  // namespace yirage::backend::cpu
