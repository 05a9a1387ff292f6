// Turning generated C++ into loaded code: the system compiler, an on-disk object cache, dlopen.
// Internal to backend/cpu.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace yirage::backend::cpu {

// How generated code is compiled for one device.
struct Toolchain {
  std::string compiler;            // $YIRAGE_CXX, else "c++" from PATH
  std::string version;             // the compiler's first --version line; part of the cache key
  std::vector<std::string> flags;  // -O3, ISA flags, -fopenmp, ...
  int vector_bytes = 16;           // YR_VBYTES: 64 AVX-512, 32 AVX2+FMA, 16 NEON/SSE/generic
  std::string isa_summary;         // "avx512", "avx2", "neon", "generic"
};

// Picks flags from the description's capabilities ("arch", "isa"). Runs `compiler --version`;
// throws yirage::Error when the compiler cannot be run.
Toolchain make_toolchain(const DeviceDescription& device);

// $YIRAGE_CACHE_DIR/kernels, else $XDG_CACHE_HOME/yirage/kernels, else ~/.cache/yirage/kernels.
std::filesystem::path kernel_cache_dir();

// A dlopen'ed shared object; closed when the last reference goes.
class SharedObject {
 public:
  explicit SharedObject(const std::filesystem::path& path);
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  // The symbol's address; throws yirage::Error naming the symbol and file when it is missing.
  void* symbol(const char* name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* handle_ = nullptr;
};

struct CompiledObject {
  std::shared_ptr<SharedObject> object;
  bool cache_hit = false;  // the object was already on disk
  double compile_seconds = 0;
};

// Compiles `source` into a shared object under kernel_cache_dir(), keyed by a hash of the
// source, the compiler's version and the flags, and loads it. An object already in the cache is
// loaded without compiling. Safe to call from several threads and processes at once: objects are
// written under a unique name and renamed into place. Throws yirage::Error when the compiler
// fails (with the first lines of its message and the path of the full log) or runs longer than
// `timeout_seconds` (it is killed).
CompiledObject compile_and_load(const std::string& source, const Toolchain& toolchain,
                                double timeout_seconds);

}  // namespace yirage::backend::cpu
