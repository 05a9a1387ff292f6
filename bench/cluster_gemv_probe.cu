// A probe, not part of the engine: how fast can one kernel stream rmsnorm_linear's weight
// (fp16 [4096 x 6144], 50 MB) once, and does a K split over a thread-block cluster, reduced in
// distributed shared memory, stream it faster than the block lowering's 64-column tiles
// (17.2 us in bench/results/h200_suite.md, 69% of the copy bandwidth)? It answers whether the
// lowering should gain cluster reductions (bench/gpu_notes.md, version 9) before building them.
//
//   nvcc -O3 -arch=sm_90a -o /tmp/cluster_gemv_probe bench/cluster_gemv_probe.cu \
//     && /tmp/cluster_gemv_probe
//
// Three measurements, each on weights rotated over four copies (200 MB, four times the L2) and
// on one copy repeated (as the suite's benchmark runs it):
//   - copy: cudaMemcpy device to device, 1 GiB and 25 MB (bytes read + written);
//   - read: the ceiling for reading 50 MB once, 16-byte loads over the whole grid;
//   - gemv: Y[M x 6144] = X[M x 4096] · W. A block owns NT columns and K / C rows; its warp 0
//     copies ROWS x NT tiles by cp.async.bulk (one copy per row, NT * 2 bytes) into STAGES
//     shared-memory stages on mbarriers; every thread multiplies on CUDA cores. The C blocks of a
//     cluster split K and sum their partials through distributed shared memory, each rank
//     writing 1/C of the columns. C = 1 with NT = 64 is the lowering's present access pattern.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kK = 4096, kN = 6144, kCopies = 4;

__device__ inline unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ inline void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)));
}

__device__ inline void barrier_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}

__device__ inline void barrier_wait(uint64_t* bar, unsigned phase) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(phase)
        : "memory");
}

__device__ inline void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}

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

// Threads: NT / 8 column vectors x RL row lanes.
template <int M, int NT, int RL, int ROWS, int STAGES>
__global__ void __launch_bounds__(NT / 8 * RL)
    cluster_gemv(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ y,
                 int C) {
  constexpr int V = NT / 8, kThreads = V * RL, kStageElems = ROWS * NT;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* stages = reinterpret_cast<__half*>(smem);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + STAGES * kStageElems * 2);
  float* block_sum = reinterpret_cast<float*>(bars + STAGES);  // [M][NT]
  float* xs = block_sum + M * NT;                              // [K / C][M]
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int kslice = kK / C, k0 = rank * kslice, n0 = blockIdx.x * NT, chunks = kslice / ROWS;
  const int t = threadIdx.x, cv = t % V, rl = t / V, warp = t / 32, lane = t % 32;

  auto issue = [&](int c) {
    const int s = c % STAGES;
    if (lane == 0) barrier_expect(&bars[s], kStageElems * 2);
    __syncwarp();
    for (int r = lane; r < ROWS; r += 32)
      bulk_copy(stages + s * kStageElems + r * NT,
                w + static_cast<long long>(k0 + c * ROWS + r) * kN + n0, NT * 2, &bars[s]);
  };
  if (t == 0) {
    for (int s = 0; s < STAGES; ++s) barrier_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0)
    for (int c = 0; c < STAGES && c < chunks; ++c) issue(c);
  for (int e = t; e < kslice * M; e += kThreads) xs[e] = __half2float(x[(e % M) * kK + k0 + e / M]);
  __syncthreads();

  float acc[M][8] = {};
  for (int c = 0; c < chunks; ++c) {
    const int s = c % STAGES;
    barrier_wait(&bars[s], (c / STAGES) & 1);
    const __half* stage = stages + s * kStageElems;
#pragma unroll 4
    for (int r = rl; r < ROWS; r += RL) {
      const uint4 v = *reinterpret_cast<const uint4*>(stage + r * NT + cv * 8);
      const __half2* h = reinterpret_cast<const __half2*>(&v);
      float wf[8];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __half22float2(h[q]);
        wf[2 * q] = f.x;
        wf[2 * q + 1] = f.y;
      }
      const float* xr = xs + (c * ROWS + r) * M;
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m][j] = fmaf(xr[m], wf[j], acc[m][j]);
    }
    __syncthreads();
    if (warp == 0 && c + STAGES < chunks) issue(c + STAGES);
  }

  // The row lanes' sums meet in the (now idle) stages, then in block_sum.
  float* lanes = reinterpret_cast<float*>(smem);  // [RL][M][NT]
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

template <typename Launch>
double time_us(Launch launch, int copies) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 60; ++rep) {
    CK(cudaEventRecord(e0));
    for (int q = 0; q < 4; ++q) launch(q % copies);
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

constexpr double kWeightBytes = double(kK) * kN * 2;

template <int M, int NT, int RL, int ROWS, int STAGES>
void gemv(const Buffers& b, int C, const std::vector<float>& xh, const std::vector<__half>& wh) {
  const int kslice = kK / C;
  if (kslice % ROWS != 0 || kN % NT != 0) return;
  constexpr int kThreads = NT / 8 * RL;
  const size_t smem =
      size_t(STAGES) * ROWS * NT * 2 + STAGES * 8 + size_t(M) * NT * 4 + size_t(kslice) * M * 4;
  if (size_t(RL) * M * NT * 4 > size_t(STAGES) * ROWS * NT * 2 || smem > 227 * 1024) return;
  auto kernel = cluster_gemv<M, NT, RL, ROWS, STAGES>;
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
      "gemv M=%-2d NT=%3d C=%d blocks=%3d threads=%3d stage=%2d KB x %d  rotated %6.2f us "
      "(%4.0f GB/s)  repeated %6.2f us  relerr %.1e%s\n",
      M, NT, C, kN / NT * C, kThreads, ROWS * NT * 2 / 1024, STAGES, rotated,
      kWeightBytes / rotated * 1e-3, repeated, rel, rel < 1e-2 ? "" : "  WRONG");
}

int main() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  constexpr int kMaxM = 2;
  std::vector<float> xh(size_t(kMaxM) * kK);
  std::vector<__half> xhh(xh.size()), wh(size_t(kK) * kN);
  for (size_t i = 0; i < xh.size(); ++i) {
    xhh[i] = __float2half(nd(rng));
    xh[i] = __half2float(xhh[i]);
  }
  for (auto& v : wh) v = __float2half(nd(rng) * 0.02f);
  Buffers b{};
  CK(cudaMalloc(&b.x, xhh.size() * 2));
  CK(cudaMemcpy(b.x, xhh.data(), xhh.size() * 2, cudaMemcpyHostToDevice));
  for (auto& p : b.w) {
    CK(cudaMalloc(&p, wh.size() * 2));
    CK(cudaMemcpy(p, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&b.y, size_t(kMaxM) * kN * 2));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  for (const size_t bytes : {size_t(1) << 30, size_t(kWeightBytes / 2)}) {
    void *a, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes));
    const double us =
        time_us([&](int) { CK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); }, 1);
    std::printf("copy %5.0f MB: %7.2f us  %4.0f GB/s (read + write)\n", bytes / 1e6, us,
                2 * bytes / us * 1e-3);
    CK(cudaFree(a));
    CK(cudaFree(c));
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

  gemv<2, 64, 16, 128, 8>(b, 1, xh, wh);  // the lowering's access pattern: 128 B of each row
  gemv<2, 64, 16, 256, 6>(b, 1, xh, wh);
  gemv<2, 128, 8, 64, 8>(b, 2, xh, wh);
  gemv<2, 128, 8, 128, 6>(b, 2, xh, wh);
  gemv<2, 192, 8, 64, 6>(b, 4, xh, wh);
  gemv<2, 192, 8, 32, 8>(b, 4, xh, wh);
  gemv<2, 256, 8, 64, 4>(b, 4, xh, wh);
  gemv<2, 256, 8, 32, 8>(b, 4, xh, wh);
  gemv<2, 384, 8, 32, 6>(b, 8, xh, wh);
  gemv<2, 384, 8, 16, 8>(b, 8, xh, wh);
  gemv<2, 512, 8, 32, 4>(b, 8, xh, wh);
  gemv<2, 96, 16, 64, 8>(b, 2, xh, wh);
  gemv<2, 96, 16, 128, 8>(b, 2, xh, wh);
  return 0;
}
