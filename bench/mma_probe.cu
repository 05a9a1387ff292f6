// What the tensor cores give through mma.sync (the instruction the generated kernels use), and
// the special-function unit through ex2.approx, on the GPU at hand, as a function of warps per
// scheduler and independent chains per warp. Evidence for how far the attention chain (gqa) is
// from the instruction's own ceiling, and whether two warps a scheduler can reach it.
//
//   nvcc -O3 -arch=sm_90 -o mma_probe bench/mma_probe.cu && ./mma_probe
//
// One block of `warps` warps on every multiprocessor; each warp runs `chains` independent
// m16n8k16 f16 products with f32 accumulators (or ex2 chains), `iters` times, operands in
// registers.
#include "probe_util.cuh"

template <int CHAINS>
__global__ void mma_chains(float* out, int iters) {
  const unsigned seed = threadIdx.x * 2654435761u + blockIdx.x;
  const unsigned a0 = seed | 0x3c003c00u, a1 = a0 ^ 0x00010001u, a2 = a0 ^ 0x00020002u,
                 a3 = a0 ^ 0x00030003u, b0 = a0 ^ 0x00040004u, b1 = a0 ^ 0x00050005u;
  float c[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};"
          : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (s == 1234.5f) out[blockIdx.x] = s;  // keeps the products live
}

template <int CHAINS>
__global__ void ex2_chains(float* out, int iters) {
  float x[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) x[k] = -1.0f - 1e-3f * float(threadIdx.x + k);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[k]));
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += x[k];
  if (s == 1234.5f) out[blockIdx.x] = s;
}

template <int CHAINS>
void row(int sms, int warps, float* out) {
  const int iters = 4096;
  const double mma_us =
      median_us([&](int) { mma_chains<CHAINS><<<sms, 32 * warps>>>(out, iters); });
  CK(cudaGetLastError());
  const double ex2_us =
      median_us([&](int) { ex2_chains<CHAINS><<<sms, 32 * warps>>>(out, iters); });
  CK(cudaGetLastError());
  const double products = double(sms) * warps * iters * CHAINS;
  std::printf(
      "%3d warps/SM (%2d a scheduler)  %d chains  mma %7.1f TFLOP/s  (%5.2f ns a warp's mma)"
      "   ex2 %6.2f Tex2/s\n",
      warps, warps / 4, CHAINS, products * 4096 / (mma_us * 1e-6) / 1e12,
      mma_us * 1e3 / (double(iters) * CHAINS), products * 32 / (ex2_us * 1e-6) / 1e12);
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);
  float* out;
  CK(cudaMalloc(&out, 4096 * sizeof(float)));
  for (int warps : {4, 8, 16, 32}) {
    row<1>(prop.multiProcessorCount, warps, out);
    row<2>(prop.multiProcessorCount, warps, out);
    row<4>(prop.multiProcessorCount, warps, out);
    row<8>(prop.multiProcessorCount, warps, out);
  }
  CK(cudaFree(out));
  return 0;
}
