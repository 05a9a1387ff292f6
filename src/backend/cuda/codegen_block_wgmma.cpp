// Attention's register chains by warpgroup products (wgmma.mma_async, sm_90a; see
// block_lowering.h and codegen_block_chain.cpp).
//
// Why: in the mma.sync chain every warp loads its own copy of K's and V's fragments by ldmatrix,
// so a block of 8 warps reads each tile 8 times over. For gqa that is about 1 KB of shared memory
// read per 4 KFLOP product, and the H200's multiprocessors read 128 bytes a cycle: ncu found the
// tensor pipe active 31% of the time and the products waiting on ldmatrix
// (docs/design/cuda-findings.md, attention). A warpgroup product reads
// its B operand from shared memory once for 64 rows, so the block reads K and V twice, not
// 8 times. Q's fragments still come by ldmatrix (A from registers), as do the exponentials
// (E = f(S) packed to 16 bits, the same register layout as mma.sync's A).
//
// Layout: K's tile [d x lc] and V's [lc x dv] are stored 128-byte swizzled in 64-column panels
// (yr_swizzle128(), as the TMA lands its tiles), which is wgmma's canonical "MN-major, 128-byte
// swizzle" layout: 8 rows of 128 bytes make one 1024-byte atom (the descriptor's stride byte
// offset), and the panels follow each other (its leading byte offset). The cp.async copies write
// that layout directly. wgmma reads shared memory through the async proxy, so the loop fences
// the proxies after the copies land (kernel()).
//
// A warp's accumulator fragment of an m64nN product is the mma.sync one of its 16 rows, 8
// columns at a time, so the chain's flush (chain_flush()) is the same for both.
#include <set>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

namespace {

// Accumulator floats a thread may take per product: lc / 2 for the scores, dv / 2 for the values.
constexpr int64_t kMaxWgmmaColumns = 128;

const char* wgmma_type(ir::DType t) {
  return t == ir::DType::bf16 ? "bf16" : "f16";
}

// yr_wgmma_n<N>_<type>(d, a, desc, accumulate): d [N/8][4] (+)= A [64 x 16] (a, the mma.sync
// fragment of the warp's 16 rows) · B [16 x N] (desc, N-major in shared memory).
std::string wgmma_function(int64_t n, ir::DType t) {
  const int64_t floats = n / 2;
  std::string outs, operands;
  for (int64_t i = 0; i < floats; ++i) {
    outs += fmt::format("{}%{}", i ? ", " : "", i);
    operands += fmt::format("{}\"+f\"(d[{}][{}])", i ? ", " : "", i / 4, i % 4);
  }
  return fmt::format(
      "__device__ __forceinline__ void yr_wgmma_n{n}_{ty}(float (&d)[{tiles}][4], const unsigned "
      "(&a)[4], unsigned long long desc, int accumulate) {{\n"
      "  asm volatile(\n"
      "      \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n\"\n"
      "      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{outs}}}, {{%{a0}, %{a1}, "
      "%{a2}, %{a3}}}, %{desc}, p, 1, 1, 1;\\n}}\\n\"\n"
      "      : {operands}\n"
      "      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(accumulate), "
      "\"l\"(desc));\n"
      "}}\n",
      fmt::arg("n", n), fmt::arg("ty", wgmma_type(t)), fmt::arg("tiles", n / 8),
      fmt::arg("outs", outs), fmt::arg("operands", operands), fmt::arg("a0", floats),
      fmt::arg("a1", floats + 1), fmt::arg("a2", floats + 2), fmt::arg("a3", floats + 3),
      fmt::arg("acc", floats + 4), fmt::arg("desc", floats + 5));
}

}  // namespace

// m = 128: two warpgroups of 64 rows, each warp its own 16 rows as in the mma.sync chain (whose
// flush this keeps). K's and V's tiles: whole swizzle panels wide, read only by this chain, rows
// whole 16-row steps; the accumulators at most kMaxWgmmaColumns wide.
bool BlockLowering::wgmma_chain(const Chain& c) const {
  if (!options_.wgmma || c.m != 16 * kBlockWarps || c.splits != 1 || c.d % 16 != 0 ||
      c.lc % kSwizzlePanel != 0 || c.dv % kSwizzlePanel != 0 || c.lc > kMaxWgmmaColumns ||
      c.dv > kMaxWgmmaColumns)
    return false;
  for (int32_t tile : {node(c.first).inputs[1], node(c.second).inputs[1]}) {
    const auto* it = std::get_if<ir::InputIteratorOp>(&node(tile).op);
    if (!it || it->fmap == ir::kReplicate || schedule_.tiles[size_t(tile)].readers != 1 ||
        ir::dtype_size(g_.operands()[size_t(it->operand)].dtype) != 2 || !vector_rows(tile))
      return false;
  }
  return true;
}

bool BlockLowering::uses_wgmma() const {
  return std::any_of(schedule_.chains.begin(), schedule_.chains.end(),
                     [](const Chain& c) { return c.wgmma; });
}

// K's and V's tiles of a wgmma chain: stored swizzled, copied by cp.async.
bool BlockLowering::wgmma_tile(int32_t id) const {
  for (const Chain& c : schedule_.chains)
    if (c.wgmma && (id == node(c.first).inputs[1] || id == node(c.second).inputs[1])) return true;
  return false;
}

std::string BlockLowering::wgmma_prelude() const {
  std::set<std::pair<int64_t, ir::DType>> shapes;
  for (const Chain& c : schedule_.chains)
    if (c.wgmma) {
      shapes.insert({c.lc, node(c.second).tile.dtype});
      shapes.insert({c.dv, node(c.second).tile.dtype});
    }
  if (shapes.empty()) return "";
  std::string text =
      R"(// Warpgroup products (sm_90a): fences, groups, and shared-memory descriptors of 16-bit
// N-major tiles stored 128-byte swizzled in 64-column panels `panel_bytes` apart.
__device__ __forceinline__ void yr_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void yr_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Until at most N groups this warpgroup committed are still running.
template <int N>
__device__ __forceinline__ void yr_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads of accumulators across the wait.
template <int N>
__device__ __forceinline__ void yr_wgmma_pin(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}
__device__ __forceinline__ unsigned long long yr_wgmma_desc(const void* tile, unsigned panel_bytes) {
  return (unsigned long long)((yr_smem_address(tile) & 0x3FFFF) >> 4) |
         ((unsigned long long)((panel_bytes >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
)";
  for (const auto& [n, t] : shapes) text += wgmma_function(n, t);
  return text;
}

// One loop iteration of a wgmma chain: Q's fragments by ldmatrix, S = Q·K as d / 16 warpgroup
// products, f on S, its row sums and the 16-bit packing in registers, then O += E·V as lc / 16
// more. Each group is waited for before its results are read; the last before the iteration ends,
// since the next iteration's copies reuse the stage V's tile is in.
// Not pipelined across iterations: issuing the next tile's scores before this tile's exponentials
// (as FlashAttention-3 does within a warpgroup) took 173 registers where this takes 106, and was
// no faster on the H200 (gqa bs8 20.9 us against 20.3; docs/design/cuda-findings.md): the
// block's two warpgroups already overlap one's exponentials with the other's products.
std::string BlockLowering::wgmma_chain_body(const Chain& c) const {
  const int32_t a = node(c.first).inputs[0], b = node(c.first).inputs[1];
  const int32_t v = node(c.second).inputs[1];
  const std::string ty = wgmma_type(node(c.second).tile.dtype);
  return fmt::format(
      "  {{  // register chain by wgmma: S = [{m}x{d}]·[{d}x{lc}], E = f(S), O += E·[{lc}x{dv}]\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rb = warp * 16;\n"
      "    unsigned fq[{dsteps}][4];\n"
      "#pragma unroll\n"
      "    for (int ks = 0; ks < {dsteps}; ++ks)\n"
      "      yr_ldmatrix_x4(fq[ks], {A} + (rb + (lane & 15)) * {astride} + ks * 16 + (lane >> 4) * "
      "8);\n"
      "    float s[{stiles}][4];\n"
      "    yr_wgmma_fence();\n"
      "#pragma unroll\n"
      "    for (int ks = 0; ks < {dsteps}; ++ks)\n"
      "      yr_wgmma_n{lc}_{ty}(s, fq[ks], yr_wgmma_desc({B} + ks * {step}, {bpanel}), ks);\n"
      "    yr_wgmma_commit();\n"
      "    yr_wgmma_wait<0>();\n"
      "    yr_wgmma_pin(s);\n"
      "    unsigned p[{lsteps}][4];\n"
      "#pragma unroll\n"
      "    for (int kk = 0; kk < {lsteps}; ++kk) {{\n"
      "{exponentials}"
      "    }}\n"
      "    yr_wgmma_fence();\n"
      "#pragma unroll\n"
      "    for (int kk = 0; kk < {lsteps}; ++kk)\n"
      "      yr_wgmma_n{dv}_{ty}(o{id}, p[kk], yr_wgmma_desc({C} + kk * {step}, {cpanel}), 1);\n"
      "    yr_wgmma_commit();\n"
      "    yr_wgmma_wait<0>();\n"
      "    yr_wgmma_pin(o{id});\n"
      "  }}\n",
      fmt::arg("m", c.m), fmt::arg("d", c.d), fmt::arg("lc", c.lc), fmt::arg("dv", c.dv),
      fmt::arg("dsteps", c.d / 16), fmt::arg("lsteps", c.lc / 16), fmt::arg("stiles", c.lc / 8),
      fmt::arg("A", tile_var(a)), fmt::arg("astride", c.d + row_pad(a)), fmt::arg("B", tile_var(b)),
      fmt::arg("C", tile_var(v)), fmt::arg("step", 16 * kSwizzlePanel),
      fmt::arg("bpanel", c.d * kSwizzlePanel * 2), fmt::arg("cpanel", c.lc * kSwizzlePanel * 2),
      fmt::arg("ty", ty),
      fmt::arg("exponentials", chain_exponentials(c, "s[2 * kk]", "s[2 * kk + 1]", "p[kk]")),
      fmt::arg("id", c.second));
}

}  // namespace yirage::backend::cuda::detail
