// What the CUDA probes in bench/ share: an error check, fp16 weight vectors widened to floats,
// random inputs, a median timing by CUDA events, and the grid-striding read that bounds them.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Eight fp16 weights of one 16-byte vector as floats.
__device__ inline void widen8(const uint4& v, float* w) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __half22float2(h[q]);
    w[2 * q] = f.x;
    w[2 * q + 1] = f.y;
  }
}

// X's values as fp16 (`x16`) and as the floats they round to (`x`), normally distributed; W's
// scaled by 0.02.
inline void random_inputs(std::vector<float>& x, std::vector<__half>& x16, std::vector<__half>& w) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  x16.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x16[i] = __float2half(nd(rng));
    x[i] = __half2float(x16[i]);
  }
  for (auto& v : w) v = __float2half(nd(rng) * 0.02f);
}

template <typename T>
T* upload(const std::vector<T>& host) {
  T* p;
  CK(cudaMalloc(&p, host.size() * sizeof(T)));
  CK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Microseconds a call, the median of 50 timed repetitions (after 10 warm-up ones) of four calls
// launch(0) .. launch(3).
template <typename Launch>
double median_us(Launch launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 60; ++rep) {
    CK(cudaEventRecord(e0));
    for (int q = 0; q < 4; ++q) launch(q);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep >= 10) ts.push_back(ms * 1000.f / 4);
  }
  std::sort(ts.begin(), ts.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ts[ts.size() / 2];
}

// Microseconds a call, rotating over `copies` weight copies (launch(q) takes copy q).
template <typename Launch>
double time_us(Launch launch, int copies) {
  return median_us([&](int q) { launch(q % copies); });
}

// The ceiling for reading `n` 16-byte vectors once: loads striding the whole grid, U in flight a
// thread.
template <int U>
__global__ void read_all(const uint4* __restrict__ p, long long n, unsigned* out) {
  unsigned acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldg(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= __ldg(p + i).x;
  if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;  // keeps the loads live
}

// Microseconds for a device-to-device copy of `bytes` (it moves twice that: read + write).
inline double copy_us(size_t bytes) {
  void *from, *to;
  CK(cudaMalloc(&from, bytes));
  CK(cudaMalloc(&to, bytes));
  CK(cudaMemset(from, 1, bytes));
  const double us =
      time_us([&](int) { CK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice)); }, 1);
  CK(cudaFree(from));
  CK(cudaFree(to));
  return us;
}
