// The tile matmuls of a fused node's kernel (see block_lowering.h): mma.sync on the tensor cores
// where the operands allow, a CUDA-core loop otherwise.
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Registers a resident matmul may hold per thread; beyond it the spill to local memory would
// cost more than the shared-memory accumulator it replaces.
constexpr int64_t kMaxResidentFloats = 64;

}  // namespace

// Whether a tile matmul runs on the tensor cores: a 16-bit output dtype, B an iterator tile of
// that dtype (read straight from shared memory by ldmatrix), K a multiple of 16 and N of 8. A may
// be any tile; an f32 one is rounded to the 16-bit dtype as it is read, as the kernel-level
// program rounds every intermediate to its dtype.
bool BlockLowering::tensor_core(int32_t id) const {
  const BlockNode& n = node(id);
  const ir::DType t = n.tile.dtype;
  if (t != ir::DType::f16 && t != ir::DType::bf16) return false;
  const BlockNode& b = node(n.inputs[1]);
  const auto* it = std::get_if<ir::InputIteratorOp>(&b.op);
  if (!it || g_.operands()[size_t(it->operand)].dtype != t) return false;
  const Dims& c = n.tile.dims;
  return node(n.inputs[0]).tile.dims.back() % 16 == 0 && c.back() % 8 == 0;
}

// A tensor-core matmul in the loop whose only reader is a sum accumulator, with few enough
// partial tiles per thread to keep in registers.
bool BlockLowering::can_be_resident(int32_t id) const {
  if (!std::holds_alternative<ir::MatmulOp>(node(id).op) || !tensor_core(id)) return false;
  if (g_.phase(id) != ir::BlockPhase::in_loop || schedule_.tiles[size_t(id)].readers != 1)
    return false;
  const auto* acc = std::get_if<ir::AccumulatorOp>(&node(schedule_.tiles[size_t(id)].reader).op);
  if (!acc || acc->fn != ir::AccumFn::sum) return false;
  const MmaPlan p = mma_plan(id);
  return p.batches * p.per_warp * 4 <= kMaxResidentFloats;
}

// A resident matmul's warps alternate between `chains` sets of accumulators over their K steps,
// summed after the loop: two chains of dependent mmas instead of one, where registers allow.
int BlockLowering::resident_chains(int32_t id) const {
  if (!schedule_.tiles[size_t(id)].resident) return 1;
  const MmaPlan p = mma_plan(id);
  const int64_t ksteps = p.k / 16;
  const bool even = ksteps % p.splits == 0 && (ksteps / p.splits) % 2 == 0;
  return even && p.batches * p.per_warp * 4 * 2 <= kMaxResidentFloats ? 2 : 1;
}

BlockLowering::MmaPlan BlockLowering::mma_plan(int32_t id) const {
  const Dims& c = node(id).tile.dims;
  MmaPlan p{c[c.size() - 2], c.back(), node(node(id).inputs[0]).tile.dims.back(), 0, 0, 1, 0, 0};
  p.mp = (p.m + 15) / 16 * 16;
  p.pairs = (p.mp / 16) * (p.n / 8);
  if (p.pairs < kBlockWarps) p.splits = std::min<int64_t>(kBlockWarps / p.pairs, p.k / 16);
  p.per_warp = (p.pairs * p.splits + kBlockWarps - 1) / kBlockWarps;
  p.batches = ir::num_elements(Dims(c.begin(), c.end() - 2));
  return p;
}

// The 16-bit pattern of element `index` of tile `id` as dtype `t` (a ctype name).
std::string BlockLowering::bits(int32_t id, const std::string& index, const std::string& t) const {
  const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
  if (it && ctype(g_.operands()[size_t(it->operand)].dtype) == t)
    return fmt::format("{}[{}].x", tile_var(id), stored_index(id, index));
  return fmt::format("yr_bits({}{{}}, {})", t, read(id, index));
}

// A tensor-core matmul's A goes to the tensor cores by ldmatrix straight from its iterator tile
// when that tile holds whole 16-row tiles of the matmul's dtype. Otherwise (a computed tile, an
// inlined elementwise op, a 2-row activation) building the fragments element by element costs
// every warp tens of instructions per k-step, for every column tile and K split, which made the
// small-M kernels instruction bound (ncu: 40% SM busy at 23% of DRAM bandwidth). Such an A is
// staged once per use instead: converted to the 16-bit type into a padded [mp x k] copy.
bool BlockLowering::a_staged(int32_t id) const {
  if (!tensor_core(id) || chain_of(id)) return false;
  const BlockNode& n = node(id);
  const auto* a_it = std::get_if<ir::InputIteratorOp>(&node(n.inputs[0]).op);
  const MmaPlan p = mma_plan(id);
  return !(a_it && g_.operands()[size_t(a_it->operand)].dtype == n.tile.dtype && p.m % 16 == 0);
}

// The staged copy's 16-bit elements: A's batches of [mp x (k + pad)].
int64_t BlockLowering::staged_a_elements(int32_t id) const {
  const MmaPlan p = mma_plan(id);
  const int64_t batches = ir::num_elements(node(node(id).inputs[0]).tile.dims) / (p.m * p.k);
  return batches * p.mp * (p.k + kStagedPad);
}

// The staging pass: every element of A, rounded to the matmul's 16-bit type, into sa<id> (K is a
// multiple of 16, so a row holds whole runs of eight).
std::string BlockLowering::mma_stage_a(int32_t id) const {
  const BlockNode& n = node(id);
  const MmaPlan p = mma_plan(id);
  return stage_pass(n.inputs[0], ctype(n.tile.dtype),
                    fmt::format("    const int bt = e / {}, r = (e / {}) % {}, col = e % {};\n",
                                p.m * p.k, p.k, p.m, p.k),
                    fmt::format("sa{} + (bt * {} + r) * {} + col", id, p.mp, p.k + kStagedPad)) +
         "  __syncthreads();\n";
}

// A warp's walk over its K steps (ks). With a fixed trip count the loop unrolls whole, so the
// compiler issues the ldmatrix loads of later steps while earlier mmas run: unrolled by four over
// a runtime bound, each mma waited on its own fragments (ncu: short-scoreboard stalls on every
// HMMA of the skinny products).
std::string BlockLowering::ks_loop(const MmaPlan& p, const std::string& chain_acc) const {
  const int64_t ksteps = p.k / 16;
  if (ksteps % p.splits != 0)
    return fmt::format("#pragma unroll 4\n          for (int ks = sp; ks < {}; ks += {}) {{\n",
                       ksteps, p.splits);
  const int64_t steps = ksteps / p.splits;
  return fmt::format(
      "#pragma unroll{}\n"
      "          for (int kk = 0; kk < {}; ++kk) {{\n"
      "            const int ks = sp + kk * {};\n{}",
      steps <= 16 ? "" : " 4", steps, p.splits, chain_acc);
}

// mma.sync m16n8k16 with f32 accumulators: each warp owns 16x8 output tiles (rows padded to 16
// with zeros); when there are fewer tiles than warps, the warps also split K and add their
// partial tiles through shared memory. B's fragments come by ldmatrix.trans from its row-major
// [K x N] tile, A's by ldmatrix from its iterator tile or its staged copy (a_staged()).
std::string BlockLowering::mma_matmul(int32_t id) const {
  const BlockNode& n = node(id);
  const Dims& a = node(n.inputs[0]).tile.dims;
  const Dims& b = node(n.inputs[1]).tile.dims;
  const Dims& c = n.tile.dims;
  const MmaPlan p = mma_plan(id);
  const Dims cb(c.begin(), c.end() - 2), ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const std::string t = ctype(n.tile.dtype);
  const bool resident = schedule_.tiles[size_t(id)].resident;
  const int chains = resident_chains(id);
  const int64_t per_chain = p.batches * p.per_warp;
  // A's fragments by ldmatrix.x4, from its iterator tile or from its staged copy.
  const bool staged = a_staged(id);
  const std::string a_load = fmt::format(
      "            yr_ldmatrix_x4(a, {} + ao + (rb + (lane & 15)) * {} + ks * 16 + (lane >> 4) * "
      "8);\n",
      staged ? fmt::format("sa{}", id) : tile_var(n.inputs[0]),
      p.k + (staged ? kStagedPad : row_pad(n.inputs[0])));
  const int64_t b_stride = p.n + row_pad(n.inputs[1]);
  const std::string unroll = resident ? "#pragma unroll\n" : "";
  std::string s = staged ? mma_stage_a(id) : "";
  s += fmt::format(
      "  {{  // tensor-core matmul [{m}x{k}] x [{k}x{n}], {batches} batch(es), {pairs} 16x8 "
      "tiles, K split {splits} ways{resident}\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "{unroll}    for (int bt = 0; bt < {batches}; ++bt) {{\n"
      "      const int ao = (int)({abatch}) * {mk}, bo = (int)({bbatch}) * {kn}, co = bt * "
      "{mn};\n"
      "{unroll}      for (int j = 0; j < {per_warp}; ++j) {{\n"
      "        const int w = warp + j * {warps};\n"
      "        if (w < {work}) {{\n"
      "          const int pp = w % {pairs}, sp = w / {pairs};\n"
      "          const int rb = (pp / {ntiles}) * 16, cb = (pp % {ntiles}) * 8;\n"
      "          const int r0 = rb + g, r1 = r0 + 8, oc = cb + 2 * tq;\n"
      "{acc}"
      "{ks_loop}"
      "            unsigned a[4], bf[2];\n"
      "{a_load}"
      "            yr_ldmatrix_x2_trans(bf, {b} + {b_offset});\n"
      "            yr_mma({t}{{}}, acc, a[0], a[1], a[2], a[3], bf[0], bf[1]);\n"
      "          }}\n",
      fmt::arg("m", p.m), fmt::arg("k", p.k), fmt::arg("n", p.n), fmt::arg("batches", p.batches),
      fmt::arg("pairs", p.pairs), fmt::arg("splits", p.splits),
      fmt::arg("resident", resident ? ", accumulated in registers over the loop" : ""),
      fmt::arg("unroll", unroll), fmt::arg("per_warp", p.per_warp),
      fmt::arg("work", p.pairs * p.splits), fmt::arg("warps", kBlockWarps),
      fmt::arg("ntiles", p.n / 8), fmt::arg("ksteps", p.k / 16),
      fmt::arg("abatch", ab.empty() ? "0" : broadcast_index(cb, ab, "bt")),
      fmt::arg("bbatch", bb.empty() ? "0" : broadcast_index(cb, bb, "bt")),
      fmt::arg("mk", staged ? p.mp * (p.k + kStagedPad) : p.m * (p.k + row_pad(n.inputs[0]))),
      fmt::arg("kn", p.k * b_stride), fmt::arg("b_stride", b_stride), fmt::arg("mn", p.m * p.n),
      fmt::arg("acc",
               !resident ? "          float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
               : chains == 1
                   ? fmt::format("          float* const acc = r{}[bt * {} + j];\n", id, p.per_warp)
                   : std::string()),
      fmt::arg("a_load", a_load), fmt::arg("b", tile_var(n.inputs[1])), fmt::arg("t", t),
      fmt::arg("b_offset", tma_tile(n.inputs[1])
                               ? tma_offset(n.inputs[1], "ks * 16 + (lane & 15)", "cb")
                               : fmt::format("bo + (ks * 16 + (lane & 15)) * {} + cb", b_stride)),
      fmt::arg(
          "ks_loop",
          ks_loop(p, chains == 1 ? std::string()
                                 : fmt::format("            float* const acc = r{}[(kk % {}) * "
                                               "{} + bt * {} + j];\n",
                                               id, chains, per_chain, p.per_warp))));
  if (resident) return s + "        }\n      }\n    }\n  }\n";
  return s + mma_write_back(p, tile_var(id)) + "    }\n  }\n";
}

// The end of a warp's work item: its 16x8 tile into `out` (rows past m dropped), or with a K
// split, into its split's partial tile, the partials then summed by the block into `out`.
std::string BlockLowering::mma_write_back(const MmaPlan& p, const std::string& out) const {
  if (p.splits == 1)
    return fmt::format(
        "          if (r0 < {m}) {{ {out}[co + r0 * {n} + oc] = acc[0]; {out}[co + r0 * {n} + oc + "
        "1] = acc[1]; }}\n"
        "          if (r1 < {m}) {{ {out}[co + r1 * {n} + oc] = acc[2]; {out}[co + r1 * {n} + oc + "
        "1] = acc[3]; }}\n"
        "        }}\n      }}\n",
        fmt::arg("m", p.m), fmt::arg("n", p.n), fmt::arg("out", out));
  return fmt::format(
      "          float* part = red + sp * {mpn};\n"
      "          part[r0 * {n} + oc] = acc[0]; part[r0 * {n} + oc + 1] = acc[1];\n"
      "          part[r1 * {n} + oc] = acc[2]; part[r1 * {n} + oc + 1] = acc[3];\n"
      "        }}\n      }}\n"
      "      __syncthreads();\n"
      "      for (int e = threadIdx.x; e < {mn}; e += {threads}) {{\n"
      "        float sum = 0.0f;\n"
      "        for (int q = 0; q < {splits}; ++q) sum += red[q * {mpn} + e];\n"
      "        {out}[co + e] = sum;\n"
      "      }}\n"
      "      __syncthreads();\n",
      fmt::arg("mpn", p.mp * p.n), fmt::arg("n", p.n), fmt::arg("mn", p.m * p.n),
      fmt::arg("threads", kBlockThreads), fmt::arg("splits", p.splits), fmt::arg("out", out));
}

// A resident matmul's registers, zeroed before the loop.
std::string BlockLowering::mma_declare_resident(int32_t id) const {
  const MmaPlan p = mma_plan(id);
  return fmt::format(
      "  float r{0}[{1}][4];\n"
      "#pragma unroll\n"
      "  for (int q = 0; q < {1}; ++q) r{0}[q][0] = r{0}[q][1] = r{0}[q][2] = r{0}[q][3] = 0.0f;\n",
      id, p.batches * p.per_warp * resident_chains(id));
}

// After the loop: a resident matmul's registers into its accumulator's tile, the K splits added
// through shared memory.
std::string BlockLowering::mma_flush_resident(int32_t id) const {
  const MmaPlan p = mma_plan(id);
  const std::string out = tile_var(schedule_.tiles[size_t(id)].reader);
  std::string s = fmt::format(
      "  {{  // node {id}'s products, summed in registers over the loop, into {out}\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "#pragma unroll\n"
      "    for (int bt = 0; bt < {batches}; ++bt) {{\n"
      "      const int co = bt * {mn};\n"
      "#pragma unroll\n"
      "      for (int j = 0; j < {per_warp}; ++j) {{\n"
      "        const int w = warp + j * {warps};\n"
      "        if (w < {work}) {{\n"
      "          const int pp = w % {pairs}, sp = w / {pairs};\n"
      "          const int r0 = (pp / {ntiles}) * 16 + g, r1 = r0 + 8, oc = (pp % {ntiles}) * 8 + "
      "2 "
      "* tq;\n"
      "{acc}",
      fmt::arg("id", id), fmt::arg("out", out), fmt::arg("batches", p.batches),
      fmt::arg("mn", p.m * p.n), fmt::arg("per_warp", p.per_warp), fmt::arg("warps", kBlockWarps),
      fmt::arg("work", p.pairs * p.splits), fmt::arg("pairs", p.pairs), fmt::arg("ntiles", p.n / 8),
      fmt::arg(
          "acc",
          resident_chains(id) == 1
              ? fmt::format("          const float* const acc = r{}[bt * {} + j];\n", id,
                            p.per_warp)
              : fmt::format("          float acc[4];\n"
                            "#pragma unroll\n"
                            "          for (int u = 0; u < 4; ++u) acc[u] = r{0}[bt * {1} + j][u] "
                            "+ r{0}[{2} + bt * {1} + j][u];\n",
                            id, p.per_warp, p.batches * p.per_warp)));
  return s + mma_write_back(p, out) + "    }\n  }\n";
}

std::string BlockLowering::matmul(int32_t id) const {
  if (tensor_core(id)) return mma_matmul(id);
  const BlockNode& n = node(id);
  const Dims& a = node(n.inputs[0]).tile.dims;
  const Dims& b = node(n.inputs[1]).tile.dims;
  const Dims& c = n.tile.dims;
  const int64_t m = c[c.size() - 2], nn = c.back(), k = a.back();
  const Dims cb(c.begin(), c.end() - 2), ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  int64_t mc = std::min<int64_t>(m, 16);
  while (m % mc != 0) --mc;
  const int64_t nt = std::min<int64_t>(pow2_at_least(nn), kBlockThreads);
  const int64_t kp = kBlockThreads / nt;
  std::string s = fmt::format(
      "  {{  // matmul [{m}x{k}] x [{k}x{n}], {batches} batch(es)\n"
      "    const int nl = threadIdx.x % {nt}, kp = threadIdx.x / {nt};\n"
      "    for (int bt = 0; bt < {batches}; ++bt) {{\n"
      "      const int ao = (int)({abatch}) * {mk}, bo = (int)({bbatch}) * {kn}, co = bt * "
      "{mn};\n"
      "      for (int m0 = 0; m0 < {m}; m0 += {mc})\n"
      "        for (int n0 = 0; n0 < {n}; n0 += {nt}) {{\n"
      "          const int col = n0 + nl;\n"
      "          float acc[{mc}];\n"
      "#pragma unroll\n"
      "          for (int i = 0; i < {mc}; ++i) acc[i] = 0.0f;\n"
      "          if (col < {n})\n"
      "            for (int kk = kp; kk < {k}; kk += {kp}) {{\n"
      "              const float bv = {bread};\n"
      "#pragma unroll\n"
      "              for (int i = 0; i < {mc}; ++i) acc[i] += {aread} * bv;\n"
      "            }}\n",
      fmt::arg("m", m), fmt::arg("k", k), fmt::arg("n", nn), fmt::arg("nt", nt), fmt::arg("kp", kp),
      fmt::arg("mc", mc), fmt::arg("batches", ir::num_elements(cb)),
      fmt::arg("abatch", ab.empty() ? "0" : broadcast_index(cb, ab, "bt")),
      fmt::arg("bbatch", bb.empty() ? "0" : broadcast_index(cb, bb, "bt")), fmt::arg("mk", m * k),
      fmt::arg("kn", k * nn), fmt::arg("mn", m * nn),
      fmt::arg("bread", read(n.inputs[1], fmt::format("bo + kk * {} + col", nn))),
      fmt::arg("aread", read(n.inputs[0], fmt::format("ao + (m0 + i) * {} + kk", k))));
  const std::string out = tile_var(id);
  if (kp == 1) {
    s += fmt::format(
        "          if (col < {n})\n"
        "#pragma unroll\n"
        "            for (int i = 0; i < {mc}; ++i) {out}[co + (m0 + i) * {n} + col] = acc[i];\n",
        fmt::arg("n", nn), fmt::arg("mc", mc), fmt::arg("out", out));
  } else {
    s += fmt::format(
        "#pragma unroll\n"
        "          for (int i = 0; i < {mc}; ++i) red[(kp * {mc} + i) * {nt} + nl] = acc[i];\n"
        "          __syncthreads();\n"
        "          for (int e = threadIdx.x; e < {mc} * {nt}; e += {threads}) {{\n"
        "            const int i = e / {nt}, cc = n0 + e % {nt};\n"
        "            if (cc < {n}) {{\n"
        "              float sum = 0.0f;\n"
        "              for (int p = 0; p < {kp}; ++p) sum += red[(p * {mc} + i) * {nt} + e % "
        "{nt}];\n"
        "              {out}[co + (m0 + i) * {n} + cc] = sum;\n"
        "            }}\n"
        "          }}\n"
        "          __syncthreads();\n",
        fmt::arg("n", nn), fmt::arg("mc", mc), fmt::arg("nt", nt), fmt::arg("kp", kp),
        fmt::arg("threads", kBlockThreads), fmt::arg("out", out));
  }
  s += "        }\n    }\n  }\n";
  return s;
}

}  // namespace yirage::backend::cuda::detail
