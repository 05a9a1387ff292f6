// What gqa bs1's two kernels spend their time on (bench/gpu_notes.md, version 19). The kernels
// are YiRage's own generated sources for split32_qb128_lc64_fq2 (YIRAGE_CUDA_DUMP), and variants
// of them edited by hand, each one timed alone as a CUDA graph of 20 calls:
//   parts_orig    the partials kernel at commit e2f7d27 (accumulators zeroed, products added)
//   parts_new     the same at 4be93ec (each product stored once by the warp that owns its row)
//   parts_reg     products stored straight from registers to global memory, 4 bytes a lane
//   parts_stage   products packed to fp16 into padded shared rows, then copied out 16 bytes a lane
//   parts_{nocomp,noload,loadonly,storeonly,componly,storecoal}  parts_reg with steps left out
//   finish_orig   the generated finish; finish_fast a hand-written one with no shared memory
// Outputs of the edited kernels are compared with the generated ones first.
//
//   cd bench/attention_probe && nvcc -arch=sm_90 -O3 -std=c++17 -o probe probe.cu && ./probe
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <algorithm>
#include <functional>
#include "prelude.cuh"
#include "parts_orig.cuh"
#include "parts_reg.cuh"
#include "finish_orig.cuh"
#include "parts_nocomp.cuh"
#include "parts_noload.cuh"
#include "parts_loadonly.cuh"
#include "parts_storeonly.cuh"
#include "parts_componly.cuh"
#include "parts_storecoal.cuh"
#include "parts_stage.cuh"
#include "parts_new.cuh"
#include "finish_fast.cuh"
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); std::exit(1);} } while (0)

// µs a call: a graph of 20 calls replayed, median of 30.
double graph_us(std::function<void(cudaStream_t)> body) {
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) body(s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 40; ++rep) {
    CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep >= 10) ts.push_back(ms * 1000.f / 20);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}
template <typename T> std::vector<float> fetch(T* p, size_t n) {
  std::vector<__half> h(n); CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n); for (size_t i = 0; i < n; ++i) f[i] = __half2float(h[i]); return f;
}
double maxdiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0; for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (double)std::abs(a[i] - b[i])); return m;
}
int main() {
  const size_t nq = 2 * 256 * 64, nk = 2 * 64 * 4096, np = 2 * 256 * 2048, nl = 2 * 256 * 32;
  std::mt19937 rng(1); std::uniform_real_distribution<float> ud(-1.f, 1.f);
  auto up = [&](size_t n, float scale) { std::vector<__half> h(n); for (auto& v : h) v = __float2half(ud(rng) * scale);
    yr_half* p; CK(cudaMalloc(&p, n * 2)); CK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice)); return p; };
  yr_half *q = up(nq, 0.5f), *k = up(nk, 0.5f), *v = up(nk, 1.f);
  yr_half *p0, *p1, *o, *p0b, *p1b, *ob;
  for (auto pp : {&p0, &p0b}) CK(cudaMalloc(pp, np * 2));
  for (auto pp : {&p1, &p1b}) CK(cudaMalloc(pp, nl * 2));
  for (auto pp : {&o, &ob}) CK(cudaMalloc(pp, nq * 2));
  const int sm_parts = 92160, sm_reg = 56320, sm_fin = 16384;
  CK(cudaFuncSetAttribute(parts_orig, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_parts));
  CK(cudaFuncSetAttribute(parts_reg, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  dim3 gp(2, 2, 32), gf(2, 128, 1);
  auto po = [&](cudaStream_t s) { parts_orig<<<gp, 256, sm_parts, s>>>(q, k, v, p0, p1); };
  auto pr = [&](cudaStream_t s) { parts_reg<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_nocomp, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  CK(cudaFuncSetAttribute(parts_noload, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto pnc = [&](cudaStream_t s) { parts_nocomp<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  auto pnl = [&](cudaStream_t s) { parts_noload<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_loadonly, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto ploadonly = [&](cudaStream_t s) { parts_loadonly<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_storeonly, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto pstoreonly = [&](cudaStream_t s) { parts_storeonly<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_componly, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto pcomponly = [&](cudaStream_t s) { parts_componly<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_storecoal, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto pstorecoal = [&](cudaStream_t s) { parts_storecoal<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_reg));
  auto pstage = [&](cudaStream_t s) { parts_stage<<<gp, 256, sm_reg, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_new, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_parts));
  auto pnew = [&](cudaStream_t s) { parts_new<<<gp, 256, sm_parts, s>>>(q, k, v, p0b, p1b); };
  CK(cudaFuncSetAttribute(parts_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_parts));
  auto pstagebig = [&](cudaStream_t s) { parts_stage<<<gp, 256, sm_parts, s>>>(q, k, v, p0b, p1b); };
  auto fo = [&](cudaStream_t s) { finish_orig<<<gf, 256, sm_fin, s>>>(p0, p1, o); };
  auto ff = [&](cudaStream_t s) { finish_fast<<<gf, 256, 0, s>>>(p0b, p1b, ob); };
  auto em = [&](cudaStream_t s) { empty_kernel<<<gp, 256, sm_parts, s>>>(ob); };
  CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_parts));
  CK(cudaMemset(p0b, 0xff, np * 2)); CK(cudaMemset(ob, 0xff, nq * 2));
  po(0); fo(0); pr(0); ff(0); CK(cudaDeviceSynchronize());
  std::printf("check: parts diff %.3g, sums diff %.3g, out diff %.3g (out scale %.3g)\n",
              maxdiff(fetch(p0, np), fetch(p0b, np)), maxdiff(fetch(p1, nl), fetch(p1b, nl)),
              maxdiff(fetch(o, nq), fetch(ob, nq)), fetch(o, nq)[5]);
  CK(cudaMemset(p0b, 0xff, np * 2)); pstage(0); CK(cudaDeviceSynchronize());
  std::printf("check stage: parts diff %.3g, sums diff %.3g\n", maxdiff(fetch(p0, np), fetch(p0b, np)), maxdiff(fetch(p1, nl), fetch(p1b, nl)));
  CK(cudaMemset(p0b, 0xff, np * 2)); pnew(0); CK(cudaDeviceSynchronize());
  std::printf("check new: parts diff %.3g, sums diff %.3g\n", maxdiff(fetch(p0, np), fetch(p0b, np)), maxdiff(fetch(p1, nl), fetch(p1b, nl)));
  for (int round = 0; round < 2; ++round) {
    std::printf("empty(parts grid)   %.2f us\n", graph_us(em));
    std::printf("parts orig          %.2f us\n", graph_us(po));
    std::printf("parts reg           %.2f us\n", graph_us(pr));
    std::printf("parts no compute    %.2f us\n", graph_us(pnc));
    std::printf("parts no load       %.2f us\n", graph_us(pnl));
    std::printf("parts loadonly      %.2f us\n", graph_us(ploadonly));
    std::printf("parts storeonly     %.2f us\n", graph_us(pstoreonly));
    std::printf("parts componly      %.2f us\n", graph_us(pcomponly));
    std::printf("parts storecoal     %.2f us\n", graph_us(pstorecoal));
    std::printf("parts stage         %.2f us\n", graph_us(pstage));
    std::printf("parts new           %.2f us\n", graph_us(pnew));
    std::printf("parts stage 92KB    %.2f us\n", graph_us(pstagebig));
    std::printf("finish orig         %.2f us\n", graph_us(fo));
    std::printf("finish fast         %.2f us\n", graph_us(ff));
    std::printf("orig + orig         %.2f us\n", graph_us([&](cudaStream_t s) { po(s); fo(s); }));
    std::printf("reg + fast          %.2f us\n", graph_us([&](cudaStream_t s) { pr(s); ff(s); }));
    std::printf("stage + fast        %.2f us\n", graph_us([&](cudaStream_t s) { pstage(s); ff(s); }));
    std::printf("new + orig          %.2f us\n", graph_us([&](cudaStream_t s) { pnew(s); fo(s); }));
  }
}
