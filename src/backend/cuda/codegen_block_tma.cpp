// Weight tiles copied by the Tensor Memory Accelerator (sm_90; see block_lowering.h).
//
// Why: the skinny products of LLM decoding stream their weights once, so their speed is the rate
// at which a multiprocessor keeps bytes in flight. With cp.async every thread issues 16-byte
// copies and the stream stalled near 2.1 TB/s on the H200 however deep the pipeline; copies of
// one tile row each (cp.async.bulk) were slower still, being too small for the copy engine
// (docs/design/cuda-findings.md). Here one thread issues a few 2-D boxes per stage, up to
// 256 rows of 128 bytes each, described by a tensor map the backend encodes on the host.
//
// The boxes land 128-byte swizzled, so that the eight rows one ldmatrix reads fall in different
// banks with no padding: a tile of w columns is stored as w / 64 panels of [rows x 64] elements,
// and within a panel's 128-byte row the 16-byte chunk c of row r sits at chunk c ^ (r % 8). The
// pattern is the hardware's on address bits, so every stage buffer starts 1024-byte aligned.
// Each stage has an mbarrier: thread 0 arms it with the stage's byte count and issues the
// copies, and every thread waits on its phase before the barrier that opens the iteration.
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

constexpr int64_t kBoxRows = 256;  // the most a tensor map's box may have per dimension
constexpr int64_t kMinRows = 64;
constexpr int64_t kMinTileBytes = 16 * 1024;

}  // namespace

const std::string& tma_prelude() {
  static const std::string text =
      R"(// The Tensor Memory Accelerator: tensor maps, mbarriers and 2-D box copies (sm_90).
struct __align__(64) YrTensorMap { unsigned long long opaque[16]; };
__device__ __forceinline__ unsigned yr_smem_address(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void yr_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(yr_smem_address(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void yr_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void yr_mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   yr_smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void yr_mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "yr_wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra yr_wait;\n"
      "}\n" ::"r"(yr_smem_address(bar)), "r"(parity)
      : "memory");
}
// Orders this thread's earlier shared-memory reads before copies the TMA makes afterwards.
__device__ __forceinline__ void yr_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void yr_tma_load_2d(void* dst, const YrTensorMap* map,
                                               unsigned long long* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];" ::"r"(yr_smem_address(dst)), "l"(map), "r"(x), "r"(y), "r"(yr_smem_address(bar))
      : "memory");
}
// Where element (row, col) of a swizzled tile of `rows` rows is stored.
__device__ __forceinline__ int yr_swizzle128(int row, int col, int rows) {
  return (col >> 6) * rows * 64 + row * 64 + ((((col & 63) >> 3) ^ (row & 7)) << 3) + (col & 7);
}
)";
  return text;
}

// A tile the loop walks, of a 16-bit 2-D operand, read only as B of tensor-core products (whose
// ldmatrix addressing knows the swizzle), in whole panels and boxes, with a row stride of whole
// 16 bytes as tensor maps require.
bool BlockLowering::tma_eligible(int32_t id) const {
  const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
  if (!options_.tensor_maps || !it || it->fmap == ir::kReplicate || streamed_tile(id)) return false;
  const ir::TensorType& operand = g_.operands()[size_t(it->operand)];
  const Dims& tile = node(id).tile.dims;
  if (ir::dtype_size(operand.dtype) != 2 || operand.dims.size() != 2 || tile.size() != 2)
    return false;
  if (tile[1] % kSwizzlePanel != 0 || tile[0] % 8 != 0 ||
      (tile[0] > kBoxRows && tile[0] % kBoxRows != 0) || operand.dims[1] % 8 != 0)
    return false;
  // Small boxes lost to cp.async on the H200 (docs/design/cuda-findings.md): tiles of 32 rows
  // (split16_n512_k32: 37.5 -> 41.6 us) and of 8 KB (gated_mlp bs8 n64_k64: 113 -> 132 us), where
  // tiles of 64 rows and 16 KB or more gained (rmsnorm_linear split8_n256_k64: 33.3 -> 30.0 us,
  // n64_k256: 28.7 -> 25.6 us).
  if (tile[0] < kMinRows || ir::num_elements(tile) * 2 < kMinTileBytes) return false;
  bool read = false;
  for (int32_t r = 0; r < int32_t(g_.nodes().size()); ++r) {
    const BlockNode& n = node(r);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] != id) continue;
      if (!std::holds_alternative<ir::MatmulOp>(n.op) || i != 1 || n.inputs[0] == id ||
          !tensor_core(r) || chain_of(r) || mma_plan(r).batches != 1)
        return false;
      read = true;
    }
  }
  return read;
}

void BlockLowering::find_tma_tiles() {
  schedule_.tma_order.clear();
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id)
    if (tma_eligible(id)) schedule_.tma_order.push_back(id);
}

bool BlockLowering::tma_tile(int32_t id) const {
  return std::find(schedule_.tma_order.begin(), schedule_.tma_order.end(), id) !=
         schedule_.tma_order.end();
}

std::string BlockLowering::tma_offset(int32_t id, const std::string& row,
                                      const std::string& col) const {
  const int64_t rows = elements(id) / node(id).tile.dims.back();
  return fmt::format("yr_swizzle128({}, {}, {})", row, col, rows);
}

// The operand index, along `dim`, of the first element of tile `id` in loop iteration
// `iteration`.
std::string BlockLowering::tma_coordinate(int32_t id, size_t dim,
                                          const std::string& iteration) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const ir::IteratorSteps steps = ir::iterator_steps(it, node(id).tile.dims, g_.forloop_range());
  std::string c = "0";
  for (int a = 0; a < ir::kGridAxes; ++a)
    if (it.imap[size_t(a)] == int(dim))
      c += fmt::format(" + (int){} * {}", block_index(a), steps.block[size_t(a)]);
  if (it.fmap == int(dim)) c += fmt::format(" + ({}) * {}", iteration, steps.loop);
  return c;
}

// Thread 0 arms stage `slot`'s mbarrier and issues the copies of every TMA tile for loop
// iteration `iteration`.
std::string BlockLowering::tma_issue(const std::string& iteration, const std::string& slot) const {
  int64_t bytes = 0;
  std::string copies;
  for (size_t k = 0; k < schedule_.tma_order.size(); ++k) {
    const int32_t id = schedule_.tma_order[k];
    const Dims& tile = node(id).tile.dims;
    const int64_t box_rows = std::min(tile[0], kBoxRows);
    bytes += ir::num_elements(tile) * 2;
    copies += fmt::format(
        "      for (int p = 0; p < {panels}; ++p)\n"
        "        for (int q = 0; q < {boxes}; ++q)\n"
        "          yr_tma_load_2d({t}_base + ({slot}) * {stage} + p * {panel} + q * {box}, &tm{k}, "
        "bar + ({slot}), {col} + p * 64, {row} + q * {box_rows});\n",
        fmt::arg("panels", tile[1] / kSwizzlePanel), fmt::arg("boxes", tile[0] / box_rows),
        fmt::arg("t", tile_var(id)), fmt::arg("slot", slot),
        fmt::arg("stage", ir::num_elements(tile)), fmt::arg("panel", tile[0] * kSwizzlePanel),
        fmt::arg("box", box_rows * kSwizzlePanel), fmt::arg("k", k),
        fmt::arg("col", tma_coordinate(id, 1, iteration)),
        fmt::arg("row", tma_coordinate(id, 0, iteration)), fmt::arg("box_rows", box_rows));
  }
  return fmt::format(
      "    if (threadIdx.x == 0) {{\n"
      "      yr_fence_proxy_async();\n"
      "      yr_mbar_expect_tx(bar + ({}), {});\n{}    }}\n",
      slot, bytes, copies);
}

// The tensor map of iterator `id`'s 2-D operand, copied in boxes of `box` (columns, rows).
TensorMapArg BlockLowering::operand_map(int32_t id, std::array<uint32_t, 2> box,
                                        bool swizzle) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const ir::TensorType& operand = g_.operands()[size_t(it.operand)];
  TensorMapArg m;
  m.arg = it.operand;
  m.dtype = operand.dtype;
  m.dims = {uint64_t(operand.dims[1]), uint64_t(operand.dims[0])};
  m.row_bytes = uint64_t(operand_strides(it.operand)[0]) * 2;
  m.box = box;
  m.swizzle = swizzle;
  return m;
}

std::vector<TensorMapArg> BlockLowering::tensor_map_args() const {
  std::vector<TensorMapArg> maps;
  for (int32_t id : schedule_.tma_order)
    maps.push_back(operand_map(
        id, {uint32_t(kSwizzlePanel), uint32_t(std::min(node(id).tile.dims[0], kBoxRows))}, true));
  for (int32_t id : schedule_.stream_tma_order) maps.push_back(tma_stream_map(id));
  return maps;
}

}  // namespace yirage::backend::cuda::detail
