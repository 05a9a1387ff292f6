// A probe, not part of the engine: how fast can one kernel stream rmsnorm_linear's weight
// (fp16 [4096 x 6144], 50 MB) once, and what would a fused stream need to reach 80% of the copy
// bandwidth, against the block lowering's 64-column tiles (17.2 us in
// bench/results/h200_suite.md, 69%)? It answers what the lowering should build next
// (bench/gpu_notes.md, version 10). Output: bench/results/cluster_gemv_probe_h200.txt.
//
//   nvcc -O3 -arch=sm_90a -o /tmp/cgp bench/cluster_gemv_probe.cu && /tmp/cgp
//
// Three measurements, each on weights rotated over four copies (200 MB, four times the L2) and
// on one copy repeated (as the suite's benchmark runs every peer and ours):
//   - copy: cudaMemcpy device to device, 1 GiB and 25 MB (bytes read + written);
//   - read: the ceiling for reading 50 MB once, 16-byte loads over the whole grid;
//   - gemv: Y[M x 6144] = X[M x 4096] · W. A block owns NT columns and K / C rows; its threads
//     load 16-byte vectors of W into registers, U per thread in flight, and multiply on CUDA
//     cores. The C blocks of a cluster split K and sum their partials through distributed
//     shared memory, each rank writing 1/C of the columns. C = 1 with NT = 64 is the lowering's
//     present access pattern. (An earlier version fed the blocks by one cp.async.bulk copy per
//     row, NT * 2 bytes: TMA-issue bound at 27-137 us,
//     bench/results/cluster_gemv_probe_bulk_h200.txt.)
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "probe_util.cuh"

namespace cg = cooperative_groups;

constexpr int kK = 4096, kN = 6144, kCopies = 4;

// Threads: NT / 8 column vectors x RL row lanes. Each thread owns one 16-byte vector of the
// rows rl, rl + RL, ... of its block's K slice and keeps U of them in flight in registers.
template <int M, int NT, int RL, int U>
__global__ void __launch_bounds__(NT / 8 * RL)
    cluster_gemv(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                 int C) {
  constexpr int V = NT / 8, kThreads = V * RL;
  extern __shared__ float smem[];
  float* lanes = smem;                     // [RL][M][NT]
  float* block_sum = lanes + RL * M * NT;  // [M][NT]
  float* xs = block_sum + M * NT;          // [K / C][M]
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int kslice = kK / C, k0 = rank * kslice, n0 = blockIdx.x * NT;
  const int t = threadIdx.x, cv = t % V, rl = t / V, iters = kslice / (RL * U);
  const __half* wp = w + static_cast<long long>(k0 + rl) * kN + n0 + cv * 8;
  auto load = [&](int it, uint4* v) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      v[u] = __ldg(
          reinterpret_cast<const uint4*>(wp + static_cast<long long>((it * U + u) * RL) * kN));
  };
  uint4 next[U];
  load(0, next);
  for (int e = t; e < kslice * M; e += kThreads) xs[e] = __half2float(x[(e % M) * kK + k0 + e / M]);
  __syncthreads();

  float acc[M][8] = {};
  for (int it = 0; it < iters; ++it) {
    uint4 cur[U];
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = next[u];
    if (it + 1 < iters) load(it + 1, next);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float wf[8];
      widen8(cur[u], wf);
      const float* xr = xs + ((it * U + u) * RL + rl) * M;
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m][j] = fmaf(xr[m], wf[j], acc[m][j]);
    }
  }

#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) lanes[(rl * M + m) * NT + cv * 8 + j] = acc[m][j];
  __syncthreads();
  for (int e = t; e < M * NT; e += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int q = 0; q < RL; ++q) s += lanes[q * M * NT + e];
    block_sum[e] = s;
  }
  cluster.sync();
  const int per_rank = (M * NT + C - 1) / C;
  for (int e = rank * per_rank + t; e < min(M * NT, (rank + 1) * per_rank); e += kThreads) {
    float s = 0.f;
    for (int q = 0; q < C; ++q) s += cluster.map_shared_rank(block_sum, q)[e];
    y[(e / NT) * kN + n0 + e % NT] = __float2half(s);
  }
  cluster.sync();  // the other ranks' block_sum stays alive until read
}

struct Buffers {
  __half* x;
  __half* w[kCopies];
  __half* y;
};

constexpr double kWeightBytes = double(kK) * kN * 2;

template <int M, int NT, int RL, int U>
void gemv(const Buffers& b, int C, const std::vector<float>& xh, const std::vector<__half>& wh) {
  const int kslice = kK / C;
  if (kslice % (RL * U) != 0 || kN % NT != 0) return;
  constexpr int kThreads = NT / 8 * RL;
  const size_t smem = (size_t(RL) * M * NT + size_t(M) * NT + size_t(kslice) * M) * 4;
  if (smem > 227 * 1024) return;
  auto kernel = cluster_gemv<M, NT, RL, U>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(kN / NT, C);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = C;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto launch = [&](int q) { CK(cudaLaunchKernelEx(&cfg, kernel, b.x, b.w[q], b.y, C)); };

  CK(cudaMemset(b.y, 0xff, size_t(M) * kN * 2));  // poison: NaN where nothing is written
  launch(0);
  CK(cudaDeviceSynchronize());
  std::vector<__half> yh(size_t(M) * kN);
  CK(cudaMemcpy(yh.data(), b.y, yh.size() * 2, cudaMemcpyDeviceToHost));
  double err = 0, ref2 = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < kN; n += 7) {
      double r = 0;
      for (int k = 0; k < kK; ++k)
        r += double(xh[size_t(m) * kK + k]) * double(__half2float(wh[size_t(k) * kN + n]));
      const double d = double(__half2float(yh[size_t(m) * kN + n])) - r;
      err += d * d;
      ref2 += r * r;
    }
  const double rel = std::sqrt(err / ref2);
  const double rotated = time_us(launch, kCopies), repeated = time_us(launch, 1);
  std::printf(
      "gemv M=%-2d NT=%3d C=%d blocks=%3d threads=%3d in flight=%3d KB/SM  rotated %6.2f us "
      "(%4.0f GB/s)  repeated %6.2f us  relerr %.1e%s\n",
      M, NT, C, kN / NT * C, kThreads, kThreads * U * 16 / 1024, rotated,
      kWeightBytes / rotated * 1e-3, repeated, rel, rel < 1e-2 ? "" : "  WRONG");
}

int main() {
  constexpr int kMaxM = 2;
  std::vector<float> xh(size_t(kMaxM) * kK);
  std::vector<__half> xhh, wh(size_t(kK) * kN);
  random_inputs(xh, xhh, wh);
  Buffers b{};
  b.x = upload(xhh);
  for (auto& p : b.w) p = upload(wh);
  CK(cudaMalloc(&b.y, size_t(kMaxM) * kN * 2));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  for (const size_t bytes : {size_t(1) << 30, size_t(kWeightBytes / 2)}) {
    const double us = copy_us(bytes);
    std::printf("copy %5.0f MB: %7.2f us  %4.0f GB/s (read + write)\n", bytes / 1e6, us,
                2 * bytes / us * 1e-3);
  }
  unsigned* sink;
  CK(cudaMalloc(&sink, 1 << 20));
  const long long n16 = static_cast<long long>(kWeightBytes / 16);
  for (const int per_sm : {1, 2, 4, 8})
    for (const int threads : {256, 512, 1024}) {
      if (per_sm * threads > 2048) continue;
      const int blocks = sms * per_sm;
      auto launch = [&](int q) {
        read_all<4><<<blocks, threads>>>(reinterpret_cast<const uint4*>(b.w[q]), n16, sink);
      };
      const double rot = time_us(launch, kCopies), rep = time_us(launch, 1);
      std::printf(
          "read 50 MB blocks=%4d threads=%4d  rotated %6.2f us (%4.0f GB/s)  repeated %6.2f us\n",
          blocks, threads, rot, kWeightBytes / rot * 1e-3, rep);
    }

  gemv<2, 64, 16, 8>(b, 1, xh, wh);  // the lowering's n64 tiles: 128 B of each row, 96 blocks
  gemv<2, 64, 32, 8>(b, 1, xh, wh);
  gemv<2, 64, 16, 8>(b, 2, xh, wh);
  gemv<2, 128, 16, 8>(b, 2, xh, wh);
  gemv<2, 128, 8, 8>(b, 2, xh, wh);
  gemv<2, 96, 32, 4>(b, 2, xh, wh);
  gemv<2, 192, 16, 4>(b, 4, xh, wh);
  gemv<2, 192, 16, 8>(b, 4, xh, wh);
  gemv<2, 256, 16, 4>(b, 4, xh, wh);
  gemv<2, 256, 8, 8>(b, 4, xh, wh);
  gemv<2, 384, 8, 4>(b, 8, xh, wh);
  gemv<2, 384, 8, 8>(b, 8, xh, wh);
  gemv<2, 384, 16, 4>(b, 8, xh, wh);
  gemv<2, 512, 8, 4>(b, 8, xh, wh);
  gemv<2, 128, 32, 4>(b, 2, xh, wh);
  gemv<2, 128, 64, 4>(b, 2, xh, wh);
  gemv<2, 192, 32, 4>(b, 4, xh, wh);
  gemv<2, 256, 32, 4>(b, 4, xh, wh);
  gemv<2, 256, 32, 2>(b, 4, xh, wh);
  gemv<2, 384, 16, 2>(b, 8, xh, wh);
  gemv<2, 512, 16, 4>(b, 8, xh, wh);
  gemv<2, 512, 16, 2>(b, 8, xh, wh);
  gemv<2, 64, 128, 4>(b, 1, xh, wh);
  gemv<2, 64, 64, 8>(b, 1, xh, wh);
  gemv<2, 64, 128, 2>(b, 1, xh, wh);
  gemv<2, 128, 64, 2>(b, 2, xh, wh);
  gemv<2, 128, 32, 8>(b, 2, xh, wh);
  gemv<2, 128, 64, 4>(b, 1, xh, wh);
  // 256 threads with 64 KB in flight: the register stream's warp count at the probe's depth.
  gemv<2, 64, 32, 16>(b, 1, xh, wh);
  gemv<2, 128, 16, 16>(b, 2, xh, wh);
  return 0;
}
