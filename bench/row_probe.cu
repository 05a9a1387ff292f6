// A probe, not part of the engine: how fast can ntrans's rows go (rms(X + a * (rms(H) + X)) over
// 8 or 64 rows of 4096 fp16), and what does the block's thread count buy? Our generated kernel
// takes one block of 256 threads a row and passes its values through shared memory
// (bench/results/h200_suite.md: 4.6 us a call at bs1). Here each thread keeps its elements in
// registers, with 256, 512 or 1024 threads a row, or a row split over a cluster of 2 or 4 blocks
// whose partial sums meet in distributed shared memory. Beside them: an empty kernel of the same
// grid, and a row copy with no reductions. Every kernel runs as a one-kernel CUDA graph replayed
// back to back (median_us() of probe_util.cuh: not the suite's harness, so compare within this
// probe). Output: bench/results/row_probe_h200.txt; bench/gpu_notes.md, version 18.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/rp bench/row_probe.cu && /tmp/rp
#include <cooperative_groups.h>

#include <cstdint>
#include <string>

#include "probe_util.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kWidth = 4096;

template <int Threads>
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w) s += red[w];
  __syncthreads();
  return s;
}

// V fp16 values (8 or 4: one 16- or 8-byte vector) at `p` as floats, and back.
template <int V>
__device__ void load_vector(const __half* p, float* f) {
  if constexpr (V == 8) {
    widen8(*reinterpret_cast<const uint4*>(p), f);
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
    f[0] = lo.x, f[1] = lo.y, f[2] = hi.x, f[3] = hi.y;
  }
}

template <int V>
__device__ void store_vector(__half* p, const float* f) {
  __align__(16) __half v[V];
#pragma unroll
  for (int q = 0; q < V; ++q) v[q] = __float2half(f[q]);
  if constexpr (V == 8)
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
  else
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(v);
}

// A row over `Parts` blocks of a cluster, each with kWidth / Parts of its elements.
template <int Threads, int Parts>
__global__ void __launch_bounds__(Threads)
    rows(const __half* h, const __half* x, const __half* a, __half* out) {
  constexpr int kPer = kWidth / Parts / Threads, V = kPer >= 8 ? 8 : 4, kVectors = kPer / V;
  static_assert(kPer % V == 0, "whole vectors a thread");
  __shared__ float red[Threads / 32];
  __shared__ float part[2];
  const int row = blockIdx.x / Parts, rank = blockIdx.x % Parts;
  const size_t base = size_t(row) * kWidth + size_t(rank) * (kWidth / Parts) + threadIdx.x * V;
  float hv[kPer], xv[kPer], av[kPer];
#pragma unroll
  for (int p = 0; p < kVectors; ++p) {
    const size_t at = base + size_t(p) * Threads * V;
    load_vector<V>(h + at, hv + V * p);
    load_vector<V>(x + at, xv + V * p);
    load_vector<V>(a + at, av + V * p);
  }
  auto row_sum = [&](float s, int which) {
    s = block_sum<Threads>(s, red);
    if constexpr (Parts == 1) {
      return s;
    } else {
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x == 0) part[which] = s;
      cluster.sync();
      float total = 0;
#pragma unroll
      for (int r = 0; r < Parts; ++r) total += *cluster.map_shared_rank(&part[which], r);
      return total;
    }
  };
  float s = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) s += hv[i] * hv[i];
  const float hs = rsqrtf(row_sum(s, 0) / kWidth + 1e-6f);
  float r[kPer];
  s = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    r[i] = xv[i] + av[i] * (hv[i] * hs + xv[i]);
    s += r[i] * r[i];
  }
  const float rs = rsqrtf(row_sum(s, 1) / kWidth + 1e-6f);
#pragma unroll
  for (int i = 0; i < kPer; ++i) r[i] *= rs;
#pragma unroll
  for (int p = 0; p < kVectors; ++p)
    store_vector<V>(out + base + size_t(p) * Threads * V, r + V * p);
  // No block of the cluster leaves while a peer may still read its partial sums.
  if constexpr (Parts > 1) cg::this_cluster().sync();
}

// The same loads and stores, no reductions.
template <int Threads>
__global__ void __launch_bounds__(Threads)
    copy_rows(const __half* h, const __half* x, const __half* a, __half* out) {
  constexpr int kPer = kWidth / Threads, V = kPer >= 8 ? 8 : 4, kVectors = kPer / V;
  const size_t base = size_t(blockIdx.x) * kWidth + threadIdx.x * V;
#pragma unroll
  for (int p = 0; p < kVectors; ++p) {
    const size_t at = base + size_t(p) * Threads * V;
    float hv[V], xv[V], av[V];
    load_vector<V>(h + at, hv);
    load_vector<V>(x + at, xv);
    load_vector<V>(a + at, av);
#pragma unroll
    for (int q = 0; q < V; ++q) hv[q] += xv[q] * av[q];
    store_vector<V>(out + at, hv);
  }
}

__global__ void empty_kernel() {}

// Microseconds a call of `enqueue` captured as a one-kernel graph and replayed back to back.
template <typename Enqueue>
double graph_us(Enqueue enqueue) {
  cudaStream_t capture;
  CK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal));
  enqueue(capture);
  CK(cudaStreamEndCapture(capture, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_us([&](int) { CK(cudaGraphLaunch(exec, 0)); });
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(capture));
  return us;
}

template <int Threads, int Parts>
void launch_rows(cudaStream_t s, int count, const __half* h, const __half* x, const __half* a,
                 __half* out) {
  if constexpr (Parts == 1) {
    rows<Threads, 1><<<count, Threads, 0, s>>>(h, x, a, out);
  } else {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(count * Parts);
    config.blockDim = dim3(Threads);
    config.stream = s;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = Parts;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    CK(cudaLaunchKernelEx(&config, rows<Threads, Parts>, h, x, a, out));
  }
}

// The largest relative difference between two fp16 outputs.
double max_rel_diff(const __half* a, const __half* b, size_t n) {
  std::vector<__half> ha(n), hb(n);
  CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double u = __half2float(ha[i]), v = __half2float(hb[i]);
    worst = std::max(worst, std::abs(u - v) / std::max(1.0, std::abs(v)));
  }
  return worst;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  const size_t elems = 64 * size_t(kWidth);
  std::vector<__half> host(elems);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : host) v = __float2half(nd(rng));
  __half *h = upload(host), *x = upload(host), *a = upload(host), *out = upload(host),
         *ref = upload(host);
  for (int count : {8, 64}) {
    const size_t n = size_t(count) * kWidth;
    rows<256, 1><<<count, 256>>>(h, x, a, ref);
    auto report = [&](const std::string& what, double us, bool check) {
      std::printf("rows=%2d  %-34s %6.2f us a call", count, what.c_str(), us);
      if (check) std::printf("   max rel diff from 256 threads %.1e", max_rel_diff(out, ref, n));
      std::printf("\n");
    };
    report("empty kernel, 256 threads a block",
           graph_us([&](cudaStream_t s) { empty_kernel<<<count, 256, 0, s>>>(); }), false);
    report("copy, 256 threads",
           graph_us([&](cudaStream_t s) { copy_rows<256><<<count, 256, 0, s>>>(h, x, a, out); }),
           false);
    report("copy, 1024 threads",
           graph_us([&](cudaStream_t s) { copy_rows<1024><<<count, 1024, 0, s>>>(h, x, a, out); }),
           false);
    report("registers, 256 threads",
           graph_us([&](cudaStream_t s) { launch_rows<256, 1>(s, count, h, x, a, out); }), true);
    report("registers, 512 threads",
           graph_us([&](cudaStream_t s) { launch_rows<512, 1>(s, count, h, x, a, out); }), true);
    report("registers, 1024 threads",
           graph_us([&](cudaStream_t s) { launch_rows<1024, 1>(s, count, h, x, a, out); }), true);
    report("cluster of 2 x 256 threads",
           graph_us([&](cudaStream_t s) { launch_rows<256, 2>(s, count, h, x, a, out); }), true);
    report("cluster of 4 x 256 threads",
           graph_us([&](cudaStream_t s) { launch_rows<256, 4>(s, count, h, x, a, out); }), true);
    report("cluster of 4 x 128 threads",
           graph_us([&](cudaStream_t s) { launch_rows<128, 4>(s, count, h, x, a, out); }), true);
  }
  CK(cudaGetLastError());
  return 0;
}
