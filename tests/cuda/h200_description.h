// What an H200 reports to the search and the code generator, for searching, lowering and
// compiling for it where no GPU is (the compile-only benchmark, the search's containment tests).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/cuda.h"

namespace yirage::testing {

inline backend::DeviceDescription h200_description() {
  backend::DeviceDescription d;
  d.name = "NVIDIA H200 (described, not present)";
  d.fingerprint = "offline-h200";
  d.capabilities = {{"compute_capability", "9.0"},
                    {"sm_arch", "sm_90"},
                    {"multiprocessors", 132},
                    {"shared_memory_per_block_optin_bytes", 232448}};
  d.capabilities["search"] =
      backend::cuda::search_space(backend::cuda::default_codegen_options(d, false, false));
  return d;
}

}  // namespace yirage::testing
