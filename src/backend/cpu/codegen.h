// The CPU code generator: a kernel graph (µGraph) to one C++ translation unit. Internal to
// backend/cpu.
//
// The generated source starts with the runtime (runtime/yr_cpu_runtime.h) and defines
//   extern "C" size_t yr_workspace_bytes(int threads);
//   extern "C" int yr_run(void* const* inputs, void* const* outputs, char* workspace,
//                         int threads, char* error, size_t error_size);
// yr_run executes the graph's nodes in order; inputs and outputs are in KernelGraph order.
// Intermediates live in the workspace, whose first part is fixed and whose tail is one scratch
// slice per thread (GEMM packing, softmax rows, the tiles of a fused kernel's block). It returns
// non-zero with a message in `error` when the data is invalid (an embedding id out of range, a
// negative rope position).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "ir/ir.h"

namespace yirage::backend::cpu {

// The runtime's text, embedded at build time (runtime_source.cpp), and the quantized dot-product
// tiles and quant_matmul driver (runtime/yr_quant_*.inc), pasted only where a graph needs them.
extern const char* const kRuntimeSource;
extern const char* const kQuantTilesSource;
extern const char* const kQuantDriverSource;

// Lowers every node; throws yirage::Error naming a node whose op or dtype it cannot lower.
std::string generate_source(const ir::KernelGraph& graph);

// C++ spelling of a storage type in the generated code: "float", "yr::bf16", ...
std::string c_type(ir::DType dtype);

// Buffers and scratch tiles of the generated code start on cache lines.
inline constexpr int64_t kAlign = 64;

// Row-major element strides of `dims`.
std::vector<int64_t> row_major_strides(const ir::Dims& dims);

// Appends formatted text to the generated source.
class Emitter {
 public:
  template <typename... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    text_.append(indent_, ' ');
    fmt::format_to(std::back_inserter(text_), format, std::forward<Args>(args)...);
    text_ += '\n';
  }
  void raw(const std::string& text) { text_ += text; }
  void indent() { indent_ += 2; }
  void dedent() { indent_ -= 2; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  int indent_ = 0;
};

// "{1, 2, 3}"
std::string brace_list(const std::vector<int64_t>& values);

// `dims` padded on the left with `fill` to rank 4.
std::vector<int64_t> pad4(const ir::Dims& dims, int64_t fill);

// The element strides with which an operand of shape `dims` is read for a result of rank-4
// padded shape: NumPy broadcasting, so a missing or extent-1 dim has stride 0.
std::vector<int64_t> broadcast_strides4(const ir::Dims& dims);

// The runtime's functor object for a unary or binary function, e.g. "yr::Silu()"; throws
// yirage::Error for a function code it does not know.
std::string unary_functor(const ir::UnaryOp& op);
std::string binary_functor(ir::BinaryFn fn);

// A tensor of the kernel-level program as the generated code names it.
struct CTensor {
  std::string ptr;  // an expression of type `ctype*`
  ir::TensorType type;
};

// Lowers a fused kernel to a static function `name` that runs `body`'s blocks over the threads:
//   static void name(const void* const* operands, void* const* outputs, char* scratch,
//                    size_t scratch_stride, int threads)
// where thread t's tiles live at scratch + t * scratch_stride (a GEMM packing buffer of
// yr::kPackFloats floats first, then the tiles). `call` is the statement in yr_run that calls it
// with the operand and output pointers.
struct FusedFunction {
  std::string definition;        // the function, to be placed before yr_run
  std::string call;              // the statement in yr_run that calls it
  int64_t thread_scratch_bytes;  // per-thread tile storage (the packing buffer comes on top)
};
FusedFunction lower_fused(const ir::BlockGraph& body, const std::string& name,
                          const std::vector<CTensor>& operands,
                          const std::vector<CTensor>& outputs);

}  // namespace yirage::backend::cpu
