// Loading OpenBLAS for library matmuls (blas.h).
#include "backend/cpu/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "support/error.h"

namespace yirage::backend::cpu {
namespace {

std::string library_path() {
  if (const char* path = std::getenv("YIRAGE_CPU_OPENBLAS"); path && *path) return path;
#ifdef YIRAGE_OPENBLAS_LIBRARY
  return YIRAGE_OPENBLAS_LIBRARY;
#else
  return {};
#endif
}

std::string threading_name(int parallel) {
  switch (parallel) {
    case 0: return "sequential";
    case 1: return "pthreads";
    case 2: return "openmp";
  }
  return fmt::format("unknown threading {}", parallel);
}

template <typename Fn>
Fn symbol(void* handle, const std::string& path, const char* name) {
  void* address = dlsym(handle, name);
  if (!address) fail("'{}' has no symbol '{}'", path, name);
  return reinterpret_cast<Fn>(address);
}

BlasLibrary load(const std::string& path) {
  // RTLD_NODELETE: OpenMP or pthread workers of the library outlive any one module.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    fail("cannot load '{}': {}", path, why ? why : "unknown error");
  }
  BlasLibrary lib;
  lib.path = path;
  lib.config = symbol<char* (*)()>(handle, path, "openblas_get_config")();
  lib.threading = threading_name(symbol<int (*)()>(handle, path, "openblas_get_parallel")());
  lib.table.sgemm = symbol<SgemmFn>(handle, path, "cblas_sgemm");
  lib.table.sgemv = symbol<SgemvFn>(handle, path, "cblas_sgemv");
  lib.table.set_threads = symbol<void (*)(int)>(handle, path, "openblas_set_num_threads");
  lib.table.get_threads = symbol<int (*)()>(handle, path, "openblas_get_num_threads");
  // The config starts "OpenBLAS 0.3.21 ..."; its first two words are the name and version.
  std::istringstream words(lib.config);
  std::string product, version;
  words >> product >> version;
  lib.name = fmt::format("{} {}", product, version);
  if (lib.config.find("USE64BITINT") != std::string::npos)
    fail("'{}' is built with 64-bit integers (USE64BITINT); the generated calls pass 32-bit ones",
         path);
  return lib;
}

}  // namespace

const std::optional<BlasLibrary>& openblas(std::string& why) {
  static std::once_flag once;
  static std::optional<BlasLibrary> library;
  static std::string reason;
  std::call_once(once, [] {
    const std::string path = library_path();
    if (path == "off") {
      reason = "turned off by YIRAGE_CPU_OPENBLAS=off";
    } else if (path.empty()) {
      reason =
          "this build found no OpenBLAS (install libopenblas-openmp-dev and re-run CMake, or set "
          "YIRAGE_CPU_OPENBLAS to the library's path)";
    } else {
      try {
        library = load(path);
      } catch (const Error& e) {
        reason = e.what();
      }
    }
  });
  why = reason;
  return library;
}

}  // namespace yirage::backend::cpu
