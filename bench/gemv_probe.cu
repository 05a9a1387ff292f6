// A probe, not part of the engine: how fast can CUDA-core threads stream a [K x N] fp16 weight
// through registers (16-byte loads, no shared-memory staging) for a product with few rows,
// Y[M x N] = X[M x K] · W[K x N]? It answers whether the cuda backend's block lowering should
// gain such a path for skinny matmuls (bench/gpu_notes.md, version 7), before building it.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/gemv_probe bench/gemv_probe.cu && /tmp/gemv_probe
//
// Each block takes NCOL columns and a K range (K / splits rows); its threads own 8 adjacent
// columns (one 16-byte vector) of R rows per iteration, loading the next iteration's vectors
// into registers while the current ones are multiplied. Splits add into an f32 output by
// atomics (the probe measures the stream; the engine would sum the partials itself). The weight
// rotates over four copies, 200 MB, so L2 (50 MB) does not serve repeats.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "probe_util.cuh"

constexpr int kThreads = 256;

template <int M, int NCOL, int R>
__global__ void __launch_bounds__(kThreads)
    gemv(const __half* __restrict__ x, const __half* __restrict__ w, float* __restrict__ y, int K,
         int N, int splits) {
  constexpr int tpr = NCOL / 8, klanes = kThreads / tpr, kt = klanes * R;
  extern __shared__ float xs[];  // [K / splits][M] as float
  const int kslice = K / splits, k0 = blockIdx.y * kslice;
  for (int e = threadIdx.x; e < kslice * M; e += kThreads) {
    const int kk = e / M, m = e % M;
    xs[e] = __half2float(x[m * K + k0 + kk]);
  }
  __syncthreads();
  const int cv = threadIdx.x % tpr, kl = threadIdx.x / tpr;
  const int col = blockIdx.x * NCOL + cv * 8;
  const __half* wp = w + (long long)(k0 + kl) * N + col;
  float acc[M][8];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[m][c] = 0.f;
  uint4 nxt[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    nxt[r] = __ldg(reinterpret_cast<const uint4*>(wp + (long long)r * klanes * N));
  const int iters = kslice / kt;
  for (int it = 0; it < iters; ++it) {
    uint4 cur[R];
#pragma unroll
    for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    if (it + 1 < iters) {
#pragma unroll
      for (int r = 0; r < R; ++r)
        nxt[r] = __ldg(reinterpret_cast<const uint4*>(
            wp + ((long long)(it + 1) * kt + (long long)r * klanes) * N));
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int kk = it * kt + r * klanes + kl;
      float wf[8];
      widen8(cur[r], wf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float a = xs[kk * M + m];
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[m][c] = fmaf(a, wf[c], acc[m][c]);
      }
    }
  }
  // Sum over the k lanes: first inside the warp (lanes that differ in kl), then across warps.
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < 8; ++c)
      for (int off = tpr; off < 32; off *= 2)
        acc[m][c] += __shfl_xor_sync(0xffffffffu, acc[m][c], off);
  __syncthreads();
  float* red = xs;  // [warps][M][NCOL]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane < tpr)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int c = 0; c < 8; ++c) red[(warp * M + m) * NCOL + cv * 8 + c] = acc[m][c];
  __syncthreads();
  for (int e = threadIdx.x; e < M * NCOL; e += kThreads) {
    float s = 0.f;
    for (int q = 0; q < kThreads / 32; ++q) s += red[q * M * NCOL + e];
    const int m = e / NCOL, c = e % NCOL;
    float* out = y + (long long)m * N + blockIdx.x * NCOL + c;
    if (splits == 1)
      *out = s;
    else
      atomicAdd(out, s);
  }
}

__global__ void copy16(const uint4* __restrict__ a, uint4* __restrict__ b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    b[i] = a[i];
}

struct Bufs {
  int K, N, M;
  __half* x;
  __half* w[4];
  float* y;
};

template <int M, int NCOL, int R>
void run(const Bufs& b, int splits, const std::vector<float>& xh, const std::vector<__half>& wh) {
  const int kslice = b.K / splits;
  constexpr int tpr = NCOL / 8, kt = kThreads / tpr * R;
  if (kslice % kt != 0) return;
  const size_t smem =
      std::max<size_t>(size_t(kslice) * M * 4, size_t(kThreads / 32) * M * NCOL * 4);
  auto k = gemv<M, NCOL, R>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  dim3 grid(b.N / NCOL, splits);
  // Correctness on w[0]: poison, run, compare a few columns against a double reference.
  CK(cudaMemset(b.y, 0xff, size_t(M) * b.N * 4));
  if (splits > 1) CK(cudaMemset(b.y, 0, size_t(M) * b.N * 4));
  k<<<grid, kThreads, smem>>>(b.x, b.w[0], b.y, b.K, b.N, splits);
  CK(cudaGetLastError());
  std::vector<float> yh(size_t(M) * b.N);
  CK(cudaMemcpy(yh.data(), b.y, yh.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0, ref2 = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < b.N; n += 37) {
      double r = 0;
      for (int kk = 0; kk < b.K; ++kk)
        r += double(xh[size_t(m) * b.K + kk]) * double(__half2float(wh[size_t(kk) * b.N + n]));
      const double d = yh[size_t(m) * b.N + n] - r;
      err += d * d;
      ref2 += r * r;
    }
  const double rel = std::sqrt(err / ref2);
  const double us =
      median_us([&](int q) { k<<<grid, kThreads, smem>>>(b.x, b.w[q], b.y, b.K, b.N, splits); });
  const double bytes = double(b.K) * b.N * 2;
  std::printf("M=%d ncol=%3d R=%d splits=%d blocks=%5d  %7.2f us  %6.0f GB/s  relerr %.1e\n", M,
              NCOL, R, splits, grid.x * grid.y, us, bytes / us * 1e-3, rel);
}

int main() {
  const int K = 4096, N = 6144;
  Bufs b{K, N, 8, nullptr, {}, nullptr};
  std::vector<float> xh(size_t(8) * K);
  std::vector<__half> xhh, wh(size_t(K) * N);
  random_inputs(xh, xhh, wh);
  b.x = upload(xhh);
  for (auto& p : b.w) p = upload(wh);
  CK(cudaMalloc(&b.y, size_t(8) * N * 4));
  {  // device-to-device copy of 1 GB, read + write counted
    const long long n = (1ll << 30) / 16;
    uint4 *a, *c;
    CK(cudaMalloc(&a, n * 16));
    CK(cudaMalloc(&c, n * 16));
    CK(cudaMemset(a, 1, n * 16));
    const double us = median_us([&](int) { copy16<<<132 * 8, 256>>>(a, c, n); });
    std::printf("copy: %.0f GB/s (read + write)\n", 2.0 * n * 16 / us * 1e-3);
    CK(cudaFree(a));
    CK(cudaFree(c));
  }
  for (int splits : {1, 2, 4}) {
    run<1, 32, 4>(b, splits, xh, wh);
    run<1, 32, 8>(b, splits, xh, wh);
    run<1, 64, 4>(b, splits, xh, wh);
    run<1, 64, 8>(b, splits, xh, wh);
    run<1, 128, 8>(b, splits, xh, wh);
    run<8, 32, 4>(b, splits, xh, wh);
    run<8, 64, 4>(b, splits, xh, wh);
    run<8, 64, 8>(b, splits, xh, wh);
  }
  return 0;
}
