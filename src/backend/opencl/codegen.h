// Lowering of µGraphs to OpenCL C 1.2. Internal to backend/opencl, and used by its tests.
//
// A kernel graph lowers to one OpenCL program (one source, built once) and a list of steps over
// *slots*, the device buffers of its tensors: the graph's inputs, its marked outputs, and scratch
// buffers for the intermediates. A reshape shares its operand's slot; an output that is an input,
// a reshape of one, or marked twice is a buffer copy at the end. Every other node is one kernel,
// or one per part of a concat or split:
//   - plain ops (codegen.cpp) run one work-item per output element, or per row for reductions,
//     norms and softmax, with NumPy broadcasting; a matmul takes one work-item per output element
//     of each product;
//   - a fused node (codegen_block.cpp) is one kernel with one work-group per grid block: every
//     tile lives in local memory in f32, the work-group's items share each block op's elements,
//     with a barrier between ops, and the for-loop runs as the block graph says.
// Extents are compile-time constants. Tensors are stored in their dtypes and computed in f32:
// f16 through vload_half / vstore_half_rte, which OpenCL 1.2 has without cl_khr_fp16, and bf16
// as 16-bit words converted by hand; nothing needs fp16 arithmetic, fp64 or subgroups.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/passes/buffer_plan.h"
#include "ir/ir.h"

namespace yirage::backend::opencl {

// A program's buffers, as the buffer-planning pass lays them out (no views: every split is
// copied here).
using passes::Slot;
using passes::SlotKind;

struct Step {
  // A kernel of Program::source; empty for a buffer copy of `copy_bytes` from args[0] to args[1].
  std::string kernel;
  std::vector<int> args;  // slot ids, in parameter order
  int dims = 1;
  std::array<size_t, 3> global{1, 1, 1};
  std::array<size_t, 3> local{0, 0, 0};  // all 0: the implementation chooses
  size_t copy_bytes = 0;
  std::string what;  // the node it lowers, for messages
};

struct Program {
  std::vector<Slot> slots;
  std::string source;
  std::vector<Step> steps;
};

// What the device allows a fused kernel (the backend reads them from clGetDeviceInfo).
struct DeviceLimits {
  int64_t local_memory_bytes = 32 * 1024;
  int64_t max_work_group_size = 256;
};

// Throws yirage::Error naming the node and op it cannot lower, or the fused node whose tiles do
// not fit the device's local memory.
Program lower(const ir::KernelGraph& graph, const DeviceLimits& limits);

namespace detail {

// The OpenCL C type a tensor of `dtype` is stored as: float, half, ushort (bf16), int, char,
// uchar.
std::string storage_type(ir::DType dtype);
// A float expression of element `index` of `ptr`, a tensor of `dtype`.
std::string load(ir::DType dtype, const std::string& ptr, const std::string& index);
// A statement storing the float expression `value` into element `index` of `ptr`, rounding
// once to `dtype` (to nearest even).
std::string store(ir::DType dtype, const std::string& ptr, const std::string& index,
                  const std::string& value);
std::string unary_expr(const ir::UnaryOp& op, const std::string& x);
std::string binary_expr(ir::BinaryFn fn, const std::string& a, const std::string& b);
// The flat index into a row-major tensor of `in` dims that NumPy broadcasting reads for the
// element at flat index `var` of a tensor of `out` dims (`in` aligned to the right).
std::string broadcast_index(const ir::Dims& out, const ir::Dims& in, const std::string& var);
// Coordinate j of the element at flat index `var` of a row-major tensor of `dims`.
std::string coordinate(const ir::Dims& dims, size_t j, const std::string& var);

// A loop over the `group` elements of row `row` of `x` (a tensor of `x_type`) writing the norm
// into `out`: RMS norm, or layer norm when `centered`; `weight` and `bias` are float expressions
// of the row's element `j`, or empty.
std::string norm_body(ir::DType x_type, const std::string& x, ir::DType out_type,
                      const std::string& out, const std::string& row, int64_t group, double eps,
                      bool centered, const std::string& weight, const std::string& bias);

// A fused node as one kernel named `name` (codegen_block.cpp); the kernel's parameters are the
// operands' buffers then the outputs'. Returns the kernel's source and fills the step's sizes.
std::string lower_fused(const ir::BlockGraph& body, const std::string& name,
                        const std::vector<ir::TensorType>& operands,
                        const std::vector<ir::TensorType>& outputs, const DeviceLimits& limits,
                        Step& step);

}  // namespace detail
}  // namespace yirage::backend::opencl
