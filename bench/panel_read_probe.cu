// A probe, not part of the engine: how fast can one kernel read gated_mlp's two weights (fp16
// W1, W2 [4096 x 4096], 64 MB together) when each block reads a column panel of both, as the
// block lowering's streams do? The lowering's winner (n64_k1024, bench/results/h200_suite.md)
// gives each of 64 blocks 64 columns (128-byte row segments) of both weights over all of K, so
// it runs on 64 of the 132 multiprocessors. This measures the read alone for panel widths, K
// splits and thread counts, against a grid-striding read of the same 64 MB and a copy, in one
// process (bench/gpu_notes.md, version 15). Output: bench/results/panel_read_probe_h200.txt.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/prp bench/panel_read_probe.cu && /tmp/prp
//
// Each measurement runs on weights rotated over four copies (256 MB, five times the L2) and on
// one copy repeated, as the suite's benchmark runs every peer and ours.
#include <cuda_fp16.h>

#include <cstdint>

#include "probe_util.cuh"

namespace {

constexpr int kK = 4096, kN = 4096, kCopies = 4;
constexpr size_t kWeightElems = size_t(kK) * kN;
constexpr double kBytes = 2.0 * kWeightElems * 2;  // both weights

// Block (bx, by) reads columns [bx * cols, +cols) of rows [by * K / gridDim.y, +K / gridDim.y)
// of both weights. A thread owns one 16-byte column vector and every `lanes`-th row of the
// slice, with U rows of each weight in flight.
template <int U>
__global__ void read_panels(const __half* __restrict__ w1, const __half* __restrict__ w2, int cols,
                            unsigned* out) {
  const int vectors = cols / 8, lanes = blockDim.x / vectors;
  const int v = threadIdx.x % vectors, lane = threadIdx.x / vectors;
  const int rows = kK / gridDim.y, row0 = blockIdx.y * rows;
  const size_t col = size_t(blockIdx.x) * cols + v * 8;
  unsigned acc = 0;
  for (int r = lane; r < rows; r += U * lanes) {
    uint4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int row = r + u * lanes;
      const size_t at = size_t(row0 + (row < rows ? row : r)) * kN + col;
      a[u] = __ldg(reinterpret_cast<const uint4*>(w1 + at));
      b[u] = __ldg(reinterpret_cast<const uint4*>(w2 + at));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= a[u].x ^ a[u].w ^ b[u].y ^ b[u].z;
  }
  if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  // Each copy holds W1 then W2, so the grid-striding read covers both in one range.
  __half* w[kCopies];
  {
    std::vector<float> unused(1);
    std::vector<__half> unused16, host(2 * kWeightElems);
    random_inputs(unused, unused16, host);
    for (auto& p : w) p = upload(host);
  }
  unsigned* sink;
  CK(cudaMalloc(&sink, 1 << 20));

  {
    const size_t bytes = size_t(1) << 30;
    const double us = copy_us(bytes);
    std::printf("copy 1 GiB: %.1f us, %.0f GB/s (read + write)\n", us, 2 * bytes / us * 1e-3);
  }

  const long long n16 = static_cast<long long>(kBytes / 16);
  for (const int per_sm : {1, 2, 4})
    for (const int threads : {512, 1024}) {
      if (per_sm * threads > 2048) continue;
      const int blocks = prop.multiProcessorCount * per_sm;
      auto launch = [&](int q) {
        read_all<4><<<blocks, threads>>>(reinterpret_cast<const uint4*>(w[q]), n16, sink);
      };
      const double rot = time_us(launch, kCopies), rep = time_us(launch, 1);
      std::printf(
          "strided read   blocks=%4d threads=%4d           rotated %6.2f us (%4.0f GB/s)  "
          "repeated %6.2f us (%4.0f GB/s)\n",
          blocks, threads, rot, kBytes / rot * 1e-3, rep, kBytes / rep * 1e-3);
    }

  struct Shape {
    int cols, ksplit, threads;
  };
  const Shape shapes[] = {
      {64, 1, 256},  {64, 1, 512},   {64, 1, 1024}, {32, 1, 256},  {32, 1, 512},  {32, 1, 1024},
      {64, 2, 256},  {64, 2, 512},   {64, 2, 1024}, {128, 1, 256}, {128, 1, 512}, {128, 2, 512},
      {128, 4, 512}, {128, 4, 1024}, {256, 4, 512}, {256, 8, 512}, {64, 4, 256},  {64, 4, 512},
  };
  for (const Shape& s : shapes) {
    const dim3 grid(kN / s.cols, s.ksplit);
    auto launch = [&](int q) {
      read_panels<4><<<grid, s.threads>>>(w[q], w[q] + kWeightElems, s.cols, sink);
    };
    const double rot = time_us(launch, kCopies), rep = time_us(launch, 1);
    std::printf(
        "panels cols=%3d (%3d B rows) ksplit=%d blocks=%4d threads=%4d in flight=%3d KB  "
        "rotated %6.2f us (%4.0f GB/s)  repeated %6.2f us (%4.0f GB/s)\n",
        s.cols, s.cols * 2, s.ksplit, grid.x * grid.y, s.threads, s.threads * 2 * 4 * 16 / 1024,
        rot, kBytes / rot * 1e-3, rep, kBytes / rep * 1e-3);
  }
  CK(cudaGetLastError());
  return 0;
}
