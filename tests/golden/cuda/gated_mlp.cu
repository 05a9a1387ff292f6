// ==== fused node 'fused_gate_proj': grid [2, 1, 1], 256 threads, 23552 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_fused_fused_gate_proj(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  yr_wait_prior_grids();
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 7168);
  float* const t0_base = reinterpret_cast<float*>(smem + 0);
  float* const t1_base = reinterpret_cast<float*>(smem + 1024);
  float* const t2_base = reinterpret_cast<float*>(smem + 3072);
  float* const t3 = reinterpret_cast<float*>(smem + 5120);
  float* const t4 = reinterpret_cast<float*>(smem + 5632);
  float* const t5 = reinterpret_cast<float*>(smem + 6144);
  float* const t6 = reinterpret_cast<float*>(smem + 6656);
  for (int e = threadIdx.x; e < 128; e += 256) t5[e] = 0.0f;
  for (int e = threadIdx.x; e < 128; e += 256) t6[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + (0) * 128) + e, in0 + (0ll + (long long)(0) * 16ll + (long long)((e / 16) % 8) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16((t1_base + (0) * 256) + e, in1 + (0ll + (long long)blockIdx.x * 16ll + (long long)(0) * 512ll + (long long)((e / 16) % 16) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16((t2_base + (0) * 256) + e, in2 + (0ll + (long long)blockIdx.x * 16ll + (long long)(0) * 512ll + (long long)((e / 16) % 16) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 2; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (it + 1 < 2) {
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + ((it + 1) % 2) * 128) + e, in0 + (0ll + (long long)(it + 1) * 16ll + (long long)((e / 16) % 8) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16((t1_base + ((it + 1) % 2) * 256) + e, in1 + (0ll + (long long)blockIdx.x * 16ll + (long long)(it + 1) * 512ll + (long long)((e / 16) % 16) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 64) yr_cp_async16((t2_base + ((it + 1) % 2) * 256) + e, in2 + (0ll + (long long)blockIdx.x * 16ll + (long long)(it + 1) * 512ll + (long long)((e / 16) % 16) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
    }
    yr_cp_commit();
    const float* const t0 = t0_base + (it % 2) * 128;
    const float* const t1 = t1_base + (it % 2) * 256;
    const float* const t2 = t2_base + (it % 2) * 256;
  {  // matmul [8x16] x [16x16], 1 batch(es)
    const int nl = threadIdx.x % 16, kp = threadIdx.x / 16;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(0) * 128, bo = (int)(0) * 256, co = bt * 128;
      for (int m0 = 0; m0 < 8; m0 += 8)
        for (int n0 = 0; n0 < 16; n0 += 16) {
          const int col = n0 + nl;
          float acc[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
          if (col < 16)
            for (int kk = kp; kk < 16; kk += 16) {
              const float bv = yr_to_f(t1[bo + kk * 16 + col]);
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[i] += yr_to_f(t0[ao + (m0 + i) * 16 + kk]) * bv;
            }
#pragma unroll
          for (int i = 0; i < 8; ++i) red[(kp * 8 + i) * 16 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 8 * 16; e += 256) {
            const int i = e / 16, cc = n0 + e % 16;
            if (cc < 16) {
              float sum = 0.0f;
              for (int p = 0; p < 16; ++p) sum += red[(p * 8 + i) * 16 + e % 16];
              t3[co + (m0 + i) * 16 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  {  // matmul [8x16] x [16x16], 1 batch(es)
    const int nl = threadIdx.x % 16, kp = threadIdx.x / 16;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(0) * 128, bo = (int)(0) * 256, co = bt * 128;
      for (int m0 = 0; m0 < 8; m0 += 8)
        for (int n0 = 0; n0 < 16; n0 += 16) {
          const int col = n0 + nl;
          float acc[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
          if (col < 16)
            for (int kk = kp; kk < 16; kk += 16) {
              const float bv = yr_to_f(t2[bo + kk * 16 + col]);
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[i] += yr_to_f(t0[ao + (m0 + i) * 16 + kk]) * bv;
            }
#pragma unroll
          for (int i = 0; i < 8; ++i) red[(kp * 8 + i) * 16 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 8 * 16; e += 256) {
            const int i = e / 16, cc = n0 + e % 16;
            if (cc < 16) {
              float sum = 0.0f;
              for (int p = 0; p < 16; ++p) sum += red[(p * 8 + i) * 16 + e % 16];
              t4[co + (m0 + i) * 16 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 128; e += 256) t5[e] = t5[e] + t3[e];
  for (int e = threadIdx.x; e < 128; e += 256) t6[e] = t6[e] + t4[e];
  }
  __syncthreads();
  __syncthreads();
  for (int q = threadIdx.x; q < 32; q += 256) {
    const int e = q * 4;
    __align__(16) float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) yr_store(v + u, ((t6[(e + u)]) * ((t5[((e + u))] / (1.0f + expf(-(t5[((e + u))])))))));
    *reinterpret_cast<uint4*>(out0 + (0ll + (long long)blockIdx.x * 16ll + (long long)((e / 16) % 8) * 32ll + (long long)((e / 1) % 16) * 1ll)) = *reinterpret_cast<const uint4*>(v);
  }
}
