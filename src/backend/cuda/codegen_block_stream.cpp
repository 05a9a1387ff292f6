// Weights streamed through registers (see block_lowering.h): a tensor-core matmul with few rows
// whose B is a weight tile the loop walks reads that tile straight from global memory into its
// mma fragments, with no shared-memory copy, no stage and no ldmatrix.
//
// Why: with M = 1-16 rows the product is a matrix-vector stream, and the shared-memory path
// spent ~275 instructions a warp per 32 KB stage (ldmatrix of a 16-row A of which M rows are
// real, ldmatrix of B, mma, the stage's barrier), which bounded rmsnorm_linear at 1.95 TB/s
// (docs/design/cuda-findings.md). Here the product is computed transposed, Cᵀ = Bᵀ·Aᵀ, so that
// the weight is the 16x16 A operand of m16n8k16 and the M rows are its 8 (or 16) columns. Each
// lane loads four 16-byte vectors (4 rows x 8 columns of the tile) and builds the fragments of
// four mmas from them with byte permutes: the mma sums over k in any order both operands agree
// on, and its rows may stand for any columns, so the tile's logical k and n are permuted to
// match what a lane holds:
//   logical k 2tq, 2tq+1, 2tq+8, 2tq+9  <->  tile rows 4tq, 4tq+1, 4tq+2, 4tq+3;
//   mma t's logical rows g, g+8          <->  tile columns 8g+2t, 8g+2t+1.
// Aᵀ's fragment is then the 4 consecutive k of an A row, one 8-byte shared-memory load.
//
// The loop is split in two (loop fission). The for-loop itself runs everything else: it stages
// every iteration's A, rounded to 16 bits, into a buffer of its own, and feeds the other
// accumulators. After it, each warp streams its share of the weight with no barrier at all,
// keeping `depth` units (4 rows x 64 or 32 columns for every lane) of loads in flight. The
// weights' first units load before the for-loop starts, so the stream is under way during it.
// A barrier per iteration was the cost before: eight warps in lockstep, each iteration waiting
// on the slowest warp's loads.
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

constexpr int64_t kMaxRows = 16;
// Registers for loads in flight, shared by a kernel's streamed matmuls.
constexpr int64_t kPrefetchRegisters = 128;
constexpr int64_t kMaxDepth = 8;
// The staged copies of A (every iteration's) take at most this much shared memory, and leave the
// for-loop's own tiles some.
constexpr int64_t kMaxStagedBytes = 144 * 1024;
constexpr int64_t kLoopReserve = 48 * 1024;

}  // namespace

// The staged copy of A for every iteration: [m][iterations x k + pad] 16-bit elements, the pad
// against bank conflicts. The mmas take 8-row halves of A; the rows past m are not stored (their
// fragments are zeros, a_fragment()), which leaves a 2-row A a quarter of the shared memory that
// whole halves took, for the TMA's stages.
int64_t BlockLowering::staged_bytes(int64_t m, int64_t k) const {
  return m * staged_stride(k) * 2;
}

// A lane's `type` fragment word(s) of staged A at `rows` (its row h * 8 + g): zeros past row m.
std::string a_fragment(const std::string& type, const std::string& rows, int64_t m) {
  const std::string load = fmt::format("*reinterpret_cast<const {}*>({})", type, rows);
  if (m % 8 == 0) return load;
  return fmt::format("(h * 8 + g < {} ? {} : {}{{}})", m, load, type);
}

int64_t BlockLowering::staged_budget() const {
  return std::min(kMaxStagedBytes, options_.max_shared_bytes - kLoopReserve);
}

// Whether matmul `id` may stream its B: a tensor-core product of at most 16 rows accumulated in
// registers over the loop (one sum accumulator reads it), B a 2-D tile of a 2-D weight that the
// loop walks along K and nothing else reads, A's staged copy within the budget, and a grid of
// one wave.
bool BlockLowering::streams_b(int32_t id) const {
  if (!options_.register_weights) return false;
  const BlockNode& n = node(id);
  if (!std::holds_alternative<ir::MatmulOp>(n.op) || !tensor_core(id) || chain_of(id)) return false;
  if (g_.phase(id) != ir::BlockPhase::in_loop || schedule_.tiles[size_t(id)].readers != 1)
    return false;
  const auto* acc = std::get_if<ir::AccumulatorOp>(&node(schedule_.tiles[size_t(id)].reader).op);
  if (!acc || acc->fn != ir::AccumFn::sum) return false;
  const int32_t b = n.inputs[1];
  if (n.inputs[0] == b || schedule_.tiles[size_t(b)].readers != 1) return false;
  const auto& it = std::get<ir::InputIteratorOp>(node(b).op);
  const ir::TensorType& operand = g_.operands()[size_t(it.operand)];
  const Dims& tile = node(b).tile.dims;
  if (it.fmap != 0 || tile.size() != 2 || operand.dims.size() != 2 || n.tile.dims.size() != 2 ||
      node(n.inputs[0]).tile.dims.size() != 2)
    return false;
  const int64_t m = n.tile.dims[0], k = tile[0];
  if (m > kMaxRows || k % 16 != 0 || staged_bytes(m, k) > staged_budget()) return false;
  // One wave at most: a block pays for its for-loop before its stream starts, and with a block
  // per multiprocessor nothing overlaps that across waves (the Llama MLP's gate_up, 448 blocks
  // of n64_k256, took 152 us streamed against 122 us with its weight in the loop's stages).
  const auto& grid = g_.grid().extent;
  return options_.multiprocessors <= 0 || grid[0] * grid[1] * grid[2] <= options_.multiprocessors;
}

// Whether streamed matmul `id` can take its B through registers: whole 32- or 64-column groups
// that the 8 warps share evenly.
bool BlockLowering::register_streamable(int32_t id) const {
  const Dims& tile = node(node(id).inputs[1]).tile.dims;
  const int64_t cols = tile[1], k = tile[0];
  if (cols % 32 != 0) return false;
  const int64_t group = cols % 64 == 0 ? 64 : 32, groups = cols / group;
  if ((k / 16) * groups % kBlockWarps != 0) return false;
  return groups % kBlockWarps == 0 || kBlockWarps % groups == 0;
}

BlockLowering::StreamPlan BlockLowering::stream_plan(int32_t id) const {
  const BlockNode& n = node(id);
  const Dims& tile = node(n.inputs[1]).tile.dims;
  StreamPlan p;
  p.m = n.tile.dims[0];
  p.n = tile[1];
  p.k = tile[0];
  p.halves = (p.m + 7) / 8;
  p.vector = p.n % 64 == 0 ? 8 : 4;
  p.groups = std::max<int64_t>(1, p.n / (8 * p.vector));  // 1: not register_streamable()
  p.per_warp = (p.k / 16) * p.groups / kBlockWarps;
  p.sets = p.groups >= kBlockWarps ? p.groups / kBlockWarps : 1;
  p.splits = p.groups >= kBlockWarps ? 1 : kBlockWarps / p.groups;
  p.units = r_ * p.per_warp / schedule_.stream_ranks;
  int64_t streams = 0;
  for (int32_t other = 0; other < int32_t(g_.nodes().size()); ++other)
    streams += schedule_.tiles[size_t(other)].streamed ? 1 : 0;
  const int64_t per_unit = 4 * p.vector / 2;  // registers
  int64_t depth = std::clamp<int64_t>(kPrefetchRegisters / std::max<int64_t>(streams, 1) / per_unit,
                                      2, kMaxDepth);
  depth = std::max(depth / p.sets * p.sets, p.sets);  // whole sets: constant register indices
  p.depth = std::min(depth, p.units);
  return p;
}

// A kernel's candidates (one, or two that share A, like a gated MLP's gate and up) stream by TMA
// where they all can; otherwise the candidates that can stream through registers do. Streamed
// matmuls that share their A share its staged copy, which the first of them stages; the shared
// memory for those copies is bounded.
void BlockLowering::find_streamed() {
  const size_t count = g_.nodes().size();
  for (TileSchedule& t : schedule_.tiles) {
    t.streamed = false;
    t.stream_owner = -1;
  }
  schedule_.stream_tma_order.clear();
  std::vector<int32_t> candidates;
  for (int32_t id = 0; id < int32_t(count); ++id)
    if (streams_b(id)) candidates.push_back(id);
  if (stream_by_tma_together(candidates))
    schedule_.stream_tma_order = candidates;
  else
    std::erase_if(candidates, [&](int32_t id) { return !register_streamable(id); });
  int64_t staged_total = 0;
  for (int32_t id : candidates) {
    int32_t owner = id;
    for (int32_t other = 0; other < id; ++other)
      if (schedule_.tiles[size_t(other)].streamed && node(other).inputs[0] == node(id).inputs[0])
        owner = schedule_.tiles[size_t(other)].stream_owner;
    if (owner == id) {
      const int64_t bytes =
          staged_bytes(node(id).tile.dims[0], node(node(id).inputs[1]).tile.dims[0]);
      if (staged_total + bytes > staged_budget()) continue;
      staged_total += bytes;
    }
    schedule_.tiles[size_t(id)].stream_owner = owner;
    schedule_.tiles[size_t(id)].streamed = true;
    schedule_.tiles[size_t(id)].resident = true;
    schedule_.tiles[size_t(schedule_.tiles[size_t(id)].reader)].resident_of = id;
  }
  find_staged_directly();
}

// An iterator that only streamed matmuls read, as their A and in their own 16-bit type, needs no
// pipeline stages: the prologue copies every iteration's tile straight into the staged A
// (load_staged()), where the for-loop would have copied it out of its stages. All of it then goes
// out before the weights' first copies; the loop's later tiles likely queued behind those (not
// measured). Where the loop then walks no tile at all, the TMA streams take the room its stages
// had (a gated MLP's X: 3 stages of 16.5 KB). gated_mlp bs1 went from 25.1 to 21.9 us
// (docs/design/cuda-findings.md, weight streams).
void BlockLowering::find_staged_directly() {
  const size_t count = g_.nodes().size();
  for (TileSchedule& t : schedule_.tiles) t.staged_directly = false;
  schedule_.loop_free_room = false;
  bool loop_walks_tiles = false;
  for (int32_t id = 0; id < int32_t(count); ++id) {
    const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
    if (!it || it->fmap == ir::kReplicate || streamed_tile(id)) continue;
    const ir::DType dtype = g_.operands()[size_t(it->operand)].dtype;
    bool direct = it->fmap == 1 && node(id).tile.dims.size() == 2 &&
                  schedule_.tiles[size_t(id)].readers > 0 && ir::dtype_size(dtype) == 2 &&
                  vector_rows(id);
    for (int32_t r = 0; direct && r < int32_t(count); ++r) {
      const BlockNode& n = node(r);
      if (std::find(n.inputs.begin(), n.inputs.end(), id) == n.inputs.end()) continue;
      direct = schedule_.tiles[size_t(r)].streamed && n.inputs[0] == id && n.inputs[1] != id &&
               n.tile.dtype == dtype;
    }
    schedule_.tiles[size_t(id)].staged_directly = direct;
    loop_walks_tiles = loop_walks_tiles || !direct;
  }
  if (loop_walks_tiles || schedule_.stream_tma_order.empty()) return;
  schedule_.loop_free_room = true;
  // The larger room must keep the streams' plans valid and in step; where not, they keep theirs.
  schedule_.loop_free_room = stream_by_tma_together(schedule_.stream_tma_order);
}

bool BlockLowering::streamed_tile(int32_t id) const {
  const int32_t r = schedule_.tiles[size_t(id)].reader;
  return r >= 0 && std::holds_alternative<ir::InputIteratorOp>(node(id).op) &&
         schedule_.tiles[size_t(r)].streamed && node(r).inputs[1] == id;
}

int64_t BlockLowering::stream_staged_elements(int32_t id) const {
  const StreamPlan p = stream_plan(id);
  return staged_bytes(p.m, p.k) / 2;
}

// Unit `unit` (an int expression) of this lane: its slot `slot` of registers loaded from the
// weight. Unit u is the warp's j = u % per_warp-th (group, k-step) pair of iteration
// u / per_warp.
std::string BlockLowering::stream_load(int32_t id, const std::string& unit,
                                       const std::string& slot) const {
  const StreamPlan p = stream_plan(id);
  const int32_t b = node(id).inputs[1];
  const auto& it = std::get<ir::InputIteratorOp>(node(b).op);
  const int64_t stride = operand_strides(it.operand)[0];
  return fmt::format(
      "      {{\n"
      "        const int loaded = {unit}, q = warp + (loaded % {per_warp}) * {warps};\n"
      "        const yr_half* const src = reinterpret_cast<const yr_half*>({base}) + "
      "(long long)((q / {groups}) * 16 + tq * 4) * {stride}ll + (q % {groups}) * {gc} + g * "
      "{vector};\n"
      "#pragma unroll\n"
      "        for (int r = 0; r < 4; ++r) yr_ld_stream{bytes}(w{id}[{slot}][r], src + r * "
      "{stride}ll);\n"
      "      }}\n",
      fmt::arg("unit", unit), fmt::arg("per_warp", p.per_warp), fmt::arg("warps", kBlockWarps),
      fmt::arg("base", tile_source(b, fmt::format("loaded / {}", p.per_warp), "0")),
      fmt::arg("groups", p.groups), fmt::arg("stride", stride), fmt::arg("gc", 8 * p.vector),
      fmt::arg("vector", p.vector), fmt::arg("bytes", p.vector * 2), fmt::arg("id", id),
      fmt::arg("slot", slot));
}

// Before the for-loop: the staged A's buffer, the accumulators (zeroed), the loads' registers.
std::string BlockLowering::stream_declare(int32_t id) const {
  std::string s = stream_tma(id) ? tma_stream_declare(id) : register_stream_declare(id);
  if (schedule_.tiles[size_t(id)].stream_owner == id)
    s += fmt::format(
        "  unsigned short* const sx{} = reinterpret_cast<unsigned short*>(smem + {});\n", id,
        schedule_.tiles[size_t(id)].storage.staged_a);
  return s;
}

// The weight's first loads, issued after the for-loop's first tiles: the few bytes of A those
// wait for would otherwise queue behind a multiprocessor's 100 KB or more of weight (ncu: 10% of
// rmsnorm_linear's stall samples on the for-loop's first barrier, waiting on its loads).
std::string BlockLowering::stream_first(int32_t id) const {
  if (stream_tma(id)) return tma_stream_first(id);
  const StreamPlan p = stream_plan(id);
  std::string s = fmt::format(
      "  {{\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "    const int first = {};\n",
      stream_first_unit(id));
  for (int64_t d = 0; d < p.depth; ++d)
    s += stream_load(id, fmt::format("first + {}", d), std::to_string(d));
  return s + "  }\n";
}

std::string BlockLowering::register_stream_declare(int32_t id) const {
  const StreamPlan p = stream_plan(id);
  return fmt::format(
      "  float r{id}[{sets}][{tiles}][{halves}][4];\n"
      "#pragma unroll\n"
      "  for (int q = 0; q < {floats}; ++q) (&r{id}[0][0][0][0])[q] = 0.0f;\n"
      "  unsigned w{id}[{depth}][4][{words}];\n",
      fmt::arg("id", id), fmt::arg("sets", p.sets), fmt::arg("tiles", p.vector / 2),
      fmt::arg("halves", p.halves), fmt::arg("floats", p.sets * (p.vector / 2) * p.halves * 4),
      fmt::arg("depth", p.depth), fmt::arg("words", p.vector / 2));
}

// In the for-loop: iteration `it`'s A, rounded to the matmul's 16-bit type, into its slot of the
// staged buffer. Nothing reads it before the stream, after the loop's closing barrier.
std::string BlockLowering::stream_stage(int32_t id) const {
  if (schedule_.tiles[size_t(id)].stream_owner != id || staged_directly(node(id).inputs[0]))
    return "";
  const BlockNode& n = node(id);
  const StreamPlan p = stream_plan(id);
  // A's K is a multiple of 16 (streams_b()), so its rows hold whole runs of eight. Element by
  // element, 16 rows of 4096 took the stream's kernel 7.7 K of its 9.4 K instructions a warp (ncu,
  // rmsnorm_linear bs8), the per-element index arithmetic more than the values.
  const std::string store =
      stage_pass(n.inputs[0], ctype(n.tile.dtype), "",
                 fmt::format("sx{} + (e / {}) * {} + (it - {}) * {} + e % {}", id, p.k,
                             staged_stride(p.k), staged_first_iteration(), p.k, p.k));
  if (!schedule_.halved_staging) return store;
  return fmt::format("  if ((unsigned)(it - {}) < {}u) {{\n{}  }}\n", staged_first_iteration(),
                     staged_iterations(), store);
}

// After the for-loop: the warp's units, `depth` of them in flight, with no barrier. A unit's
// four (or two) mmas per 8 rows of A take their fragments from the lane's registers by byte
// permutes, and Aᵀ's from the staged copy.
std::string BlockLowering::stream_run(int32_t id) const {
  if (stream_tma(id)) return tma_stream_run(id);
  const BlockNode& n = node(id);
  const StreamPlan p = stream_plan(id);
  std::string s = fmt::format(
      "  {{  // tensor-core matmul [{m}x{k}] x [{k}x{n}] over {range} iterations, B streamed "
      "through registers ({depth} units in flight), computed transposed\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "    const int first = {first};\n"
      "    for (int u0 = 0; u0 < {units}; u0 += {depth}) {{\n"
      "#pragma unroll\n"
      "      for (int d = 0; d < {depth}; ++d) {{\n"
      "        const int u = u0 + d, unit = first + u;\n"
      "        if (u < {units}) {{\n"
      "          const int q = warp + (unit % {per_warp}) * {warps}, ks = q / {groups};\n"
      "          const unsigned short* const a_rows = sx{owner} + (unit / {per_warp} - "
      "{staged_first}) * {k} + ks * 16 + tq * 4;\n"
      "          float (*const acc)[{halves}][4] = r{id}[d % {sets}];\n"
      "          unsigned f[{tiles}][4];\n"
      "#pragma unroll\n"
      "          for (int t = 0; t < {tiles}; ++t) {{\n"
      "            f[t][0] = yr_prmt(w{id}[d][0][t], w{id}[d][1][t], 0x5410u);\n"
      "            f[t][1] = yr_prmt(w{id}[d][0][t], w{id}[d][1][t], 0x7632u);\n"
      "            f[t][2] = yr_prmt(w{id}[d][2][t], w{id}[d][3][t], 0x5410u);\n"
      "            f[t][3] = yr_prmt(w{id}[d][2][t], w{id}[d][3][t], 0x7632u);\n"
      "          }}\n"
      "          if (u + {depth} < {units}) {{\n{load}          }}\n"
      "#pragma unroll\n"
      "          for (int h = 0; h < {halves}; ++h) {{\n"
      "            const uint2 x = {x};\n"
      "#pragma unroll\n"
      "            for (int t = 0; t < {tiles}; ++t)\n"
      "              yr_mma({t}{{}}, acc[t][h], f[t][0], f[t][1], f[t][2], f[t][3], x.x, x.y);\n"
      "          }}\n"
      "        }}\n"
      "      }}\n"
      "    }}\n"
      "  }}\n",
      fmt::arg("m", p.m), fmt::arg("k", p.k), fmt::arg("n", p.n), fmt::arg("range", r_),
      fmt::arg("depth", p.depth), fmt::arg("units", p.units), fmt::arg("per_warp", p.per_warp),
      fmt::arg("warps", kBlockWarps), fmt::arg("groups", p.groups), fmt::arg("id", id),
      fmt::arg("owner", schedule_.tiles[size_t(id)].stream_owner), fmt::arg("halves", p.halves),
      fmt::arg("sets", p.sets), fmt::arg("tiles", p.vector / 2),
      fmt::arg("load", stream_load(id, fmt::format("unit + {}", p.depth), "d")),
      fmt::arg("first", stream_first_unit(id)), fmt::arg("staged_first", staged_first_iteration()),
      fmt::arg("t", ctype(n.tile.dtype)),
      fmt::arg("x", a_fragment("uint2",
                               fmt::format("a_rows + (h * 8 + g) * {}", staged_stride(p.k)), p.m)));
  return s;
}

// Then the transposed fragments into the accumulator's [m x n] tile. Warps that split K write
// partial tiles, which the block then sums.
std::string BlockLowering::stream_flush(int32_t id) const {
  if (stream_tma(id)) return tma_stream_flush(id);
  const StreamPlan p = stream_plan(id);
  const std::string out = tile_var(schedule_.tiles[size_t(id)].reader);
  const std::string target =
      p.splits == 1 ? out : fmt::format("(red + (warp / {}) * {})", p.groups, p.m * p.n);
  std::string s = fmt::format(
      "  {{  // node {id}'s streamed products into {out}\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "    float* const part = {target};\n"
      "#pragma unroll\n"
      "    for (int j = 0; j < {sets}; ++j) {{\n"
      "      const int grp = (warp + j * {warps}) % {groups};\n"
      "#pragma unroll\n"
      "      for (int t = 0; t < {tiles}; ++t)\n"
      "#pragma unroll\n"
      "        for (int h = 0; h < {halves}; ++h) {{\n"
      "          const int row = h * 8 + tq * 2, col = grp * {gc} + g * {vector} + t * 2;\n"
      "          const float* const c = r{id}[j][t][h];\n"
      "{stores}"
      "        }}\n"
      "    }}\n",
      fmt::arg("id", id), fmt::arg("out", out), fmt::arg("target", target),
      fmt::arg("sets", p.sets), fmt::arg("warps", kBlockWarps), fmt::arg("groups", p.groups),
      fmt::arg("tiles", p.vector / 2), fmt::arg("halves", p.halves), fmt::arg("gc", 8 * p.vector),
      fmt::arg("vector", p.vector), fmt::arg("stores", fragment_stores("          ", p.m, p.n, 1)));
  return s + stream_sum_partials(out, p.m * p.n, p.splits) + "  }\n";
}

// A transposed mma fragment `c` into `part` ([m x n], f32): rows `row` and `row` + 1 of the
// product, columns `col` and `col` + `next`; rows past m dropped.
std::string fragment_stores(const std::string& indent, int64_t m, int64_t n, int next) {
  return fmt::format(
      "{indent}if (row < {m}) {{ part[row * {n} + col] = c[0]; part[row * {n} + col + {next}] = "
      "c[2]; }}\n"
      "{indent}if (row + 1 < {m}) {{ part[(row + 1) * {n} + col] = c[1]; part[(row + 1) * {n} + "
      "col + {next}] = c[3]; }}\n",
      fmt::arg("indent", indent), fmt::arg("m", m), fmt::arg("n", n), fmt::arg("next", next));
}

// Where `splits` warps wrote partial [m x n] tiles into `red`: their sum into `out`.
std::string stream_sum_partials(const std::string& out, int64_t mn, int64_t splits) {
  if (splits == 1) return "";
  return fmt::format(
      "    __syncthreads();\n"
      "    for (int e = threadIdx.x; e < {mn}; e += {threads}) {{\n"
      "      float sum = 0.0f;\n"
      "#pragma unroll\n"
      "      for (int q = 0; q < {splits}; ++q) sum += red[q * {mn} + e];\n"
      "      {out}[e] = sum;\n"
      "    }}\n"
      "    __syncthreads();\n",
      fmt::arg("mn", mn), fmt::arg("threads", kBlockThreads), fmt::arg("splits", splits),
      fmt::arg("out", out));
}

}  // namespace yirage::backend::cuda::detail

namespace yirage::backend::cuda {

// streams_b() and register_streamable() for the search: at most 16 rows, K a multiple of
// 16 x kBlockWarps (so that the units divide over the warps whatever the column groups), and the
// column widths whose 32- or 64-column groups the 8 warps share evenly; A's staged copies within
// the budget less their pads; one wave of blocks.
nlohmann::json streamed_weights_space(const CodegenOptions& options) {
  using namespace detail;
  if (!options.register_weights) return nullptr;
  const int64_t budget = std::min(kMaxStagedBytes, options.max_shared_bytes - kLoopReserve) -
                         kMaxRows * kStagedPad * 2;
  return {{"max_rows", kMaxRows},
          {"k_multiple", 16 * kBlockWarps},
          {"column_widths", {32, 64, 128, 256, 512}},
          {"max_staged_bytes", budget},
          {"max_blocks", options.multiprocessors > 0 ? options.multiprocessors : 1}};
}

}  // namespace yirage::backend::cuda
