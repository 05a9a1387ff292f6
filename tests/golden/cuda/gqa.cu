// ==== fused node 'fused_scores': grid [2, 1, 1], 256 threads, 26240 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_fused_fused_scores(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  yr_wait_prior_grids();
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 9856);
  float* const t0_base = reinterpret_cast<float*>(smem + 0);
  float* const t1_base = reinterpret_cast<float*>(smem + 512);
  float* const t2_base = reinterpret_cast<float*>(smem + 1536);
  float* const t3 = reinterpret_cast<float*>(smem + 2560);
  float* const t4 = reinterpret_cast<float*>(smem + 3072);
  float* const t5 = reinterpret_cast<float*>(smem + 4096);
  float* const t6 = reinterpret_cast<float*>(smem + 5120);
  float* const t7 = reinterpret_cast<float*>(smem + 7168);
  float* const t9 = reinterpret_cast<float*>(smem + 7232);
  float* const t10 = reinterpret_cast<float*>(smem + 9280);
  float* const t11 = reinterpret_cast<float*>(smem + 9792);
  for (int e = threadIdx.x; e < 128; e += 256) t3[e] = 0.0f;
  for (int e = threadIdx.x; e < 256; e += 256) t4[e] = 0.0f;
  for (int e = threadIdx.x; e < 256; e += 256) t5[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16(t0_base + e, in0 + (0ll + (long long)blockIdx.x * 128ll + (long long)((e / 8) % 16) * 8ll + (long long)((e / 1) % 8) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16(t1_base + e, in1 + (0ll + (long long)blockIdx.x * 256ll + (long long)((e / 32) % 8) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16(t2_base + e, in2 + (0ll + (long long)blockIdx.x * 256ll + (long long)((e / 8) % 32) * 8ll + (long long)((e / 1) % 8) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 1; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    yr_cp_commit();
    const float* const t0 = t0_base;
    const float* const t1 = t1_base;
    const float* const t2 = t2_base;
  for (int e = threadIdx.x; e < 128; e += 256) t3[e] = t3[e] + yr_to_f(t0[e]);
  for (int e = threadIdx.x; e < 256; e += 256) t4[e] = t4[e] + yr_to_f(t1[e]);
  for (int e = threadIdx.x; e < 256; e += 256) t5[e] = t5[e] + yr_to_f(t2[e]);
  }
  __syncthreads();
  __syncthreads();
  {  // matmul [16x8] x [8x32], 1 batch(es)
    const int nl = threadIdx.x % 32, kp = threadIdx.x / 32;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(bt) * 128, bo = (int)(bt) * 256, co = bt * 512;
      for (int m0 = 0; m0 < 16; m0 += 16)
        for (int n0 = 0; n0 < 32; n0 += 32) {
          const int col = n0 + nl;
          float acc[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
          if (col < 32)
            for (int kk = kp; kk < 8; kk += 8) {
              const float bv = t4[bo + kk * 32 + col];
#pragma unroll
              for (int i = 0; i < 16; ++i) acc[i] += t3[ao + (m0 + i) * 8 + kk] * bv;
            }
#pragma unroll
          for (int i = 0; i < 16; ++i) red[(kp * 16 + i) * 32 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 16 * 32; e += 256) {
            const int i = e / 32, cc = n0 + e % 32;
            if (cc < 32) {
              float sum = 0.0f;
              for (int p = 0; p < 8; ++p) sum += red[(p * 16 + i) * 32 + e % 32];
              t6[co + (m0 + i) * 32 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  for (int o0 = 0; o0 < 16; o0 += 8) {
    const int o = o0 + threadIdx.x / 32 / 1, part = threadIdx.x / 32 % 1;
    float acc = -INFINITY;
    if (o < 16) {
      const int oo = o / (1 * 1), w = (o / 1) % 1, ii = o % 1;
      for (int r = part * 32 + threadIdx.x % 32; r < 32; r += 32) {
#pragma unroll
        for (int u = 0; u < 1; ++u) {
          const float v = t6[(oo * 32 + w * 32 + r) * 1 + ii];
          acc = fmaxf(acc, v);
        }
      }
    }
    for (int off = 32 / 2; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = fmaxf(acc, v);
    }
    if (o < 16 && threadIdx.x % 32 == 0) t7[o] = acc;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 512; e += 256) t9[e] = expf(((t6[(e)]) - (t7[((((e) / 32ll) % 16ll) * 1ll)])));
  __syncthreads();
  {  // matmul [16x32] x [32x8], 1 batch(es)
    const int nl = threadIdx.x % 8, kp = threadIdx.x / 8;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(bt) * 512, bo = (int)(bt) * 256, co = bt * 128;
      for (int m0 = 0; m0 < 16; m0 += 16)
        for (int n0 = 0; n0 < 8; n0 += 8) {
          const int col = n0 + nl;
          float acc[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
          if (col < 8)
            for (int kk = kp; kk < 32; kk += 32) {
              const float bv = t5[bo + kk * 8 + col];
#pragma unroll
              for (int i = 0; i < 16; ++i) acc[i] += t9[ao + (m0 + i) * 32 + kk] * bv;
            }
#pragma unroll
          for (int i = 0; i < 16; ++i) red[(kp * 16 + i) * 8 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 16 * 8; e += 256) {
            const int i = e / 8, cc = n0 + e % 8;
            if (cc < 8) {
              float sum = 0.0f;
              for (int p = 0; p < 32; ++p) sum += red[(p * 16 + i) * 8 + e % 8];
              t10[co + (m0 + i) * 8 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  for (int o0 = 0; o0 < 16; o0 += 8) {
    const int o = o0 + threadIdx.x / 32 / 1, part = threadIdx.x / 32 % 1;
    float acc = 0.0f;
    if (o < 16) {
      const int oo = o / (1 * 1), w = (o / 1) % 1, ii = o % 1;
      for (int r = part * 32 + threadIdx.x % 32; r < 32; r += 32) {
#pragma unroll
        for (int u = 0; u < 1; ++u) {
          const float v = t9[(oo * 32 + w * 32 + r) * 1 + ii];
          acc = acc + v;
        }
      }
    }
    for (int off = 32 / 2; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = acc + v;
    }
    if (o < 16 && threadIdx.x % 32 == 0) t11[o] = acc;
  }
  __syncthreads();
  for (int q = threadIdx.x; q < 32; q += 256) {
    const int e = q * 4;
    __align__(16) float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) yr_store(v + u, ((t10[(e + u)]) / (t11[((((e + u) / 8ll) % 16ll) * 1ll)])));
    *reinterpret_cast<uint4*>(out0 + (0ll + (long long)blockIdx.x * 128ll + (long long)((e / 8) % 16) * 8ll + (long long)((e / 1) % 8) * 1ll)) = *reinterpret_cast<const uint4*>(v);
  }
}
