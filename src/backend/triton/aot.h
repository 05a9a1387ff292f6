// Ahead-of-time compilation of generated Triton kernels to cubins. Internal to backend/triton,
// and used by its tests.
//
// Triton's own compiler (triton.compile, with its bundled ptxas) runs in a Python subprocess at
// compile time, once per program for all its kernels that the cache does not hold, and needs no
// GPU: it compiles for the architecture it is told. The cubins and what the launch needs (the
// function's name, its shared memory, its threads, its scratch) are cached on disk under
// $XDG_CACHE_HOME/yirage/triton (else ~/.cache/yirage/triton), keyed by a hash of the source, the
// architecture, the warps and Triton's version; the launch path is then the CUDA driver alone.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend/triton/codegen.h"

namespace yirage::backend::triton {

struct CompiledKernel {
  std::vector<char> cubin;
  std::string function;  // the entry point in the cubin
  int threads = 128;
  size_t shared_bytes = 0;
  // Triton's kernels take two pointers after their own parameters, to global and profiling
  // scratch of this many bytes per program (0: none, and a null pointer goes there).
  size_t global_scratch_bytes = 0, global_scratch_alignment = 1;
  size_t profile_scratch_bytes = 0;
};

// The Python interpreter that runs Triton: $YIRAGE_PYTHON, else python3.
std::string python_command();

// The version of the triton package the Python interpreter has installed, or empty with `why` set
// where it has none. Read from the package's metadata, without importing Triton (which takes a
// second or more), since every process that lists the backends asks.
std::string triton_version(std::string* why);

// Compiles every kernel of `program` for `arch` (a compute capability as Triton spells it: 90
// for sm_90) through the cache. Throws yirage::Error naming the kernel, with Triton's message,
// when one does not compile, and naming what is missing when Triton cannot be run.
std::vector<CompiledKernel> compile_kernels(const Program& program, int arch);

}  // namespace yirage::backend::triton
