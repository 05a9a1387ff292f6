// Lowering of kernel graphs and their µGraphs to Triton. Internal to backend/triton, and used by
// its tests and by Backend::generated_source.
//
// A kernel graph lowers to a list of Triton kernels over *slots*: the graph's inputs, its marked
// outputs, and scratch buffers for the intermediates (a reshape shares its operand's slot). Each
// kernel is the complete text of a Python module holding one `@triton.jit` function whose
// parameters are the pointers of its slots, every extent a literal, so that one module compiles
// for one shape and equal kernels share one cache entry.
//   - A fused node (FusedOp) becomes one kernel that runs its block graph (codegen_block.cpp):
//     one Triton program per grid block (tl.program_id over up to three axes), each tile a
//     register tensor whose extents are padded to powers of two and masked where padded, the
//     for-loop a Python `for` whose accumulators are loop-carried register tensors, tile products
//     by tl.dot where every extent is at least 16 and by a broadcast product below that.
//   - The other ops are first written as one-node block graphs (codegen_ops.cpp), the schedule a
//     plain kernel takes: a grid over the result's dims, a for-loop along a matmul's K or a
//     reduction's dim, and lowered like the search's µGraphs. Softmax is its usual chain of max,
//     subtract, exp, sum and divide on one row's tile.
//   - Split, concat, permute and the copies of outputs are flat gathers (codegen.cpp).
// Tiles compute in f32 and round once, as they are stored, to the output's dtype (f32, f16,
// bf16). An op without a Triton lowering (quant_matmul, rope, embedding, pow) is an error naming
// the node.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/passes/buffer_plan.h"
#include "ir/ir.h"

namespace yirage::backend::triton {

// A program's buffers, as the buffer-planning pass lays them out (no views: every split is
// copied here); each holds one tensor, of Slot::type.
using passes::Slot;
using passes::SlotKind;

struct TritonKernel {
  std::string name;    // the @triton.jit function's name in `source`
  std::string source;  // a Python module: imports, then the one function
  std::array<unsigned, 3> grid{1, 1, 1};
  int num_warps = 4;
  std::vector<int> args;  // slot ids, in parameter order
  std::string what;       // the node it lowers, for messages
};

struct Program {
  std::vector<Slot> slots;
  std::vector<TritonKernel> kernels;
};

// Throws yirage::Error naming the node and op it cannot lower.
Program lower(const ir::KernelGraph& graph);

// The program as JSON: {"slots": [{"kind", "index", "dtype", "shape"}], "kernels": [{"name",
// "source", "grid", "num_warps", "args", "what"}]}, which tests/triton/interpret.py runs under
// Triton's interpreter.
nlohmann::json to_json(const Program& program);

namespace detail {

// The kernel of one block graph (codegen_block.cpp); `args` are the slots of its operands, then
// of its outputs.
TritonKernel lower_block_graph(const ir::BlockGraph& graph, const std::string& name,
                               std::vector<int> args, const std::string& what);

// A one-node block graph that computes kernel-level `node` (codegen_ops.cpp); throws for ops
// that do not take that form.
ir::BlockGraph block_graph_of(const ir::KernelGraph& graph, const ir::Node& node);
// Whether block_graph_of handles `op`.
bool has_block_graph(const ir::Op& op);

// A Python identifier made of `text`.
std::string identifier(const std::string& text);

// What every generated module starts with: a comment and the imports (codegen_block.cpp).
std::string module_header();

}  // namespace detail
}  // namespace yirage::backend::triton
