// A probe, not part of the engine: for the suite's kernel-level matmuls, how far is the cuBLAS
// call the cuda backend makes (cublasGemmStridedBatchedEx, default algorithm) from the fastest of
// cuBLASLt's heuristic candidates, timed on this GPU? It answers whether the backend should time
// cuBLASLt's candidates and keep the fastest (bench/gpu_notes.md, version 26) before building it.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/cublaslt_probe bench/cublaslt_probe.cu -lcublasLt -lcublas
//   /tmp/cublaslt_probe
//
// Row-major C[M x N] = A[M x K] · B[K x N] in fp16 with f32 accumulation, as the backend calls
// it (column-major Cᵀ = Bᵀ · Aᵀ), each timed as 24 calls captured into a CUDA graph, as the suite
// replays them (launched one by one, the host's cost per call hides the GPU's). "warm" repeats
// the call on one weight, as the suite does; "cold" rotates over enough weight copies (≥ 160 MB)
// that the L2 cannot serve repeats.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "probe_util.cuh"

#define CB(x)                                                                 \
  do {                                                                        \
    cublasStatus_t s_ = (x);                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "%s:%d cublas status %d\n", __FILE__, __LINE__, s_); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// Microseconds a call: `launch(q)` for q = 0..23 captured on `stream` into one graph, replayed.
template <typename Launch>
double graph_us(cudaStream_t stream, Launch launch, int copies) {
  constexpr int calls = 24;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int q = 0; q < calls; ++q) launch(q % copies);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_us([&](int) { CK(cudaGraphLaunch(exec, stream)); }) / calls;
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return us;
}

struct Shape {
  const char* row;
  int m, k, n;
};

int main() {
  const Shape shapes[] = {
      {"rmsnorm_linear bs1", 2, 4096, 6144},     {"rmsnorm_linear bs8", 16, 4096, 6144},
      {"gated_mlp bs1 (each)", 8, 4096, 4096},   {"gated_mlp bs8 (each)", 64, 4096, 4096},
      {"gemm_softmax", 8, 2048, 32000},          {"gemm_layernorm", 16, 4096, 4096},
      {"llama bs1 gate_up", 1, 4096, 28672},     {"llama bs1 down", 1, 14336, 4096},
      {"llama bs8 gate_up", 8, 4096, 28672},     {"llama bs8 down", 8, 14336, 4096},
  };
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  CB(cublasCreate(&blas));
  CB(cublasLtCreate(&lt));
  const size_t workspace_bytes = 32u << 20;
  void* workspace;
  CK(cudaMalloc(&workspace, workspace_bytes));
  CB(cublasSetWorkspace(blas, workspace, workspace_bytes));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));  // blocking: median_us's events on the legacy stream order with it
  CB(cublasSetStream(blas, stream));
  const float one = 1.f, zero = 0.f;
  std::printf("row | M K N | copies | default warm/cold µs | Lt candidates | best Lt warm/cold µs "
              "(index) | Lt #0 warm/cold µs\n");
  for (const Shape& s : shapes) {
    const size_t weight_bytes = size_t(s.k) * s.n * 2;
    const int copies = int(std::max<size_t>(1, (160u << 20) / weight_bytes + 1));
    __half *a, *c;
    CK(cudaMalloc(&a, size_t(s.m) * s.k * 2));
    CK(cudaMalloc(&c, size_t(s.m) * s.n * 2));
    CK(cudaMemset(a, 0x31, size_t(s.m) * s.k * 2));
    std::vector<__half*> w(copies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, weight_bytes));
      CK(cudaMemset(p, 0x2a, weight_bytes));
    }
    auto plain = [&](int q) {
      CB(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, w[q], CUDA_R_16F, s.n,
                      a, CUDA_R_16F, s.k, &zero, c, CUDA_R_16F, s.n, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    };
    const double plain_warm = graph_us(stream, plain, 1),
                 plain_cold = graph_us(stream, plain, copies);

    cublasLtMatmulDesc_t desc;
    CB(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t bl, al, cl;  // column-major: first operand Bᵀ [N x K], then Aᵀ, Cᵀ
    CB(cublasLtMatrixLayoutCreate(&bl, CUDA_R_16F, s.n, s.k, s.n));
    CB(cublasLtMatrixLayoutCreate(&al, CUDA_R_16F, s.k, s.m, s.k));
    CB(cublasLtMatrixLayoutCreate(&cl, CUDA_R_16F, s.n, s.m, s.n));
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &workspace_bytes, sizeof(workspace_bytes)));
    cublasLtMatmulHeuristicResult_t found[32];
    int count = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, desc, bl, al, cl, cl, pref, 32, found, &count));
    double best_warm = 1e30, best_cold = 0, first_warm = 0, first_cold = 0;
    int best = -1;
    for (int i = 0; i < count; ++i) {
      auto run = [&](int q) {
        CB(cublasLtMatmul(lt, desc, &one, w[q], bl, a, al, &zero, c, cl, c, cl, &found[i].algo,
                          workspace, workspace_bytes, stream));
      };
      const double warm = graph_us(stream, run, 1), cold = graph_us(stream, run, copies);
      if (i == 0) first_warm = warm, first_cold = cold;
      if (warm < best_warm) best_warm = warm, best_cold = cold, best = i;
    }
    std::printf("%s | %d %d %d | %d | %.2f / %.2f | %d | %.2f / %.2f (#%d) | %.2f / %.2f\n", s.row,
                s.m, s.k, s.n, copies, plain_warm, plain_cold, count, best_warm, best_cold, best,
                first_warm, first_cold);
    std::fflush(stdout);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(bl);
    cublasLtMatrixLayoutDestroy(al);
    cublasLtMatrixLayoutDestroy(cl);
    cublasLtMatmulDescDestroy(desc);
    for (auto p : w) CK(cudaFree(p));
    CK(cudaFree(a));
    CK(cudaFree(c));
  }
  std::printf("device-to-device copy of 256 MB: %.1f µs\n", copy_us(256u << 20));
  return 0;
}
