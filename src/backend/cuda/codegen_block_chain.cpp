// Register chains of a fused node's kernel (see block_lowering.h): S = A·B, E = f(S) and
// O += E·C with S and E never leaving registers. Attention's block graph (scores, their
// exponentials, the weighted values and the row sums) took three passes over shared memory per
// key tile through the general path: the scores stored as f32, E staged as the next product's
// 16-bit A copy, E re-read for its row sums, with a barrier between each. Here a warp's score
// fragments, in mma.sync's accumulator layout, are exactly the A fragments of the next m16n8k16
// product once packed to 16 bits (as FlashAttention-2 does), so the chain needs no shared memory
// of its own and no barrier.
#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

// Registers a warp's running products may take per thread (dv / 8 tiles of 4 floats), and its
// score tiles for one iteration (8 floats per 16 columns); its A fragments (d / 16 of 4
// registers) half as many.
constexpr int64_t kMaxChainFloats = 64;

}  // namespace

// Finds the chains among the resident matmuls (second products) and marks the nodes each one
// computes itself: the first product, the elementwise ops between and the row sum.
void BlockLowering::find_chains() {
  const int32_t count = int32_t(g_.nodes().size());
  schedule_.chains.clear();
  for (TileSchedule& t : schedule_.tiles) t.chain = -1;
  auto in_loop = [&](int32_t id) { return g_.phase(id) == ir::BlockPhase::in_loop; };
  for (int32_t second = 0; second < count; ++second) {
    if (!schedule_.tiles[size_t(second)].resident) continue;
    Chain c;
    c.second = second;
    c.last = node(second).inputs[0];
    if (node(second).inputs[1] == c.last || !in_loop(c.last) ||
        !std::holds_alternative<ir::UnaryOp>(node(c.last).op))
      continue;
    // The readers of E: the second product, and at most one row sum added into an accumulator.
    bool other_readers = false;
    for (int32_t id = 0; id < count; ++id) {
      if (id == second) continue;
      for (int32_t in : node(id).inputs) {
        if (in != c.last) continue;
        const auto* r = std::get_if<ir::ReduceOp>(&node(id).op);
        // Block graphs hold reduce dims non-negative (canonicalize_op).
        const bool row_sum = r && (r->fn == ir::ReduceFn::sum || r->fn == ir::ReduceFn::mean) &&
                             r->dim == int(node(c.last).tile.dims.size()) - 1 &&
                             schedule_.tiles[size_t(id)].reduced_into;
        if (row_sum && c.rowsum < 0)
          c.rowsum = id;
        else
          other_readers = true;
      }
    }
    if (other_readers) continue;
    // Down from E through unary ops read only by the next one, to the first product.
    std::vector<int32_t> between{c.last};
    int32_t cur = node(c.last).inputs[0];
    while (std::holds_alternative<ir::UnaryOp>(node(cur).op) &&
           schedule_.tiles[size_t(cur)].readers == 1 && in_loop(cur)) {
      between.push_back(cur);
      cur = node(cur).inputs[0];
    }
    if (!std::holds_alternative<ir::MatmulOp>(node(cur).op) ||
        schedule_.tiles[size_t(cur)].readers != 1 || !in_loop(cur) || !tensor_core(cur) ||
        node(cur).tile.dtype != node(second).tile.dtype)
      continue;
    c.first = cur;
    // A of the first product goes to the tensor cores by ldmatrix straight from its iterator tile.
    const int32_t a = node(c.first).inputs[0];
    const auto* a_it = std::get_if<ir::InputIteratorOp>(&node(a).op);
    const MmaPlan p1 = mma_plan(c.first), p2 = mma_plan(second);
    if (!a_it || g_.operands()[size_t(a_it->operand)].dtype != node(second).tile.dtype ||
        p1.batches != 1 || p2.batches != 1 || p1.m % 16 != 0 || p1.n % 16 != 0 || p2.k != p1.n ||
        p1.k / 16 * 4 > kMaxChainFloats / 2 || p2.n % 16 != 0 || p2.n / 8 * 4 > kMaxChainFloats ||
        ir::num_elements(node(a).tile.dims) != p1.m * p1.k)
      continue;
    c.m = p1.m;
    c.d = p1.k;
    c.lc = p1.n;
    c.dv = p2.n;
    c.row_groups = c.m / 16;
    if (kBlockWarps % c.row_groups != 0) continue;
    c.splits = kBlockWarps / c.row_groups;
    while ((c.lc / 16) % c.splits != 0) c.splits /= 2;
    // A warp holds its score tiles for the whole iteration: 8 floats per 16 columns (64 for
    // lc 128 at qb 128, gqa bs8's fastest tiling).
    if (c.lc / 16 / c.splits * 8 > kMaxChainFloats) continue;
    c.wgmma = wgmma_chain(c);
    const int index = int(schedule_.chains.size());
    schedule_.chains.push_back(c);
    for (int32_t id : between) schedule_.tiles[size_t(id)].chain = index;
    for (int32_t id : {c.first, c.second, c.rowsum})
      if (id >= 0) schedule_.tiles[size_t(id)].chain = index;
  }
}

// The chain whose second product is `id`, or null.
const Chain* BlockLowering::chain_of(int32_t id) const {
  if (id < 0 || schedule_.tiles[size_t(id)].chain < 0) return nullptr;
  const Chain& c = schedule_.chains[size_t(schedule_.tiles[size_t(id)].chain)];
  return c.second == id ? &c : nullptr;
}

// Whether a chain computes node `id` inside its second product's code (no tile, no code here).
bool BlockLowering::absorbed_by_chain(int32_t id) const {
  return schedule_.tiles[size_t(id)].chain >= 0 && chain_of(id) == nullptr;
}

bool BlockLowering::written_once_by_chain(int32_t id) const {
  if (schedule_.tiles[size_t(id)].chain < 0) return false;
  const Chain& c = schedule_.chains[size_t(schedule_.tiles[size_t(id)].chain)];
  return c.rowsum == id && c.writes_once();
}

std::string BlockLowering::chain_declare(const Chain& c) const {
  return fmt::format(
      "  float o{0}[{1}][4];\n"
      "#pragma unroll\n"
      "  for (int q = 0; q < {1}; ++q) o{0}[q][0] = o{0}[q][1] = o{0}[q][2] = o{0}[q][3] = 0.0f;\n"
      "  float l{0}[2] = {{0.0f, 0.0f}};\n",
      c.second, c.dv / 8);
}

// E = f(S) for one 16-column step of a warp's scores: the 8-column tiles `lo` and `hi` (float[4]
// each, in mma's accumulator layout), their row sums, and E packed to 16 bits into `out`
// (unsigned[4]), which is the A fragment of the next product. exp is ex2.approx (yr_exp_ftz()):
// the chain rounds E to 16 bits, far above its error, and full-precision expf was half of the
// loop's instructions.
std::string BlockLowering::chain_exponentials(const Chain& c, const std::string& lo,
                                              const std::string& hi, const std::string& out) const {
  // f, innermost first, applied to `x`.
  std::vector<int32_t> path;
  for (int32_t id = c.last; id != c.first; id = node(id).inputs[0]) path.push_back(id);
  std::string f = "x";
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const auto& u = std::get<ir::UnaryOp>(node(*it).op);
    f = u.fn == ir::UnaryFn::exp ? fmt::format("yr_exp_ftz({})", f) : unary_expr(u, f);
  }
  std::string row_sums;
  if (c.rowsum >= 0)
    row_sums = fmt::format(
        "        l{0}[0] += e0[0] + e0[1] + e1[0] + e1[1];\n"
        "        l{0}[1] += e0[2] + e0[3] + e1[2] + e1[3];\n",
        c.second);
  return fmt::format(
      "        float e0[4], e1[4];\n"
      "#pragma unroll\n"
      "        for (int u = 0; u < 4; ++u) {{\n"
      "          {{ const float x = {lo}[u]; e0[u] = {f}; }}\n"
      "          {{ const float x = {hi}[u]; e1[u] = {f}; }}\n"
      "        }}\n"
      "{row_sums}"
      "        {out}[0] = yr_pack(yr_bits({t}{{}}, e0[0]), yr_bits({t}{{}}, e0[1]));\n"
      "        {out}[1] = yr_pack(yr_bits({t}{{}}, e0[2]), yr_bits({t}{{}}, e0[3]));\n"
      "        {out}[2] = yr_pack(yr_bits({t}{{}}, e1[0]), yr_bits({t}{{}}, e1[1]));\n"
      "        {out}[3] = yr_pack(yr_bits({t}{{}}, e1[2]), yr_bits({t}{{}}, e1[3]));\n",
      fmt::arg("lo", lo), fmt::arg("hi", hi), fmt::arg("f", f), fmt::arg("row_sums", row_sums),
      fmt::arg("out", out), fmt::arg("t", ctype(node(c.second).tile.dtype)));
}

// One loop iteration of the chain: all the warp's score tiles first, each K step's A fragment
// shared by them, so that 2 * steps independent mma chains overlap (one 16-column step at a
// time left four dependent mmas per step waiting on each other: ncu showed 0.43 instructions
// issued per scheduler cycle); then per 16 score columns f on the fragments, the row sums, and
// the fragments packed as A of the second product (chain_exponentials()) against C's 8-column
// tiles. Fragments of two tiles come in one ldmatrix.x4. On sm_90a the products are warpgroup
// products instead (wgmma_chain_body()).
std::string BlockLowering::chain_body(const Chain& c) const {
  if (c.wgmma) return wgmma_chain_body(c);
  const int32_t a = node(c.first).inputs[0], b = node(c.first).inputs[1];
  const int32_t v = node(c.second).inputs[1];
  const std::string t = ctype(node(c.second).tile.dtype);
  return fmt::format(
      "  {{  // register chain: S = [{m}x{d}]·[{d}x{lc}], E = f(S), O += E·[{lc}x{dv}]\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
      "    if (warp < {active}) {{\n"
      "      const int rb = (warp % {rg}) * 16, sp = warp / {rg};\n"
      "      float s[{steps}][2][4];\n"
      "#pragma unroll\n"
      "      for (int kk = 0; kk < {steps}; ++kk)\n"
      "#pragma unroll\n"
      "        for (int u = 0; u < 4; ++u) s[kk][0][u] = s[kk][1][u] = 0.0f;\n"
      "#pragma unroll\n"
      "      for (int ks = 0; ks < {dsteps}; ++ks) {{\n"
      "        unsigned fa[4];\n"
      "        yr_ldmatrix_x4(fa, {A} + (rb + (lane & 15)) * {astride} + ks * 16 + (lane >> 4) * "
      "8);\n"
      "#pragma unroll\n"
      "        for (int kk = 0; kk < {steps}; ++kk) {{\n"
      "          unsigned fb[4];\n"
      "          yr_ldmatrix_x4_trans(fb, {B} + (ks * 16 + (lane & 15)) * {bstride} + (sp + kk * "
      "{splits}) * 16 + (lane >> 4) * 8);\n"
      "          yr_mma({t}{{}}, s[kk][0], fa[0], fa[1], fa[2], fa[3], fb[0], fb[1]);\n"
      "          yr_mma({t}{{}}, s[kk][1], fa[0], fa[1], fa[2], fa[3], fb[2], fb[3]);\n"
      "        }}\n"
      "      }}\n"
      "#pragma unroll\n"
      "      for (int kk = 0; kk < {steps}; ++kk) {{\n"
      "        unsigned p[4];\n"
      "{exponentials}"
      "        const int cs = (sp + kk * {splits}) * 16;\n"
      "#pragma unroll\n"
      "        for (int nt = 0; nt < {vtiles}; nt += 2) {{\n"
      "          unsigned fv[4];\n"
      "          yr_ldmatrix_x4_trans(fv, {C} + (cs + (lane & 15)) * {cstride} + nt * 8 + (lane >> "
      "4) * 8);\n"
      "          yr_mma({t}{{}}, o{id}[nt], p[0], p[1], p[2], p[3], fv[0], fv[1]);\n"
      "          yr_mma({t}{{}}, o{id}[nt + 1], p[0], p[1], p[2], p[3], fv[2], fv[3]);\n"
      "        }}\n"
      "      }}\n"
      "    }}\n"
      "  }}\n",
      fmt::arg("m", c.m), fmt::arg("d", c.d), fmt::arg("lc", c.lc), fmt::arg("dv", c.dv),
      fmt::arg("active", c.row_groups * c.splits), fmt::arg("rg", c.row_groups),
      fmt::arg("steps", c.lc / 16 / c.splits), fmt::arg("splits", c.splits),
      fmt::arg("dsteps", c.d / 16), fmt::arg("A", tile_var(a)),
      fmt::arg("astride", c.d + row_pad(a)), fmt::arg("B", tile_var(b)),
      fmt::arg("bstride", c.lc + row_pad(b)), fmt::arg("C", tile_var(v)),
      fmt::arg("cstride", c.dv + row_pad(v)), fmt::arg("t", t),
      fmt::arg("exponentials", chain_exponentials(c, "s[kk][0]", "s[kk][1]", "p")),
      fmt::arg("vtiles", c.dv / 8), fmt::arg("id", c.second));
}

// After the loop: each warp's products added into the second product's accumulator tile, and
// its row sums, summed over the four threads that share a row, into the row sum's accumulator.
// Warps that split the score columns take turns, a barrier apart: shared-memory float atomics
// are compare-and-swap loops on sm_90, and made the flush the kernel's largest cost (ncu: most
// stall samples on their retries). Where no warps split them (writes_once()), each element has
// one writer, so the flush stores instead of adding, and the accumulators are never zeroed: the
// zeroing and the adds took 0.85 of the 7.5 us a call of gqa bs1's first kernel
// (git show 94f00b8:bench/results/attention_probe_h200.txt).
std::string BlockLowering::chain_flush(const Chain& c) const {
  const std::string out = tile_var(schedule_.tiles[size_t(c.second)].reader);
  const char* const op = c.writes_once() ? "=" : "+=";
  std::string row_sums;
  if (c.rowsum >= 0) {
    const auto& r = std::get<ir::ReduceOp>(node(c.rowsum).op);
    const std::string scale =
        r.fn == ir::ReduceFn::mean ? fmt::format(" * {:.9e}f", 1.0 / double(c.lc)) : "";
    row_sums = fmt::format(
        "        float l0 = l{id}[0], l1 = l{id}[1];\n"
        "        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);\n"
        "        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);\n"
        "        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);\n"
        "        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);\n"
        "        if (tq == 0) {{ {sums}[r0] {op} l0{scale}; {sums}[r1] {op} l1{scale}; }}\n",
        fmt::arg("id", c.second),
        fmt::arg("sums", tile_var(schedule_.tiles[size_t(c.rowsum)].reader)),
        fmt::arg("scale", scale), fmt::arg("op", op));
  }
  return fmt::format(
      "  {{  // the register chain of node {id}: its products and row sums\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & "
      "3;\n"
      "    const int r0 = (warp % {rg}) * 16 + g, r1 = r0 + 8;\n"
      "    for (int turn = 0; turn < {splits}; ++turn) {{\n"
      "      if (warp < {active} && warp / {rg} == turn) {{\n"
      "#pragma unroll\n"
      "        for (int nt = 0; nt < {vtiles}; ++nt) {{\n"
      "          const int oc = nt * 8 + 2 * tq;\n"
      "          {out}[r0 * {dv} + oc] {op} o{id}[nt][0]; {out}[r0 * {dv} + oc + 1] {op} "
      "o{id}[nt][1];\n"
      "          {out}[r1 * {dv} + oc] {op} o{id}[nt][2]; {out}[r1 * {dv} + oc + 1] {op} "
      "o{id}[nt][3];\n"
      "        }}\n"
      "{row_sums}"
      "      }}\n"
      "      __syncthreads();\n"
      "    }}\n"
      "  }}\n",
      fmt::arg("id", c.second), fmt::arg("active", c.row_groups * c.splits),
      fmt::arg("rg", c.row_groups), fmt::arg("splits", c.splits), fmt::arg("vtiles", c.dv / 8),
      fmt::arg("out", out), fmt::arg("dv", c.dv), fmt::arg("op", op),
      fmt::arg("row_sums", row_sums));
}

}  // namespace yirage::backend::cuda::detail
