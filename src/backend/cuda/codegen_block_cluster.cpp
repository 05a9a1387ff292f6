// Block pairs (sm_90 thread-block clusters): a kernel whose weights stream after its for-loop,
// through registers or by TMA (codegen_block_stream.cpp, codegen_block_stream_tma.cpp), may run
// each block of its grid as a cluster of two blocks on two multiprocessors. Both run the whole
// for-loop (staging A is cheap next to the weight), then each streams half of the weight's units;
// block 1 hands its partial products to block 0 through distributed shared memory, block 0 adds
// them and runs the rest of the kernel, block 1 leaves.
//
// Why: a grid of wide tiles leaves multiprocessors idle, and a grid of narrow ones reads few
// bytes of each weight row per block. A pair puts two multiprocessors behind each block's
// columns without a second kernel to add the halves. A probe read rmsnorm_linear's weight in
// 14.4 us with 128-column blocks split over pairs, against 15.5 us for 64-column blocks alone.
// In the lowering, pairs took gated_mlp's n64 tiles from 31.1 to 26.8 us and rmsnorm_linear's
// n128 from 19.6 to 17.7 us (docs/design/cuda-findings.md, weight streams).
#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"

namespace yirage::backend::cuda::detail {

const std::string& cluster_prelude() {
  static const std::string text = R"(
// Every thread of every block of the cluster arrives; writes before it are seen after it.
__device__ __forceinline__ void yr_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Where `p` is in a peer block's shared memory: the same offset in block `rank` of the cluster.
__device__ __forceinline__ unsigned yr_peer_address(const void* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float yr_peer_load(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(yr_peer_address(p, rank))
               : "memory");
  return v;
}
__device__ __forceinline__ double yr_peer_load(const double* p, unsigned rank) {
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(yr_peer_address(p, rank))
               : "memory");
  return v;
}
)";
  return text;
}

// Whether streamed matmul `id` can split over a pair: clusters available, the doubled grid
// still one wave, and its units (through registers) or chunks (by TMA) dividing in two.
// Called with schedule_.stream_ranks = 1, so that the plans count the whole loop's.
bool BlockLowering::pairable(int32_t id) const {
  if (!options_.clusters || options_.multiprocessors <= 0) return false;
  const auto& grid = g_.grid().extent;
  if (2 * grid[0] * grid[1] * grid[2] > options_.multiprocessors) return false;
  // Gate and up by TMA in one loop ran slower as pairs: gated_mlp n64_k1024, 25.2 us in 64
  // single blocks against 26.6 us in 64 pairs, and 22.0 against 23.1 us with each block of a
  // pair staging half of X (docs/design/cuda-findings.md, weight streams).
  if (stream_tma(id) && schedule_.stream_tma_order.size() > 1) return false;
  if (stream_tma(id)) return tma_stream_plan(id).chunks % 2 == 0;
  return stream_plan(id).units % 2 == 0;
}

// Pairs where every streamed product can split.
void BlockLowering::choose_stream_ranks() {
  schedule_.stream_ranks = 1;
  bool any = false;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    if (!schedule_.tiles[size_t(id)].streamed) continue;
    if (!pairable(id)) return;
    any = true;
  }
  if (any) schedule_.stream_ranks = 2;
}

// The streamed products. Where the grid could run as pairs over an even number of iterations,
// they are first chosen with each block of a pair staging only its half of A's K (the iterations
// of the units or chunks it streams), kept where the kernel then pairs; otherwise chosen as for
// single blocks, staging all of K. Staging all of K, 16 rows of 4096 took 128 KB and left
// rmsnorm_linear bs8's TMA stream two 16 KB stages; a half leaves it three of 32 KB
// (docs/design/cuda-findings.md, streams of 8 and 16 rows).
void BlockLowering::find_streamed_with_halved_staging() {
  std::vector<std::pair<bool, int32_t>> residence;
  for (const TileSchedule& t : schedule_.tiles) residence.emplace_back(t.resident, t.resident_of);
  auto choose = [&](bool halved) {  // find_streamed() marks the streamed products resident
    for (size_t id = 0; id < residence.size(); ++id)
      std::tie(schedule_.tiles[id].resident, schedule_.tiles[id].resident_of) = residence[id];
    schedule_.halved_staging = halved;
    find_streamed();
  };
  const auto& grid = g_.grid().extent;
  if (options_.clusters && options_.multiprocessors > 0 && r_ % 2 == 0 &&
      2 * grid[0] * grid[1] * grid[2] <= options_.multiprocessors) {
    choose(true);
    choose_stream_ranks();
    const bool pairs = paired();
    schedule_.stream_ranks = 1;
    if (pairs) return;
  }
  choose(false);
}

// The first iteration of A this block stages: its half's, where the pair halves the staging.
std::string BlockLowering::staged_first_iteration() const {
  if (!schedule_.halved_staging) return "0";
  return fmt::format("(int)(blockIdx.x & 1) * {}", r_ / 2);
}

// The grid index of `axis` as the block graph sees it: a pair shares one index.
std::string BlockLowering::block_index(int axis) const {
  static const char* const names[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
  if (axis == 0 && paired()) return "(int)(blockIdx.x >> 1)";
  return names[axis];
}

// Where this block's share of a stream starts, given `per_block` units or chunks a block.
std::string BlockLowering::pair_offset(int64_t per_block) const {
  if (!paired()) return "0";
  return fmt::format("(int)(blockIdx.x & 1) * {}", per_block);
}

// The first unit of matmul `id`'s register stream this block takes.
std::string BlockLowering::stream_first_unit(int32_t id) const {
  return pair_offset(stream_plan(id).units);
}

// After the streams' flush: block 0 of the pair adds block 1's partial products into its own,
// and block 1 leaves.
std::string BlockLowering::pair_sum() const {
  if (!paired()) return "";
  std::string adds;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id)
    if (schedule_.tiles[size_t(id)].streamed)
      adds += fmt::format(
          "    for (int e = threadIdx.x; e < {n}; e += {threads}) {t}[e] += yr_peer_load({t} + e, "
          "1);\n",
          fmt::arg("n", elements(schedule_.tiles[size_t(id)].reader)),
          fmt::arg("threads", kBlockThreads),
          fmt::arg("t", tile_var(schedule_.tiles[size_t(id)].reader)));
  return fmt::format(
      "  yr_cluster_sync();\n"
      "  if ((blockIdx.x & 1) == 0) {{\n{}  }}\n"
      "  yr_cluster_sync();  // block 1's shared memory stays until block 0 has read it\n"
      "  if (blockIdx.x & 1) return;\n",
      adds);
}

}  // namespace yirage::backend::cuda::detail
