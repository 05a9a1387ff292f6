// ==== fused node 'fused_normed': grid [2, 1, 1], 256 threads, 24592 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_fused_fused_normed(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  yr_wait_prior_grids();
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 8208);
  float* const t0_base = reinterpret_cast<float*>(smem + 0);
  float* const t1_base = reinterpret_cast<float*>(smem + 1024);
  float* const t2_base = reinterpret_cast<float*>(smem + 1280);
  float* const t6 = reinterpret_cast<float*>(smem + 7424);
  float* const t7 = reinterpret_cast<float*>(smem + 7808);
  float* const t8 = reinterpret_cast<float*>(smem + 7824);
  for (int e = threadIdx.x; e < 4; e += 256) t7[e] = 0.0f;
  for (int e = threadIdx.x; e < 96; e += 256) t8[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + (0) * 128) + e, in0 + (0ll + (long long)(0) * 32ll + (long long)((e / 32) % 4) * 64ll + (long long)((e / 1) % 32) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 8) yr_cp_async16((t1_base + (0) * 32) + e, in1 + (0ll + (long long)(0) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 192) yr_cp_async16((t2_base + (0) * 768) + e, in2 + (0ll + (long long)blockIdx.x * 24ll + (long long)(0) * 1536ll + (long long)((e / 24) % 32) * 48ll + (long long)((e / 1) % 24) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 2; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (it + 1 < 2) {
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + ((it + 1) % 2) * 128) + e, in0 + (0ll + (long long)(it + 1) * 32ll + (long long)((e / 32) % 4) * 64ll + (long long)((e / 1) % 32) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 8) yr_cp_async16((t1_base + ((it + 1) % 2) * 32) + e, in1 + (0ll + (long long)(it + 1) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 192) yr_cp_async16((t2_base + ((it + 1) % 2) * 768) + e, in2 + (0ll + (long long)blockIdx.x * 24ll + (long long)(it + 1) * 1536ll + (long long)((e / 24) % 32) * 48ll + (long long)((e / 1) % 24) * 1ll));
    }
    }
    yr_cp_commit();
    const float* const t0 = t0_base + (it % 2) * 128;
    const float* const t1 = t1_base + (it % 2) * 32;
    const float* const t2 = t2_base + (it % 2) * 768;
  for (int o0 = 0; o0 < 4; o0 += 8) {
    const int o = o0 + threadIdx.x / 32 / 1, part = threadIdx.x / 32 % 1;
    float acc = 0.0f;
    if (o < 4) {
      const int oo = o / (1 * 1), w = (o / 1) % 1, ii = o % 1;
      for (int r = part * 32 + threadIdx.x % 32; r < 32; r += 32) {
#pragma unroll
        for (int u = 0; u < 1; ++u) {
          const float v = ((yr_to_f(t0[((oo * 32 + w * 32 + r) * 1 + ii)])) * (yr_to_f(t0[((oo * 32 + w * 32 + r) * 1 + ii)])));
          acc = acc + v;
        }
      }
    }
    for (int off = 32 / 2; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = acc + v;
    }
    if (o < 4 && threadIdx.x % 32 == 0) t7[o] += acc / 32.0f;
  }
  {  // matmul [4x32] x [32x24], 1 batch(es)
    const int nl = threadIdx.x % 32, kp = threadIdx.x / 32;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(0) * 128, bo = (int)(0) * 768, co = bt * 96;
      for (int m0 = 0; m0 < 4; m0 += 4)
        for (int n0 = 0; n0 < 24; n0 += 32) {
          const int col = n0 + nl;
          float acc[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
          if (col < 24)
            for (int kk = kp; kk < 32; kk += 8) {
              const float bv = yr_to_f(t2[bo + kk * 24 + col]);
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[i] += ((yr_to_f(t0[(ao + (m0 + i) * 32 + kk)])) * (yr_to_f(t1[((((ao + (m0 + i) * 32 + kk) / 1ll) % 32ll) * 1ll)]))) * bv;
            }
#pragma unroll
          for (int i = 0; i < 4; ++i) red[(kp * 4 + i) * 32 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 4 * 32; e += 256) {
            const int i = e / 32, cc = n0 + e % 32;
            if (cc < 24) {
              float sum = 0.0f;
              for (int p = 0; p < 8; ++p) sum += red[(p * 4 + i) * 32 + e % 32];
              t6[co + (m0 + i) * 24 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 96; e += 256) t8[e] = t8[e] + t6[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 4; e += 256) t7[e] = sqrtf(t7[e] / 2.0f + 9.999999975e-07f);
  __syncthreads();
  for (int q = threadIdx.x; q < 24; q += 256) {
    const int e = q * 4;
    __align__(16) float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) yr_store(v + u, ((t8[(e + u)]) / (t7[(((e + u) / 24ll) * 1ll)])));
    *reinterpret_cast<uint4*>(out0 + (0ll + (long long)blockIdx.x * 24ll + (long long)((e / 24) % 4) * 48ll + (long long)((e / 1) % 24) * 1ll)) = *reinterpret_cast<const uint4*>(v);
  }
}
