// Helpers shared by the CUDA code generators. Internal to backend/cuda.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/codegen.h"
#include "ir/ir.h"

namespace yirage::backend::cuda::detail {

// The device-side type that stores `dtype`: float, yr_half, yr_bfloat or int.
std::string ctype(ir::DType dtype);

// The helpers every generated translation unit starts with: f16/bf16 storage types with their
// conversions (inline PTX, so no CUDA header is needed under NVRTC), stores that round once,
// cp.async, and warp/block reductions.
const std::string& prelude();

// A float expression for the unary / binary function applied to the float expressions given.
std::string unary_expr(const ir::UnaryOp& op, const std::string& x);
std::string binary_expr(ir::BinaryFn fn, const std::string& a, const std::string& b);

// The flat index into a tensor of `in` dims that NumPy broadcasting reads for the element at
// flat index `var` of a tensor of `out` dims (a C expression over 64-bit integers).
std::string broadcast_index(const ir::Dims& out, const ir::Dims& in, const std::string& var);

// A C identifier made of `text`'s letters and digits, for kernel names.
std::string identifier(const std::string& text);

// Kernel-level ops other than fused nodes (codegen_ops.cpp). `args` are the slots of the
// node's inputs then outputs; returns one or more launches. `options` says whether long rows may
// spread over clusters.
std::vector<KernelLaunch> lower_op(const ir::KernelGraph& graph, const ir::Node& node,
                                   const std::vector<int>& input_slots,
                                   const std::vector<int>& output_slots,
                                   const CodegenOptions& options, int scratch_slot = -1);
// The cuBLAS form of a kernel-level matmul node, or nothing when it is not a matmul or its batch
// dims broadcast in a way one stride per operand cannot express.
std::optional<LibraryGemm> library_gemm(const ir::KernelGraph& graph, const ir::Node& node);
// A plain copy of `bytes` (for a reshape marked as an output).
KernelLaunch copy_kernel(size_t bytes, int from, int to, const std::string& what);

// The ops of language models (codegen_llm_ops.cpp): quant_matmul as a streaming GEMV over GGUF
// blocks, embedding, rope.
KernelLaunch quant_matmul_kernel(const ir::KernelGraph& graph, const ir::Node& node,
                                 const ir::QuantMatmulOp& op, const std::vector<int>& input_slots,
                                 const std::vector<int>& output_slots,
                                 const CodegenOptions& options);
KernelLaunch embedding_kernel(const ir::KernelGraph& graph, const ir::Node& node,
                              const std::vector<int>& input_slots,
                              const std::vector<int>& output_slots);
KernelLaunch rope_kernel(const ir::KernelGraph& graph, const ir::Node& node, const ir::RopeOp& op,
                         const std::vector<int>& input_slots, const std::vector<int>& output_slots);

// Attention over a paged KV pool (codegen_attention.cpp): the pool copied where its input and
// output are two buffers, the appends, then the attention.
// `scratch` is a slot of paged_attention_scratch_bytes() (-1 when that is 0): the partial results
// of the attention split over keys, when a step has too few rows and heads to fill the device.
std::vector<KernelLaunch> paged_attention_kernels(
    const ir::KernelGraph& graph, const ir::Node& node, const ir::PagedAttentionOp& op,
    const std::vector<int>& input_slots, const std::vector<int>& output_slots, int scratch);
size_t paged_attention_scratch_bytes(const ir::KernelGraph& graph, const ir::Node& node,
                                     const ir::PagedAttentionOp& op);

// Bytes of scratch memory a kernel-level node's launches need besides its outputs (0 for most).
size_t op_scratch_bytes(const ir::KernelGraph& graph, const ir::Node& node);

// Kernel-level matmuls as cuBLAS calls, with adds folded into them and products that share A
// grouped (codegen_library.cpp); lower() asks it first for every node that needs a step.
class LibraryCalls {
 public:
  LibraryCalls(const ir::KernelGraph& graph, const CodegenOptions& options);
  // Appends node `id`'s library call to `steps`, or folds or groups it into an earlier one, and
  // returns true; false where the node is no library product and folds into none.
  bool lower(const ir::Node& node, int32_t id, const std::vector<int>& in,
             const std::vector<int>& out, const passes::BufferPlan& plan,
             std::vector<KernelLaunch>& steps);

 private:
  const ir::KernelGraph& graph_;
  const CodegenOptions& options_;
  std::map<ir::TensorRef, size_t> products_;  // library products and their steps
};

// The generated kernels' names ("yr_" and the node's name as an identifier, then `suffix`), the
// node as messages name it, and a kernel's opening line up to its first act,
// yr_wait_prior_grids() (codegen_llm_ops.cpp).
std::string kernel_name(const ir::Node& node, const std::string& suffix);
std::string what_of(const ir::Node& node);
std::string entry(const std::string& name, int threads, const std::string& params);

// A fused node (codegen_block.cpp); `operand_strides` as for BlockLowering.
KernelLaunch lower_fused(const ir::BlockGraph& body, const std::string& name,
                         const std::vector<int>& input_slots, const std::vector<int>& output_slots,
                         const CodegenOptions& options, std::vector<ir::Dims> operand_strides);

}  // namespace yirage::backend::cuda::detail
