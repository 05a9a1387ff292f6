extern "C" __global__ void __launch_bounds__(256) parts_loadonly(const yr_half* __restrict__ in0, const yr_half* __restrict__ in1, const yr_half* __restrict__ in2, yr_half* __restrict__ out0, yr_half* __restrict__ out1) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + 88576);
  yr_half* const t0_base = reinterpret_cast<yr_half*>(smem + 0);
  yr_half* const t1_base = reinterpret_cast<yr_half*>(smem + 18432);
  yr_half* const t2_base = reinterpret_cast<yr_half*>(smem + 36864);
  float o5[8][4];
#pragma unroll
  for (int q = 0; q < 8; ++q) o5[q][0] = o5[q][1] = o5[q][2] = o5[q][3] = 0.0f;
  float l5[2] = {0.0f, 0.0f};
  float* const t6 = reinterpret_cast<float*>(smem + 55296);
  float* const t9 = reinterpret_cast<float*>(smem + 88064);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16(t0_base + ((e) / 64 * 72 + (e) % 64), in0 + (0ll + (long long)blockIdx.x * 16384ll + (long long)blockIdx.y * 8192ll + (long long)((e / 64) % 128) * 64ll + (long long)((e / 1) % 64) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16((t1_base + (0) * 4608) + ((e) / 64 * 72 + (e) % 64), in1 + (0ll + (long long)blockIdx.x * 262144ll + (long long)blockIdx.z * 128ll + (long long)(0) * 64ll + (long long)((e / 64) % 64) * 4096ll + (long long)((e / 1) % 64) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16((t2_base + (0) * 4608) + ((e) / 64 * 72 + (e) % 64), in2 + (0ll + (long long)blockIdx.x * 262144ll + (long long)blockIdx.z * 8192ll + (long long)(0) * 4096ll + (long long)((e / 64) % 64) * 64ll + (long long)((e / 1) % 64) * 1ll));
    }
  yr_cp_commit();
  for (int it = 0; it < 2; ++it) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (it + 1 < 2) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16((t1_base + ((it + 1) % 2) * 4608) + ((e) / 64 * 72 + (e) % 64), in1 + (0ll + (long long)blockIdx.x * 262144ll + (long long)blockIdx.z * 128ll + (long long)(it + 1) * 64ll + (long long)((e / 64) % 64) * 4096ll + (long long)((e / 1) % 64) * 1ll));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = threadIdx.x + j * 256, e = q * 8;
      yr_cp_async16((t2_base + ((it + 1) % 2) * 4608) + ((e) / 64 * 72 + (e) % 64), in2 + (0ll + (long long)blockIdx.x * 262144ll + (long long)blockIdx.z * 8192ll + (long long)(it + 1) * 4096ll + (long long)((e / 64) % 64) * 64ll + (long long)((e / 1) % 64) * 1ll));
    }
    }
    yr_cp_commit();
    const yr_half* const t0 = t0_base;
    const yr_half* const t1 = t1_base + (it % 2) * 4608;
    const yr_half* const t2 = t2_base + (it % 2) * 4608;
  }
}
