// Weights streamed by the Tensor Memory Accelerator after the for-loop (sm_90; see
// codegen_block_stream.cpp for the loop fission they share with the register stream).
//
// Why: streamed through registers, a multiprocessor kept too few bytes in flight. With one block
// of 96 on each of 96 multiprocessors, rmsnorm_linear ran at 2.3 TB/s, every warp stalled on its
// loads (ncu: long-scoreboard stalls on the byte permutes, DRAM 48% busy), about what the GEMV
// probe got from 96 blocks (docs/design/cuda-findings.md). The copy engine takes the
// per-thread requests out of the way: thread 0 issues one 2-D box per 64-column panel and chunk
// of `chunk` rows, `stages` chunks ahead, each landing 128-byte swizzled on its stage's mbarrier.
//
// The warps read a chunk's 16x16 blocks of B by ldmatrix.trans, which hands each lane its Bᵀ
// fragment directly (the transposed product needs no permutes here), and take Aᵀ's fragments from
// the staged copy: warp w takes the 16-column tile w % T (T = min(tiles, 8)) and every
// (8 / T)-th k-step from w / T, or with 8 tiles or more, tiles w, w + 8, ... A barrier after
// each chunk frees its stage for the copy `stages` chunks on.
//
// Two streams that share A (a gated MLP's gate and up) split the room, each with its own stages
// and mbarriers, and one loop takes their chunks in turn. Through registers instead, gated_mlp's
// n64_k1024 took 26.9 us; by TMA, 25.2 us (docs/design/cuda-findings.md, weight streams).
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::Dims;

namespace {

constexpr int64_t kChunkBytes = 32 * 1024;
constexpr int64_t kMaxChunkRows = 256;  // a tensor map box's limit, in each dimension
constexpr int64_t kMaxBoxColumns = 256;
constexpr size_t kMaxTmaStreams = 2;
// The staged A and the stages together; the rest is for the for-loop's own tiles.
constexpr int64_t kMaxStreamShared = 176 * 1024;
// Where the loop walks no tiles (find_staged_directly()), all but this much of the block's shared
// memory: the accumulators, the reduction scratch and the barriers.
constexpr int64_t kLoopFreeReserve = 16 * 1024;

}  // namespace

// Whether streamed matmul `id` can take its B by TMA: whole 64-column panels of a weight whose
// rows are whole 16 bytes, chunks that divide the loop's K range, and room in shared memory.
bool BlockLowering::streams_by_tma(int32_t id, int64_t streams) const {
  if (!options_.tensor_maps) return false;
  const int32_t b = node(id).inputs[1];
  const auto& it = std::get<ir::InputIteratorOp>(node(b).op);
  const ir::TensorType& operand = g_.operands()[size_t(it.operand)];
  const StreamPlan p = stream_plan(id);
  if (ir::dtype_size(operand.dtype) != 2 || p.n % 16 != 0 || operand.dims[1] % 8 != 0) return false;
  if (p.n % 64 != 0 && p.n > kMaxBoxColumns) return false;
  const TmaStreamPlan t = tma_stream_plan(id, streams);
  if (t.chunk < 16 || (r_ * p.k) % t.chunk != 0) return false;
  return (t.chunk / 16) * t.tiles % kBlockWarps == 0 && t.stages >= 2;
}

// Whether every one of `ids` can take its B by TMA in one shared loop: they share A (one staged
// copy), their plans agree on chunks and stages, and each fits its share of the room.
bool BlockLowering::stream_by_tma_together(const std::vector<int32_t>& ids) const {
  if (ids.empty() || ids.size() > kMaxTmaStreams) return false;
  const int64_t streams = int64_t(ids.size());
  const TmaStreamPlan first = tma_stream_plan(ids[0], streams);
  return std::all_of(ids.begin(), ids.end(), [&](int32_t id) {
    const TmaStreamPlan t = tma_stream_plan(id, streams);
    return streams_by_tma(id, streams) && node(id).inputs[0] == node(ids[0]).inputs[0] &&
           t.chunk == first.chunk && t.chunks == first.chunks && t.stages == first.stages;
  });
}

// Where matmul `id` is in the TMA streams' order: its tensor map follows the for-loop's maps.
int64_t BlockLowering::stream_tma_index(int32_t id) const {
  return std::find(schedule_.stream_tma_order.begin(), schedule_.stream_tma_order.end(), id) -
         schedule_.stream_tma_order.begin();
}

BlockLowering::TmaStreamPlan BlockLowering::tma_stream_plan(int32_t id, int64_t streams) const {
  const StreamPlan p = stream_plan(id);
  TmaStreamPlan t;
  // Chunks of 32 KB, schedule_.stream_stage_cap stages at most, as many as fit beside the staged A
  // (each of the kernel's TMA streams taking an equal share of the room); halved (to 64 rows at
  // least) while fewer than two fit.
  const int64_t shared =
      schedule_.loop_free_room ? options_.max_shared_bytes - kLoopFreeReserve : kMaxStreamShared;
  const int64_t room = (shared - staged_bytes(p.m, p.k)) / streams;
  t.chunk = std::min({kMaxChunkRows, kChunkBytes / (p.n * 2), r_ * p.k});
  while (t.chunk > 64 && room / (t.chunk * p.n * 2) < 2) t.chunk /= 2;
  t.chunks = t.chunk > 0 ? r_ * p.k / t.chunk / schedule_.stream_ranks : 0;  // a pair's block: half
  t.stages = t.chunk > 0
                 ? std::min({schedule_.stream_stage_cap, t.chunks, room / (t.chunk * p.n * 2)})
                 : 0;
  t.tiles = p.n / 16;
  t.lanes = std::gcd(kBlockWarps, t.tiles);
  t.sets = t.tiles / t.lanes;
  t.splits = kBlockWarps / t.lanes;
  t.steps = t.chunk / 16 * t.tiles / kBlockWarps;
  t.swizzled = p.n % kSwizzlePanel == 0;
  return t;
}

// Thread 0 arms stage `slot`'s mbarrier and copies chunk `chunk` into it.
std::string BlockLowering::tma_stream_issue(int32_t id, const std::string& chunk,
                                            const std::string& slot) const {
  const StreamPlan p = stream_plan(id);
  const TmaStreamPlan t = tma_stream_plan(id);
  const int32_t b = node(id).inputs[1];
  return fmt::format(
      "      yr_fence_proxy_async();\n"
      "      yr_mbar_expect_tx(sbar{id} + ({slot}), {bytes});\n"
      "      for (int p = 0; p < {panels}; ++p)\n"
      "        yr_tma_load_2d(ws{id} + ({slot}) * {stage} + p * {panel}, &tm{map}, sbar{id} + "
      "({slot}), {col} + p * {box}, {row} + ({chunk}) * {rows});\n",
      fmt::arg("id", id), fmt::arg("slot", slot), fmt::arg("bytes", t.chunk * p.n * 2),
      fmt::arg("panels", t.swizzled ? p.n / kSwizzlePanel : 1), fmt::arg("stage", t.chunk * p.n),
      fmt::arg("panel", t.chunk * kSwizzlePanel), fmt::arg("box", t.swizzled ? kSwizzlePanel : p.n),
      fmt::arg("map", schedule_.tma_order.size() + stream_tma_index(id)),
      fmt::arg("col", tma_coordinate(b, 1, "0")), fmt::arg("row", tma_coordinate(b, 0, "0")),
      fmt::arg("chunk", chunk), fmt::arg("rows", t.chunk));
}

// Before the for-loop: the stages, their mbarriers and the accumulators.
std::string BlockLowering::tma_stream_declare(int32_t id) const {
  const StreamPlan p = stream_plan(id);
  const TmaStreamPlan t = tma_stream_plan(id);
  const TileStorage& s = schedule_.tiles[size_t(id)].storage;
  return fmt::format(
      "  {type}* const ws{id} = reinterpret_cast<{type}*>(smem + {stages_at});\n"
      "  unsigned long long* const sbar{id} = reinterpret_cast<unsigned long long*>(smem + "
      "{bars_at});\n"
      "  float r{id}[{sets}][{halves}][4];\n"
      "#pragma unroll\n"
      "  for (int q = 0; q < {floats}; ++q) (&r{id}[0][0][0])[q] = 0.0f;\n"
      "  if (threadIdx.x == 0) {{\n"
      "    if (yr_smem_address(smem) % 1024 != 0) __trap();\n"
      "    for (int s = 0; s < {count}; ++s) yr_mbar_init(sbar{id} + s, 1);\n"
      "    yr_mbar_init_fence();\n"
      "  }}\n",
      fmt::arg("type", ctype(node(id).tile.dtype)), fmt::arg("id", id),
      fmt::arg("stages_at", s.stream_stages), fmt::arg("bars_at", s.stream_barriers),
      fmt::arg("sets", t.sets), fmt::arg("halves", p.halves),
      fmt::arg("floats", t.sets * p.halves * 4), fmt::arg("count", t.stages));
}

// After the for-loop's first loads are issued: the first `stages` chunks' copies.
std::string BlockLowering::tma_stream_first(int32_t id) const {
  const TmaStreamPlan t = tma_stream_plan(id);
  std::string issue = fmt::format("    const int first = {};\n", pair_offset(t.chunks));
  for (int64_t c = 0; c < t.stages; ++c)
    issue += tma_stream_issue(id, fmt::format("first + {}", c), std::to_string(c));
  return "  if (threadIdx.x == 0) {\n" + issue + "  }\n";
}

// After the for-loop: every chunk in turn, waited for on its mbarrier. Warp w takes the units
// u = w, w + 8, ... of a chunk, unit u the 16x16 block (k-step u / tiles, tile u % tiles); the
// tiles a warp meets are those congruent to w modulo `lanes`, its accumulator sets. The kernel's
// TMA streams (a gated MLP's gate and up) take their chunks in turn within one loop, so that all
// of their stages are in flight at once, and one barrier per chunk frees the stages of all.
std::string BlockLowering::tma_stream_run(int32_t id) const {
  if (id != schedule_.stream_tma_order.front()) return "";  // the first stream's loop runs them all
  const TmaStreamPlan t = tma_stream_plan(id);
  std::string work, refill;
  for (int32_t s : schedule_.stream_tma_order) {
    work += tma_stream_chunk(s);
    refill += tma_stream_issue(s, fmt::format("first + c + {}", t.stages), "slot");
  }
  return fmt::format(
      "  {{  // B streamed by TMA for {count} matmul(s), {stages} chunks of {rows} rows each in "
      "flight\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "    const int lrow = (lane & 7) + ((lane >> 4) & 1) * 8, lcol = ((lane >> 3) & 1) * 8;\n"
      "    const int first = {first};\n"
      "    for (int c = 0; c < {chunks}; ++c) {{\n"
      "      const int slot = c % {stages};\n"
      "{work}"
      "      __syncthreads();\n"
      "      if (threadIdx.x == 0 && c + {stages} < {chunks}) {{\n{refill}      }}\n"
      "    }}\n"
      "  }}\n",
      fmt::arg("count", schedule_.stream_tma_order.size()), fmt::arg("stages", t.stages),
      fmt::arg("rows", t.chunk), fmt::arg("chunks", t.chunks),
      fmt::arg("first", pair_offset(t.chunks)), fmt::arg("work", work), fmt::arg("refill", refill));
}

// One chunk of matmul `id`'s stream: wait for it, then the warp's units of it.
std::string BlockLowering::tma_stream_chunk(int32_t id) const {
  const StreamPlan p = stream_plan(id);
  const TmaStreamPlan t = tma_stream_plan(id);
  const int64_t stride = staged_stride(p.k);
  const std::string address =
      t.swizzled ? fmt::format("yr_swizzle128(ks * 16 + lrow, nt * 16 + lcol, {})", t.chunk)
                 : fmt::format("(ks * 16 + lrow) * {} + nt * 16 + lcol", p.n);
  auto mma = [&](const std::string& set) {
    return fmt::format(
        "#pragma unroll\n"
        "          for (int h = 0; h < {halves}; ++h)\n"
        "            yr_mma({type}{{}}, r{id}[{set}][h], a[0], a[1], a[2], a[3], x[h][0], "
        "x[h][1]);\n",
        fmt::arg("halves", p.halves), fmt::arg("type", ctype(node(id).tile.dtype)),
        fmt::arg("id", id), fmt::arg("set", set));
  };
  std::string products;
  if (t.sets == 1)
    products = mma("0");
  else if (t.tiles % kBlockWarps == 0)
    products = mma(fmt::format("j % {}", t.sets));
  else  // the set is the warp's own: a uniform branch
    products = fmt::format(
        "#pragma unroll\n"
        "        for (int s = 0; s < {}; ++s)\n"
        "          if (s == nt / {}) {{\n{}          }}\n",
        t.sets, t.lanes, mma("s"));
  return fmt::format(
      "      {{  // tensor-core matmul [{m}x{k}] x [{k}x{n}] over {range} iterations, computed "
      "transposed\n"
      "      yr_mbar_wait(sbar{id} + slot, (c / {stages}) & 1);\n"
      "      const {type}* const tile = ws{id} + slot * {stage};\n"
      "#pragma unroll\n"
      "      for (int j = 0; j < {steps}; ++j) {{\n"
      "        const int u = warp + j * {warps}, ks = u / {tiles}, nt = u % {tiles};\n"
      "        const unsigned short* const a_rows = sx{owner} + (first + c) * {rows} - "
      "{staged_first} * {k} + ks * 16 + tq * 2;\n"
      "        unsigned x[{halves}][2];\n"
      "#pragma unroll\n"
      "        for (int h = 0; h < {halves}; ++h) {{\n"
      "          x[h][0] = {x0};\n"
      "          x[h][1] = {x1};\n"
      "        }}\n"
      "        unsigned a[4];\n"
      "        yr_ldmatrix_x4_trans(a, tile + {address});\n"
      "{products}"
      "      }}\n"
      "      }}\n",
      fmt::arg("m", p.m), fmt::arg("k", p.k), fmt::arg("n", p.n), fmt::arg("range", r_),
      fmt::arg("stages", t.stages), fmt::arg("rows", t.chunk), fmt::arg("id", id),
      fmt::arg("type", ctype(node(id).tile.dtype)), fmt::arg("stage", t.chunk * p.n),
      fmt::arg("steps", t.steps), fmt::arg("warps", kBlockWarps), fmt::arg("tiles", t.tiles),
      fmt::arg("owner", schedule_.tiles[size_t(id)].stream_owner), fmt::arg("halves", p.halves),
      fmt::arg("staged_first", staged_first_iteration()),
      fmt::arg("x0", a_fragment("unsigned", fmt::format("a_rows + (h * 8 + g) * {}", stride), p.m)),
      fmt::arg("x1",
               a_fragment("unsigned", fmt::format("a_rows + (h * 8 + g) * {} + 8", stride), p.m)),
      fmt::arg("address", address), fmt::arg("products", products));
}

// Then the transposed fragments into the accumulator's [m x n] tile: set q of warp w is tile
// w % lanes + q * lanes. Warps that split K (those equal modulo `lanes`) write partial tiles,
// which the block sums.
std::string BlockLowering::tma_stream_flush(int32_t id) const {
  const StreamPlan p = stream_plan(id);
  const TmaStreamPlan t = tma_stream_plan(id);
  const std::string out = tile_var(schedule_.tiles[size_t(id)].reader);
  const std::string target =
      t.splits == 1 ? out : fmt::format("(red + (warp / {}) * {})", t.lanes, p.m * p.n);
  std::string s = fmt::format(
      "  {{  // node {id}'s streamed products into {out}\n"
      "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane "
      "& 3;\n"
      "    float* const part = {target};\n"
      "#pragma unroll\n"
      "    for (int s = 0; s < {sets}; ++s)\n"
      "#pragma unroll\n"
      "      for (int h = 0; h < {halves}; ++h) {{\n"
      "        const int row = h * 8 + tq * 2, col = (warp % {lanes} + s * {lanes}) * 16 + g;\n"
      "        const float* const c = r{id}[s][h];\n"
      "{stores}"
      "      }}\n",
      fmt::arg("id", id), fmt::arg("out", out), fmt::arg("target", target),
      fmt::arg("sets", t.sets), fmt::arg("halves", p.halves), fmt::arg("lanes", t.lanes),
      fmt::arg("stores", fragment_stores("        ", p.m, p.n, 8)));
  return s + stream_sum_partials(out, p.m * p.n, t.splits) + "  }\n";
}

// The tensor map of a TMA-streamed weight: boxes of 64 columns by one chunk's rows.
TensorMapArg BlockLowering::tma_stream_map(int32_t id) const {
  const TmaStreamPlan t = tma_stream_plan(id);
  const int32_t b = node(id).inputs[1];
  return operand_map(
      b, {uint32_t(t.swizzled ? kSwizzlePanel : node(b).tile.dims[1]), uint32_t(t.chunk)},
      t.swizzled);
}

}  // namespace yirage::backend::cuda::detail
