// ==== node 'scores' (matmul): grid [1, 1, 2], 256 threads, 0 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_scores(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  yr_wait_prior_grids();
  // 64x64 output tile per block, 16-deep K slices, 4x4 outputs per thread.
  __shared__ float As[16][64 + 1];
  __shared__ float Bs[16][64 + 1];
  const long long bz = blockIdx.z;
  const float* A = in0 + (bz) * 16ll * 8ll;
  const float* B = in1 + (bz) * 8ll * 32ll;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long row0 = blockIdx.y * 64ll, col0 = blockIdx.x * 64ll;
  float acc[4][4] = {};
  for (long long k0 = 0; k0 < 8ll; k0 += 16) {
    for (int i = threadIdx.x; i < 16 * 64; i += 256) {
      const int kk = i / 64, mm = i % 64;
      const long long r = row0 + mm, kc = k0 + kk;
      As[kk][mm] = (r < 16ll && kc < 8ll) ? yr_to_f(A[r * 8ll + kc]) : 0.0f;
      const long long cc = col0 + mm;
      Bs[kk][mm] = (kc < 8ll && cc < 32ll) ? yr_to_f(B[kc * 32ll + cc]) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += As[kk][ty + 16 * i] * Bs[kk][tx + 16 * j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const long long r = row0 + ty + 16 * i, cc = col0 + tx + 16 * j;
      if (r < 16ll && cc < 32ll) yr_store(out0 + bz * 16ll * 32ll + r * 32ll + cc, acc[i][j]);
    }
}
// ==== node 'exp_scores' (exp): grid [4, 1, 1], 256 threads, 0 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_exp_scores(const float* __restrict__ in0, float* __restrict__ out0) {
  yr_wait_prior_grids();
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < 1024ll; i += gridDim.x * 256ll) {
    const float x0 = yr_to_f(in0[i]);
    yr_store(out0 + i, expf(x0));
  }
}
// ==== node 'row_sum' (sum): grid [4, 1, 1], 256 threads, 0 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_row_sum(const float* __restrict__ in0, float* __restrict__ out0) {
  yr_wait_prior_grids();
  const int lane = threadIdx.x & 31;
  for (long long o = (blockIdx.x * 256ll + threadIdx.x) >> 5; o < 32ll; o += gridDim.x * 8ll) {
    const long long base = (o / 1ll) * 32ll * 1ll + o % 1ll;
    float acc = 0.0f;
    for (long long r = lane; r < 32ll; r += 32) {
      const float v = yr_to_f(in0[base + r * 1ll]);
      acc = acc + v;
    }
    acc = yr_warp_sum(acc);
    if (lane == 0) yr_store(out0 + o, acc);
  }
}
// ==== node 'probs' (div): grid [4, 1, 1], 256 threads, 0 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_probs(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  yr_wait_prior_grids();
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < 1024ll; i += gridDim.x * 256ll) {
    const float x0 = yr_to_f(in0[i]);
    const float x1 = yr_to_f(in1[((i / 512ll) * 16ll + ((i / 32ll) % 16ll) * 1ll)]);
    yr_store(out0 + i, ((x0) / (x1)));
  }
}
// ==== node 'out' (matmul): grid [1, 1, 2], 256 threads, 0 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_out(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  yr_wait_prior_grids();
  // 64x64 output tile per block, 16-deep K slices, 4x4 outputs per thread.
  __shared__ float As[16][64 + 1];
  __shared__ float Bs[16][64 + 1];
  const long long bz = blockIdx.z;
  const float* A = in0 + (bz) * 16ll * 32ll;
  const float* B = in1 + (bz) * 32ll * 8ll;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long row0 = blockIdx.y * 64ll, col0 = blockIdx.x * 64ll;
  float acc[4][4] = {};
  for (long long k0 = 0; k0 < 32ll; k0 += 16) {
    for (int i = threadIdx.x; i < 16 * 64; i += 256) {
      const int kk = i / 64, mm = i % 64;
      const long long r = row0 + mm, kc = k0 + kk;
      As[kk][mm] = (r < 16ll && kc < 32ll) ? yr_to_f(A[r * 32ll + kc]) : 0.0f;
      const long long cc = col0 + mm;
      Bs[kk][mm] = (kc < 32ll && cc < 8ll) ? yr_to_f(B[kc * 8ll + cc]) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += As[kk][ty + 16 * i] * Bs[kk][tx + 16 * j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const long long r = row0 + ty + 16 * i, cc = col0 + tx + 16 * j;
      if (r < 16ll && cc < 8ll) yr_store(out0 + bz * 16ll * 8ll + r * 8ll + cc, acc[i][j]);
    }
}
