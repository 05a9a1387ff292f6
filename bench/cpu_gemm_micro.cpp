// Micro-benchmark of the cpu backend's GEMM kernels on their own, outside any generated module:
//   g++ -std=c++17 -O3 -fopenmp -ffp-contract=fast -march=x86-64-v4 -DYR_VBYTES=64 \
//       -I src/backend/cpu/runtime bench/cpu_gemm_micro.cpp -o /tmp/gemm && /tmp/gemm M N K THREADS
// Checks the product against a double-precision loop (small shapes) and prints the best of 20
// timed runs as GFLOP/s and as GB/s of B (the weight) streamed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "yr_cpu_runtime.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s M N K THREADS\n", argv[0]);
    return 2;
  }
  const int64_t M = std::atol(argv[1]), N = std::atol(argv[2]), K = std::atol(argv[3]);
  const int nt = std::atoi(argv[4]);
  std::vector<float> A(size_t(M * K)), B(size_t(K * N)), C(size_t(M * N));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : A) x = dist(rng);
  for (float& x : B) x = dist(rng);
  const size_t stride = size_t(yr::kPackFloats) * 4;
  std::vector<char> scratch(stride * size_t(nt));
  const int64_t zero = 0;
  auto run = [&] {
    yr::matmul<float, float, float>(1, &zero, &zero, M, N, K, A.data(), B.data(), C.data(),
                                    C.data(), scratch.data(), stride, nt);
  };
  run();
  if (M * N * K <= (int64_t(1) << 28)) {
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(A[size_t(m * K + k)]) * B[size_t(k * N + n)];
        worst = std::max(worst, std::abs(s - C[size_t(m * N + n)]));
      }
    std::printf("max abs error %.3g\n", worst);
  }
  double best = 1e9;
  for (int r = 0; r < 20; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%ldx%ldx%ld on %d threads: %.3f ms, %.1f GFLOP/s, %.1f GB/s of B\n", long(M),
              long(N), long(K), nt, best * 1e3, 2.0 * M * N * K / best / 1e9,
              4.0 * K * N / best / 1e9);
}
