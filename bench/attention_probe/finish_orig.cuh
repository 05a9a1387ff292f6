extern "C" __global__ void __launch_bounds__(256) finish_orig(const yr_half* __restrict__ in0, const yr_half* __restrict__ in1, yr_half* __restrict__ out0) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 9904);
  yr_half* const t0_base = reinterpret_cast<yr_half*>(smem + 0);
  float* const t2 = reinterpret_cast<float*>(smem + 9216);
  yr_half* const t3_base = reinterpret_cast<yr_half*>(smem + 9728);
  float* const t5 = reinterpret_cast<float*>(smem + 9888);
  for (int e = threadIdx.x; e < 128; e += 256) t2[e] = 0.0f;
  for (int e = threadIdx.x; e < 2; e += 256) t5[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16(t0_base + ((e) / 64 * 72 + (e) % 64), in0 + (0ll + (long long)blockIdx.x * 524288ll + (long long)blockIdx.y * 4096ll + (long long)((e / 2048) % 2) * 2048ll + (long long)((e / 64) % 32) * 64ll + (long long)((e / 1) % 64) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 1; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      if (q < 8) yr_cp_async16(t3_base + ((e) / 32 * 40 + (e) % 32), in1 + (0ll + (long long)blockIdx.x * 8192ll + (long long)blockIdx.y * 64ll + (long long)((e / 32) % 2) * 32ll + (long long)((e / 1) % 32) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 1; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    yr_cp_commit();
    const yr_half* const t0 = t0_base;
    const yr_half* const t3 = t3_base;
  for (int o0 = 0; o0 < 128; o0 += 32) {
    const int o = o0 + threadIdx.x / 8 / 1, part = threadIdx.x / 8 % 1;
    float acc = 0.0f;
    if (o < 128) {
      const int oo = o / (1 * 64), w = (o / 64) % 1, ii = o % 64;
      for (int r = part * 8 + threadIdx.x % 8; r < 32; r += 8) {
        const float v = yr_to_f(t0[(((oo * 32 + w * 32 + r) * 64 + ii) / 64 * 72 + ((oo * 32 + w * 32 + r) * 64 + ii) % 64)]);
        acc = acc + v;
      }
    }
    for (int off = 8 / 2; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = acc + v;
    }
    if (o < 128 && threadIdx.x % 8 == 0) t2[o] += acc;
  }
  for (int o0 = 0; o0 < 2; o0 += 8) {
    const int o = o0 + threadIdx.x / 32 / 1, part = threadIdx.x / 32 % 1;
    float acc = 0.0f;
    if (o < 2) {
      const int oo = o / (1 * 1), w = (o / 1) % 1, ii = o % 1;
      for (int r = part * 32 + threadIdx.x % 32; r < 32; r += 32) {
        const float v = yr_to_f(t3[(((oo * 32 + w * 32 + r) * 1 + ii) / 32 * 40 + ((oo * 32 + w * 32 + r) * 1 + ii) % 32)]);
        acc = acc + v;
      }
    }
    for (int off = 32 / 2; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, acc, off);
      acc = acc + v;
    }
    if (o < 2 && threadIdx.x % 32 == 0) t5[o] += acc;
  }
  }
  __syncthreads();
  __syncthreads();
  for (int q = threadIdx.x; q < 16; q += 256) {
    const int e = q * 8;
    __align__(16) yr_half v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) yr_store(v + u, ((t2[(e + u)]) / (t5[((((e + u) / 64ll) % 2ll) * 1ll)])));
    *reinterpret_cast<uint4*>(out0 + (0ll + (long long)blockIdx.x * 16384ll + (long long)blockIdx.y * 128ll + (long long)((e / 64) % 2) * 64ll + (long long)((e / 1) % 64) * 1ll)) = *reinterpret_cast<const uint4*>(v);
  }
}
