// Lowering of µGraphs to CUDA C++. Internal to backend/cuda, and used by its tests.
//
// A kernel graph lowers to a list of kernel launches over *slots*, the device buffers of its
// tensors, planned by the shared buffer-planning pass (backend/passes/buffer_plan.h) under this
// backend's rule for splits: the graph's inputs, its marked outputs, and scratch buffers for the
// intermediates. A
// reshape costs nothing (its result shares its operand's slot), nor does a split whose parts are
// contiguous runs of its operand (every dim before the split's is 1, as for one token's
// activations): each part is a view, a slot at an offset into the operand's. So is a split whose
// parts only fused kernels read, though its parts are not contiguous: those kernels address them
// with the operand's strides. Either takes a copy where it is itself marked as an output. Every
// other node becomes one kernel, or a few (one per output of a split, one per operand of a concat):
//   - a fused node (FusedOp) becomes one kernel that runs its block graph (codegen_block.cpp):
//     one thread block per grid block, the for-loop over tiles in shared memory with the next
//     iteration's tiles loaded by cp.async while this one computes, block ops on f32 tiles,
//     accumulators in shared memory, and the savers as the epilogue;
//   - the other ops become plain kernels (codegen_ops.cpp): elementwise with NumPy broadcasting,
//     reductions, rms_norm, layer_norm, softmax, split, concat, permute, and a tiled matmul;
//   - with CodegenOptions::library_matmul, a kernel-level matmul becomes a cuBLAS call instead.
// Every kernel is specialised for its shapes (extents are compile-time constants), reads and
// writes its tensors' dtypes (f32, f16, bf16) and computes in f32. Each kernel is a translation
// unit of its own, so equal kernels share one cache entry.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/passes/buffer_plan.h"
#include "ir/ir.h"

namespace yirage::backend::cuda {

// Buffers a fused kernel keeps, at least, of each tile its loop walks (where the loop is that
// long): two iterations' loads in flight while one computes. The lowering goes deeper where shared
// memory is left over (block_lowering.h); the search's limits count these three (search_space).
inline constexpr int kMinPipelineStages = 3;

// A program's buffers, as the buffer-planning pass (backend/passes/buffer_plan.h) lays them out.
using passes::Slot;
using passes::SlotKind;

// A kernel-level matmul handed to cuBLAS: C[b] = A[b] · B[b] for `batches` row-major products of
// M x K by K x N, operand b at element offset b · stride (0: one matrix shared by every product).
// With `adds`, C[b] = A[b] · B[b] + D[b]: the add that was the product's only reader, folded into
// the call (D laid out as C). With `group` > 1 (and one batch), the call computes `group` products
// of the same sizes that share A, C_i = A · B_i, as one batch over arrays of pointers: products
// the graph has as separate nodes, like a gated MLP's gate and up, whose B_i and C_i lie anywhere.
struct LibraryGemm {
  int64_t m = 0, n = 0, k = 0, batches = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  ir::DType dtype = ir::DType::f16;  // of A, B and C
  bool adds = false;
  int64_t group = 1;
  friend auto operator<=>(const LibraryGemm&, const LibraryGemm&) = default;
};

// A TMA tensor map (sm_90) that a kernel takes by value after its buffer parameters: a 2-D view
// of the buffer of parameter `arg`, dims and box innermost first, copied in boxes of `box`
// elements, 128-byte swizzled or not. The backend encodes it once the buffer's address is known.
struct TensorMapArg {
  int arg = 0;
  ir::DType dtype = ir::DType::f16;
  std::array<uint64_t, 2> dims{};
  uint64_t row_bytes = 0;  // the stride of dims[1]
  std::array<uint32_t, 2> box{};
  bool swizzle = true;  // 128-byte swizzling; else the rows land as they are
};

struct KernelLaunch {
  // Set when this step is a library call instead of a generated kernel; `args` are then the
  // slots of A, B and C (and D, when it adds), or of A, B_0, C_0, B_1, C_1, ... for a group, and
  // `source` is empty.
  std::optional<LibraryGemm> gemm;
  std::string name;    // the __global__ function's name in `source`
  std::string source;  // a complete CUDA C++ translation unit, no includes needed
  std::array<unsigned, 3> grid{1, 1, 1};
  unsigned threads = 256;
  size_t shared_bytes = 0;                // dynamic shared memory
  std::vector<int> args;                  // slot ids, in parameter order
  std::vector<TensorMapArg> tensor_maps;  // parameters after args'
  std::string what;                       // the node it lowers, for messages
  // Compiled for the architecture-specific target (sm_90a, not sm_90): the kernel issues wgmma,
  // which exists only there. Such a cubin runs on that exact architecture only.
  bool arch_specific = false;
  // The kernel's first act is yr_wait_prior_grids() (the prelude's): it may then be launched as a
  // programmatic dependent of the step before it, and start before that step ends.
  bool waits_on_prior_grids = false;
};

struct Program {
  std::vector<Slot> slots;
  std::vector<KernelLaunch> kernels;
};

struct CodegenOptions {
  // A block's shared memory, at most; the device's opt-in limit. A fused node that needs more
  // is an error naming the node.
  int64_t max_shared_bytes = 227 * 1024;
  // The device's multiprocessors; 0 when unknown. With it, a fused kernel's loads are pipelined
  // as deep as the shared memory left to each of its co-resident blocks allows.
  int64_t multiprocessors = 0;
  // Lower kernel-level matmuls whose batch dims cuBLAS's strided batches can address to
  // LibraryGemm steps instead of generated kernels (the backend sets it when cuBLAS loaded).
  bool library_matmul = false;
  // With library_matmul, fold an add that is a library product's only reader into the call
  // (LibraryGemm::adds).
  bool fold_adds = true;
  // With library_matmul, run library products of the same sizes that share A as one call
  // (LibraryGemm::group).
  bool group_products = true;
  // Stream weight tiles with the Tensor Memory Accelerator (cp.async.bulk.tensor; sm_90 and a
  // driver that encodes tensor maps), where codegen_block_tma.cpp allows it.
  bool tensor_maps = false;
  // Let products of at most 16 rows read their weight tiles from global memory straight into
  // tensor-core fragments, skipping shared memory (codegen_block_stream.cpp).
  bool register_weights = true;
  // Thread-block clusters (sm_90): a kernel whose weight streams through registers may run each
  // block as a pair of blocks on two multiprocessors, each streaming half of the weight, their
  // sums met in distributed shared memory (codegen_block_cluster.cpp); and a few long rows of a
  // norm or softmax may each spread over a cluster of up to 8 blocks (codegen_ops.cpp).
  bool clusters = false;
  // Keep a block graph that is one row-wise chain (elementwise ops and norms over a single loop
  // iteration) in registers, with no shared-memory tiles (codegen_block_rows.cpp).
  bool register_rows = true;
  // Attention's register chains by warpgroup products (wgmma.mma_async, sm_90a) in place of
  // mma.sync: the score and value products read K's and V's tiles straight from shared memory,
  // where mma.sync's warps each load their own copies of the fragments by ldmatrix
  // (codegen_block_wgmma.cpp). Kernels that use it are KernelLaunch::arch_specific.
  bool wgmma = false;
};

// Throws yirage::Error naming the node and op it cannot lower.
Program lower(const ir::KernelGraph& graph, const CodegenOptions& options = {});

// Which weight tiles lower() streams through registers under `options`, as the search reads it
// (capabilities.search.streamed_weights, ir::StreamedWeights): a subset of what it streams, so
// that every body the search admits this way lowers. Null when register_weights is off.
nlohmann::json streamed_weights_space(const CodegenOptions& options);

}  // namespace yirage::backend::cuda
