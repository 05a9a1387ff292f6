// How a fused node's kernel brings its tiles into shared memory (see block_lowering.h): where
// each tile lives in its operand, how it is stored (16-bit rows padded against bank conflicts),
// and the copies themselves.
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::Dims;

// The flat in-tile offset, in a tensor of `strides`, of tile element `var` of a tile of `dims`.
std::string tile_offset(const Dims& dims, const Dims& strides, const std::string& var) {
  const Dims tile_strides = ir::row_major_strides(dims);
  std::string expr;
  for (size_t j = 0; j < dims.size(); ++j) {
    if (dims[j] == 1) continue;
    expr += fmt::format("{}(long long)(({} / {}) % {}) * {}ll", expr.empty() ? "" : " + ", var,
                        tile_strides[j], dims[j], strides[j]);
  }
  return expr.empty() ? "0ll" : expr;
}

// A 16-bit iterator tile is stored with its rows padded by kStagedPad elements, so that the
// eight 16-byte rows an ldmatrix reads (or a column walk touches) fall in different banks: with
// rows a multiple of 128 bytes long they all hit the same four banks, an 8-way conflict on every
// tensor-core fragment.
int64_t BlockLowering::row_pad(int32_t id) const {
  const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
  if (!it || swizzled(id)) return 0;  // swizzled instead
  const ir::TensorType& operand = g_.operands()[size_t(it->operand)];
  const Dims& tile = node(id).tile.dims;
  const bool vectorised = tile.back() % 8 == 0 && operand.dims.back() % 8 == 0;
  const bool rows = tile.size() >= 2 && ir::num_elements(tile) > tile.back();
  return ir::dtype_size(operand.dtype) == 2 && vectorised && rows && tile.back() >= 16 ? kStagedPad
                                                                                       : 0;
}

int64_t BlockLowering::stored_elements(int32_t id) const {
  const int64_t width = node(id).tile.dims.back();
  return elements(id) / width * (width + row_pad(id));
}

// Where element `index` (row-major in the tile) of tile `id` is stored.
std::string BlockLowering::stored_index(int32_t id, const std::string& index) const {
  if (swizzled(id)) {
    const int64_t width = node(id).tile.dims.back();
    return tma_offset(id, fmt::format("({}) / {}", index, width),
                      fmt::format("({}) % {}", index, width));
  }
  const int64_t pad = row_pad(id);
  if (pad == 0) return index;
  const int64_t width = node(id).tile.dims.back();
  return fmt::format("(({0}) / {1} * {2} + ({0}) % {1})", index, width, width + pad);
}

// The address of element `e` (an int expression, row-major in the tile) of iterator `id`'s tile
// for loop iteration `iteration`, in its operand `in<k>`.
std::string BlockLowering::tile_source(int32_t id, const std::string& iteration,
                                       const std::string& e) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const Dims& strides = operand_strides(it.operand);
  const Dims& tile = node(id).tile.dims;
  const ir::IteratorSteps steps = ir::iterator_steps(it, tile, g_.forloop_range());
  std::string base;
  for (int a = 0; a < ir::kGridAxes; ++a) {
    if (it.imap[size_t(a)] == ir::kReplicate) continue;
    const size_t j = size_t(it.imap[size_t(a)]);
    base +=
        fmt::format(" + (long long){} * {}ll", block_index(a), steps.block[size_t(a)] * strides[j]);
  }
  if (it.fmap != ir::kReplicate)
    base +=
        fmt::format(" + (long long)({}) * {}ll", iteration, steps.loop * strides[size_t(it.fmap)]);
  return fmt::format("in{} + (0ll{} + {})", it.operand, base, tile_offset(tile, strides, e));
}

// Whether the tile's rows are whole 16-byte vectors in global and in shared memory.
bool BlockLowering::vector_rows(int32_t id) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const ir::TensorType& operand = g_.operands()[size_t(it.operand)];
  const int64_t vec = 16 / int64_t(ir::dtype_size(operand.dtype));
  const Dims& strides = operand_strides(it.operand);
  return node(id).tile.dims.back() % vec == 0 && operand.dims.back() % vec == 0 &&
         strides.back() == 1 &&
         std::all_of(strides.begin(), strides.end() - 1, [&](int64_t s) { return s % vec == 0; });
}

// The 16-byte cp.async copies of one iterator's tile (its rows whole vectors, vector_rows()) for
// loop iteration `iteration`, element e (row-major in the tile) to the shared-memory address
// `dst_of_e` (a pointer expression in e). A fixed count of copies per thread, unrolled: every
// address but the iteration's term is then loop-invariant, and the compiler keeps it in
// registers across the for-loop instead of recomputing the tile offset's divisions and 64-bit
// products for each 16-byte copy.
std::string BlockLowering::vector_copies(int32_t id, const std::string& iteration,
                                         const std::string& dst_of_e) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const int64_t vec = 16 / int64_t(ir::dtype_size(g_.operands()[size_t(it.operand)].dtype));
  const int64_t copies = ir::num_elements(node(id).tile.dims) / vec;
  const int64_t per_thread = (copies + kBlockThreads - 1) / kBlockThreads;
  return fmt::format(
      "#pragma unroll\n"
      "    for (int j = 0; j < {0}; ++j) {{\n"
      "      const int q = threadIdx.x + j * {1}, e = q * {2};\n"
      "      {4}yr_cp_async16({3}, {5});\n    }}\n",
      per_thread, kBlockThreads, vec, dst_of_e,
      copies % kBlockThreads == 0 ? "" : fmt::format("if (q < {}) ", copies),
      tile_source(id, iteration, "e"));
}

// The loads of one iterator's tile for loop iteration `iteration` (an expression) into the
// shared-memory address `dst` (a pointer expression), by cp.async.
std::string BlockLowering::load(int32_t id, const std::string& iteration,
                                const std::string& dst) const {
  if (vector_rows(id)) return vector_copies(id, iteration, dst + " + " + stored_index(id, "e"));
  return fmt::format("    for (int e = threadIdx.x; e < {0}; e += {1}) {2}[e] = *({3});\n",
                     ir::num_elements(node(id).tile.dims), kBlockThreads, dst,
                     tile_source(id, iteration, "e"));
}

// Every iteration's tile of iterator `id` straight into the staged A of the streamed matmuls
// that read it (find_staged_directly()), by cp.async in the prologue: [m][iterations x k + pad]
// 16-bit elements, iteration it's tile at columns it * k (from the block's first staged one).
std::string BlockLowering::load_staged(int32_t id) const {
  const int32_t owner = schedule_.tiles[size_t(schedule_.tiles[size_t(id)].reader)].stream_owner;
  const int64_t k = node(id).tile.dims[1];
  const std::string first = staged_first_iteration();
  return fmt::format(
      "  for (int it = {0}; it < {0} + {1}; ++it) {{\n{2}  }}\n", first, staged_iterations(),
      vector_copies(id, "it",
                    fmt::format("sx{0} + (e / {1}) * {2} + (it - {3}) * {1} + e % {1}", owner, k,
                                staged_stride(k), first)));
}

}  // namespace yirage::backend::cuda::detail
