// ==== fused node 'fused_proj': grid [2, 1, 1], 256 threads, 24576 bytes of shared memory

extern "C" __global__ void __launch_bounds__(256) yr_fused_fused_proj(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  yr_wait_prior_grids();
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 8192);
  float* const t0_base = reinterpret_cast<float*>(smem + 0);
  float* const t1_base = reinterpret_cast<float*>(smem + 1024);
  float* const t2 = reinterpret_cast<float*>(smem + 5120);
  float* const t3 = reinterpret_cast<float*>(smem + 6144);
  float* const t4 = reinterpret_cast<float*>(smem + 7168);
  for (int e = threadIdx.x; e < 256; e += 256) t3[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + (0) * 128) + e, in0 + (0ll + (long long)blockIdx.x * 256ll + (long long)(0) * 16ll + (long long)((e / 16) % 8) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 128) yr_cp_async16((t1_base + (0) * 512) + e, in1 + (0ll + (long long)(0) * 512ll + (long long)((e / 32) % 16) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 2; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (it + 1 < 2) {
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 32) yr_cp_async16((t0_base + ((it + 1) % 2) * 128) + e, in0 + (0ll + (long long)blockIdx.x * 256ll + (long long)(it + 1) * 16ll + (long long)((e / 16) % 8) * 32ll + (long long)((e / 1) % 16) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 4;
      if (q < 128) yr_cp_async16((t1_base + ((it + 1) % 2) * 512) + e, in1 + (0ll + (long long)(it + 1) * 512ll + (long long)((e / 32) % 16) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
    }
    yr_cp_commit();
    const float* const t0 = t0_base + (it % 2) * 128;
    const float* const t1 = t1_base + (it % 2) * 512;
  {  // matmul [8x16] x [16x32], 1 batch(es)
    const int nl = threadIdx.x % 32, kp = threadIdx.x / 32;
    for (int bt = 0; bt < 1; ++bt) {
      const int ao = (int)(0) * 128, bo = (int)(0) * 512, co = bt * 256;
      for (int m0 = 0; m0 < 8; m0 += 8)
        for (int n0 = 0; n0 < 32; n0 += 32) {
          const int col = n0 + nl;
          float acc[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
          if (col < 32)
            for (int kk = kp; kk < 16; kk += 8) {
              const float bv = yr_to_f(t1[bo + kk * 32 + col]);
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[i] += yr_to_f(t0[ao + (m0 + i) * 16 + kk]) * bv;
            }
#pragma unroll
          for (int i = 0; i < 8; ++i) red[(kp * 8 + i) * 32 + nl] = acc[i];
          __syncthreads();
          for (int e = threadIdx.x; e < 8 * 32; e += 256) {
            const int i = e / 32, cc = n0 + e % 32;
            if (cc < 32) {
              float sum = 0.0f;
              for (int p = 0; p < 8; ++p) sum += red[(p * 8 + i) * 32 + e % 32];
              t2[co + (m0 + i) * 32 + cc] = sum;
            }
          }
          __syncthreads();
        }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 256; e += 256) t3[e] = t3[e] + t2[e];
  }
  __syncthreads();
  __syncthreads();
  for (int row = threadIdx.x / 32; row < 8; row += 8) {
    const int lane = threadIdx.x % 32, base = row * 32;
    float mean = 0.0f;
    { float a = 0.0f; for (int r = lane; r < 32; r += 32) a += t3[base + r];
      mean = yr_warp_sum(a) / 32.0f; }
    float a = 0.0f;
    for (int r = lane; r < 32; r += 32) { const float d = t3[base + r] - mean; a += d * d; }
    const float scale = 1.0f / sqrtf(yr_warp_sum(a) / 32.0f + 9.999999747e-06f);
    for (int r = lane; r < 32; r += 32) {
      float y = (t3[base + r] - mean) * scale;
      t4[base + r] = y;
    }
  }
  __syncthreads();
  for (int q = threadIdx.x; q < 64; q += 256) {
    const int e = q * 4;
    __align__(16) float v[4];
    float f[4];
#pragma unroll
    for (int u = 0; u < 4; u += 4)
      *reinterpret_cast<float4*>(f + u) = *reinterpret_cast<const float4*>(t4 + e + u);
#pragma unroll
    for (int u = 0; u < 4; ++u) yr_store(v + u, f[u]);
    *reinterpret_cast<uint4*>(out0 + (0ll + (long long)blockIdx.x * 256ll + (long long)((e / 32) % 8) * 32ll + (long long)((e / 1) % 32) * 1ll)) = *reinterpret_cast<const uint4*>(v);
  }
}
