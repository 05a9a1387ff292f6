// Collectives by the α-β model, and one tensor-parallel matmul (cost_model.h).
#include <algorithm>
#include <cmath>

#include "cost/cost_model.h"
#include "support/error.h"

namespace yirage::cost {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

std::string_view algorithm_name(Algorithm a) {
  return a == Algorithm::ring ? "ring" : "tree";
}

double collective_seconds(Collective c, Algorithm a, double bytes, int ranks, const Link& link) {
  if (ranks < 1 || !(link.bytes_per_second > 0) || link.latency_seconds < 0 || bytes < 0)
    fail("collective {}: {} ranks, {} B/s, {} s latency: ranks and bandwidth must be positive",
         collective_name(c), ranks, link.bytes_per_second, link.latency_seconds);
  if (ranks == 1) return 0;
  const double p = ranks, alpha = link.latency_seconds, beta = link.bytes_per_second;
  const double steps = std::ceil(std::log2(p));
  // Ring: p-1 steps of one n/p chunk each per phase. Tree: ⌈log2 p⌉ steps, whole messages for
  // reduce and broadcast, doubling messages (n/p, 2n/p, ...) for all-gather and reduce-scatter.
  switch (c) {
    case Collective::all_reduce:  // reduce-scatter then all-gather; tree: reduce then broadcast
      return a == Algorithm::ring ? 2 * (p - 1) * (alpha + bytes / p / beta)
                                  : 2 * steps * (alpha + bytes / beta);
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return a == Algorithm::ring ? (p - 1) * (alpha + bytes / p / beta)
                                  : steps * alpha + (p - 1) / p * bytes / beta;
    case Collective::broadcast:  // ring: scatter then all-gather; tree: binomial
      return a == Algorithm::ring ? 2 * (p - 1) * (alpha + bytes / p / beta)
                                  : steps * (alpha + bytes / beta);
  }
  return 0;
}

CollectiveCost best_collective(Collective c, double bytes, int ranks, const Link& link) {
  const double ring = collective_seconds(c, Algorithm::ring, bytes, ranks, link);
  const double tree = collective_seconds(c, Algorithm::tree, bytes, ranks, link);
  return tree < ring ? CollectiveCost{Algorithm::tree, tree}
                     : CollectiveCost{Algorithm::ring, ring};
}

Phases tensor_parallel_matmul(int64_t m, int64_t n, int64_t k, ir::DType dtype, int ranks,
                              SplitDim split, const Device& device, const Link& link) {
  if (ranks < 1 || (split == SplitDim::n ? n : k) % ranks != 0)
    fail("tensor-parallel matmul: {} ranks do not divide the split dim ({})", ranks,
         split == SplitDim::n ? n : k);
  const int64_t local_n = split == SplitDim::n ? n / ranks : n;
  const int64_t local_k = split == SplitDim::k ? k / ranks : k;
  ir::KernelGraph g;
  const ir::TensorRef a = g.input("a", {m, local_k}, dtype);
  const ir::TensorRef b = g.input("b", {local_k, local_n}, dtype);
  const ir::TensorRef c = g.matmul(a, b);
  g.mark_output(c);
  Phases p = mugraph_phases(g, device);
  const double out_bytes = double(m) * double(n) * double(ir::dtype_size(dtype));
  p.collective =
      best_collective(split == SplitDim::n ? Collective::all_gather : Collective::all_reduce,
                      out_bytes, ranks, link)
          .seconds;
  return p;
}

}  // namespace yirage::cost
