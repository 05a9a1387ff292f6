// What the cuda backend offers beyond backend.h: functions of a device description, for
// describing a GPU that is not present (the compile-only tests and benchmark). Timing and kernel
// counts go through backend.h (Backend::time, Module::kernel_count), like every backend's.
#pragma once

#include <string>

#include "backend/backend.h"
#include "backend/cuda/codegen.h"

namespace yirage::backend::cuda {

// The options the backend lowers with on `device` (its capabilities: compute_capability,
// multiprocessors, shared_memory_per_block_optin_bytes), before the YIRAGE_CUDA_* switches that
// turn features off: with cuBLAS where `library_matmul`, and TMA where the driver encodes tensor
// maps. Also for describing a GPU that is not present, as the compile-only benchmark does.
CodegenOptions default_codegen_options(const DeviceDescription& device, bool library_matmul,
                                       bool tensor_map_encoding);

// The search space (backend.h's capabilities["search"]) of a GPU lowered with `options`: its
// multiprocessors, its shared memory per block, and the weights it streams.
nlohmann::json search_space(const CodegenOptions& options);

// Why a fused kernel's `body` would not lower with `options` (its shared memory as the lowering
// lays it out, or the reason the planning fails), or empty when it would: Backend::reject_body,
// also for a GPU that is not present.
std::string reject_body(const ir::BlockGraph& body, const CodegenOptions& options);

}  // namespace yirage::backend::cuda
