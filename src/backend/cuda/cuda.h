// What the cuda backend offers beyond backend.h, for its tests and benchmark driver.
#pragma once

#include <span>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/codegen.h"

namespace yirage::backend::cuda {

struct Timing {
  double median_us = 0;  // per launch
  double min_us = 0;
};

// Times `module`, compiled by the cuda backend, on these buffers with CUDA events: `warmup`
// launches, then `reps` batches of `iters` launches (each launch a CUDA graph replay once the
// buffers repeat); returns the median and the best batch's time per launch. Throws
// yirage::Error when `module` is not a cuda module.
Timing time_module(Module& module, std::span<Buffer* const> inputs,
                   std::span<Buffer* const> outputs, int warmup = 20, int iters = 100,
                   int reps = 7);

// How many kernels `module` launches per run.
size_t kernel_count(const Module& module);

// The device architecture the backend compiles for ("sm_90").
std::string device_arch(Backend& backend);

// The search space (backend.h's capabilities["search"]) of a GPU with this many multiprocessors
// and this much opt-in shared memory per block.
nlohmann::json search_space(int64_t multiprocessors, int64_t shared_memory_per_block);

// The options the backend lowers with on `device` (its capabilities: compute_capability,
// multiprocessors, shared_memory_per_block_optin_bytes), before the YIRAGE_CUDA_* switches that
// turn features off: with cuBLAS where `library_matmul`, and TMA where the driver encodes tensor
// maps. Also for describing a GPU that is not present, as the compile-only benchmark does.
CodegenOptions default_codegen_options(const DeviceDescription& device, bool library_matmul,
                                       bool tensor_map_encoding);

}  // namespace yirage::backend::cuda
