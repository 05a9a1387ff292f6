// A kernel and its finish as one kernel of clusters (sm_90). A split kernel (attention over key
// ranges, a product over K ranges) saves one partial tile per block of its split grid axis, and
// a second kernel reads each row's partials back to add them up. When the split axis is short
// enough to be one cluster, both run in one kernel instead: every block computes its partials
// into shared memory as before, the cluster meets at a barrier, and then its blocks share the
// second kernel's blocks for that cluster, reading the partials from their peers' shared memory
// (distributed shared memory) rather than from global memory.
//
// Why: the partials then never cross global memory, and the second kernel's launch, with the
// wait for the first to drain, goes. For gqa bs1 the second kernel and the partials' stores cost
// about a third of the call (bench/results/attention_probe_h200.txt).
//
// The fusion is only made where it is provably the same computation: the first kernel's outputs
// are read by the second alone, each saved from an f32 tile it stores, and every element each
// of the second kernel's blocks reads was written by a block of one cluster, the one that runs
// it (reads_stay_in_clusters(), checked element by element).
#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

namespace {

using ir::BlockGraph;
using ir::Dims;

// The most blocks a cluster may have without the non-portable opt-in.
constexpr int64_t kMaxClusterBlocks = 8;
// The most tile elements reads_stay_in_clusters() walks; beyond it the kernels stay apart.
constexpr int64_t kMaxCheckedElements = int64_t(1) << 24;

struct Saver {
  ir::AxisMap omap{};
  Dims tile;
};

std::vector<Saver> savers(const BlockGraph& g) {
  std::vector<Saver> out;
  for (const ir::BlockNode& n : g.nodes())
    if (const auto* s = std::get_if<ir::OutputSaverOp>(&n.op))
      out.push_back({s->omap, n.tile.dims});
  return out;
}

// How the second kernel's grid sits on the first's clusters: cluster k along axis a (k = 0 on
// the cluster axis) runs the second kernel's blocks k * factor[a] .. (k + 1) * factor[a] - 1.
struct Clusters {
  int axis = 0;
  int64_t size = 0;
  std::array<int64_t, ir::kGridAxes> factor{};
  int64_t per_cluster() const { return factor[0] * factor[1] * factor[2]; }
};

std::optional<Clusters> clusters_along(const BlockGraph& first, const BlockGraph& second,
                                       int axis) {
  Clusters c;
  c.axis = axis;
  c.size = first.grid().extent[size_t(axis)];
  if (c.size < 2 || c.size > kMaxClusterBlocks) return std::nullopt;
  for (int a = 0; a < ir::kGridAxes; ++a) {
    const int64_t count = a == axis ? 1 : first.grid().extent[size_t(a)];
    if (second.grid().extent[size_t(a)] % count != 0) return std::nullopt;
    c.factor[size_t(a)] = second.grid().extent[size_t(a)] / count;
  }
  return c;
}

// Whether every element that each block of `second` reads from an operand in `from` (operand ->
// output of `first`, or -1) was saved by a block of the cluster that runs it.
bool reads_stay_in_clusters(const BlockGraph& first, const BlockGraph& second,
                            const std::vector<int>& from, const Clusters& c) {
  const std::vector<Saver> saved = savers(first);
  const std::vector<ir::TensorType> outputs = first.output_types();
  const auto& extent = second.grid().extent;
  int64_t walked = 0;
  for (const ir::BlockNode& n : second.nodes()) {
    const auto* it = std::get_if<ir::InputIteratorOp>(&n.op);
    if (!it || from[size_t(it->operand)] < 0) continue;
    const int p = from[size_t(it->operand)];
    const Saver& s = saved[size_t(p)];
    if (s.omap[size_t(c.axis)] == ir::kReplicate) return false;
    const Dims& dims = second.operands()[size_t(it->operand)].dims;
    const Dims strides = ir::row_major_strides(dims);
    const Dims& tile = n.tile.dims;
    const Dims tile_strides = ir::row_major_strides(tile);
    const Dims out_strides = ir::row_major_strides(outputs[size_t(p)].dims);
    const int64_t iterations = it->fmap == ir::kReplicate ? 1 : second.forloop_range();
    const int64_t elements = ir::num_elements(tile);
    walked += extent[0] * extent[1] * extent[2] * iterations * elements;
    if (walked > kMaxCheckedElements) return false;
    for (int64_t b0 = 0; b0 < extent[0]; ++b0)
      for (int64_t b1 = 0; b1 < extent[1]; ++b1)
        for (int64_t b2 = 0; b2 < extent[2]; ++b2) {
          const std::array<int64_t, 3> block{b0, b1, b2};
          int64_t base = 0;
          for (int a = 0; a < ir::kGridAxes; ++a)
            if (it->imap[size_t(a)] != ir::kReplicate) {
              const size_t j = size_t(it->imap[size_t(a)]);
              base += block[size_t(a)] * (dims[j] / extent[size_t(a)]) * strides[j];
            }
          for (int64_t i = 0; i < iterations; ++i)
            for (int64_t e = 0; e < elements; ++e) {
              int64_t g = base;
              if (it->fmap != ir::kReplicate)
                g += i * tile[size_t(it->fmap)] * strides[size_t(it->fmap)];
              for (size_t j = 0; j < tile.size(); ++j)
                g += (e / tile_strides[j]) % tile[j] * strides[j];
              for (int a = 0; a < ir::kGridAxes; ++a) {
                if (a == c.axis || s.omap[size_t(a)] == ir::kReplicate) continue;
                const size_t j = size_t(s.omap[size_t(a)]);
                const int64_t owner = (g / out_strides[j]) % outputs[size_t(p)].dims[j] / s.tile[j];
                if (owner != block[size_t(a)] / c.factor[size_t(a)]) return false;
              }
            }
        }
  }
  return true;
}

}  // namespace

std::optional<KernelLaunch> lower_cluster_finish(const FusedStep& first, const FusedStep& second,
                                                 const CodegenOptions& options) {
  if (!options.clusters) return std::nullopt;
  const BlockGraph& a = first.body;
  const BlockGraph& b = second.body;
  std::vector<int> from(b.operands().size(), -1);
  for (size_t k = 0; k < second.in.size(); ++k)
    for (size_t p = 0; p < first.out.size(); ++p)
      if (second.in[k] == first.out[p]) from[k] = int(p);
  std::optional<Clusters> clusters;
  for (int axis = 0; axis < ir::kGridAxes && !clusters; ++axis) {
    clusters = clusters_along(a, b, axis);
    if (clusters && !reads_stay_in_clusters(a, b, from, *clusters)) clusters.reset();
  }
  if (!clusters) return std::nullopt;
  const Clusters& c = *clusters;

  // The finish through shared memory and cp.async alone: it is small, and its peer tiles take
  // the plain load path (BlockLowering::peer_load()).
  const std::vector<Saver> saved = savers(a);
  const std::vector<ir::TensorType> outputs = a.output_types();
  CodegenOptions second_options = options;
  second_options.clusters = false;
  second_options.tensor_maps = false;
  second_options.register_rows = false;
  second_options.register_weights = false;
  BlockLowering finish(b, second.name, second_options);
  for (size_t k = 0; k < from.size(); ++k) {
    if (from[k] < 0) continue;
    const size_t p = size_t(from[k]);
    finish.peer_operand(int(k), PeerOperand{fmt::format("yr_peer{}", p), outputs[p].dims,
                                            saved[p].tile, saved[p].omap, a.grid().extent, c.axis});
  }
  finish.name_blocks({"yr_b0", "yr_b1", "yr_b2"});
  finish.prepare();
  if (finish.paired_or_tma()) return std::nullopt;

  // The first kernel as it is, but for pairs and register rows (its saved tiles must be f32
  // tiles in shared memory), and two blocks a multiprocessor at least: a cluster's blocks must
  // all find room in one GPC at once, and clusters of blocks that each fill a multiprocessor
  // did not (gqa bs8 split4: 47 us a call, against 25 as two kernels, a second wave).
  // The finish's tiles go where the first's loop tiles were, below its kept ones, if they fit.
  CodegenOptions first_options = options;
  first_options.clusters = false;
  first_options.register_rows = false;
  std::optional<BlockLowering> producer;
  std::vector<std::string> tiles;
  int64_t finish_at = 0, shared = 0;
  for (int64_t reserved : {int64_t(0), finish.shared_bytes() + 128}) {
    producer.emplace(a, first.name, first_options);
    producer->share_multiprocessor(2, reserved);
    producer->prepare();
    tiles.clear();
    int64_t kept_from = producer->shared_bytes();
    for (size_t p = 0; p < first.out.size(); ++p) {
      const auto tile = producer->saved_tile(int(p));
      if (!tile) return std::nullopt;
      tiles.push_back(tile->first);
      kept_from = std::min(kept_from, tile->second);
    }
    finish_at =
        finish.shared_bytes() <= kept_from ? 0 : (producer->shared_bytes() + 127) / 128 * 128;
    shared = std::max(producer->shared_bytes(), finish_at + finish.shared_bytes());
    if (finish_at == 0) break;
  }
  if (shared > options.max_shared_bytes) return std::nullopt;

  const KernelText ta = producer->text(), tb = finish.text();
  KernelLaunch k;
  k.name = fmt::format("yr_fused_{}_{}", identifier(first.name), identifier(second.name));
  k.what = fmt::format("fused nodes '{}' and '{}' (one kernel, clusters of {})", first.name,
                       second.name, c.size);
  k.args = first.in;
  k.args.insert(k.args.end(), first.out.begin(), first.out.end());
  std::string params = ta.params, aliases;
  for (size_t i = 0; i < b.operands().size(); ++i) {
    if (from[i] >= 0) continue;
    k.args.push_back(second.in[i]);
    const std::string t = ctype(b.operands()[i].dtype);
    params += fmt::format(", const {}* __restrict__ yr_b_in{}", t, i);
    aliases += fmt::format("      const {0}* const in{1} = yr_b_in{1};\n", t, i);
  }
  const std::vector<ir::TensorType> finish_outputs = b.output_types();
  for (size_t i = 0; i < finish_outputs.size(); ++i) {
    k.args.push_back(second.out[i]);
    const std::string t = ctype(finish_outputs[i].dtype);
    params += fmt::format(", {}* __restrict__ yr_b_out{}", t, i);
    aliases += fmt::format("      {0}* const out{1} = yr_b_out{1};\n", t, i);
  }
  std::string peers;
  for (size_t p = 0; p < tiles.size(); ++p)
    peers += fmt::format("  const float* const yr_peer{} = {};\n", p, tiles[p]);
  // Cluster k of the grid (blockIdx, 0 on the cluster axis) runs the finish's blocks
  // k * factor + j, j < factor, for j = rank, rank + size, ...
  std::string blocks;
  int64_t inner = c.per_cluster();
  for (int axis = 0; axis < ir::kGridAxes; ++axis) {
    inner /= c.factor[size_t(axis)];
    const std::string cluster = axis == c.axis ? "0" : fmt::format("(int)blockIdx.{}", "xyz"[axis]);
    blocks += fmt::format("      const int yr_b{} = {} * {} + yr_j / {} % {};\n", axis, cluster,
                          c.factor[size_t(axis)], inner, c.factor[size_t(axis)]);
  }
  std::array<int64_t, 3> dims{1, 1, 1};
  dims[size_t(c.axis)] = c.size;
  k.grid = {unsigned(a.grid().extent[0]), unsigned(a.grid().extent[1]),
            unsigned(a.grid().extent[2])};
  k.threads = kBlockThreads;
  k.shared_bytes = size_t(shared);
  k.source =
      prelude() + cluster_prelude() +
      fmt::format(
          R"(
extern "C" __global__ void __cluster_dims__({cx}, {cy}, {cz}) __launch_bounds__({threads}) {name}({params}) {{
  extern __shared__ __align__({align}) unsigned char smem[];
{first}{peers}  yr_cluster_sync();  // every block's partials are in its shared memory
  {{
    unsigned char* const yr_finish_smem = smem + {finish_at};
    for (int yr_j = (int)blockIdx.{rank}; yr_j < {per_cluster}; yr_j += {size}) {{
{blocks}      unsigned char* const smem = yr_finish_smem;
{aliases}{finish}{saves}      __syncthreads();
    }}
  }}
  yr_cluster_sync();  // no block leaves while a peer may still read its partials
}}
)",
          fmt::arg("cx", dims[0]), fmt::arg("cy", dims[1]), fmt::arg("cz", dims[2]),
          fmt::arg("threads", kBlockThreads), fmt::arg("name", k.name),
          fmt::arg("params", params + ta.map_params), fmt::arg("align", ta.align),
          fmt::arg("first", ta.body), fmt::arg("peers", peers), fmt::arg("finish_at", finish_at),
          fmt::arg("rank", "xyz"[c.axis]), fmt::arg("per_cluster", c.per_cluster()),
          fmt::arg("size", c.size), fmt::arg("blocks", blocks), fmt::arg("aliases", aliases),
          fmt::arg("finish", tb.body), fmt::arg("saves", tb.saves));
  k.tensor_maps = producer->maps();
  return k;
}

}  // namespace yirage::backend::cuda::detail
