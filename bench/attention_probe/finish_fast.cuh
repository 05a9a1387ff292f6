// 2 rows a block, 256 threads, no shared memory: thread t takes row t>>7, 8 columns ((t>>4)&7),
// splits (t&15) and (t&15)+16; the 16 lanes of one column group sum by shuffles.
extern "C" __global__ void __launch_bounds__(256) finish_fast(const yr_half* __restrict__ in0, const yr_half* __restrict__ in1, yr_half* __restrict__ out0) {
  const int t = threadIdx.x, r = t >> 7, cg = (t >> 4) & 7, sg = t & 15;
  const long long row = (long long)blockIdx.x * 256 + blockIdx.y * 2 + r;
  const yr_half* p = in0 + row * 2048 + cg * 8;
  const uint4 a = *reinterpret_cast<const uint4*>(p + sg * 64);
  const uint4 b = *reinterpret_cast<const uint4*>(p + (sg + 16) * 64);
  float l = yr_to_f(in1[row * 32 + sg]) + yr_to_f(in1[row * 32 + sg + 16]);
  float f[8];
  const yr_half* ha = reinterpret_cast<const yr_half*>(&a);
  const yr_half* hb = reinterpret_cast<const yr_half*>(&b);
#pragma unroll
  for (int u = 0; u < 8; ++u) f[u] = yr_to_f(ha[u]) + yr_to_f(hb[u]);
#pragma unroll
  for (int off = 1; off < 16; off <<= 1) {
    l += __shfl_xor_sync(0xffffffffu, l, off);
#pragma unroll
    for (int u = 0; u < 8; ++u) f[u] += __shfl_xor_sync(0xffffffffu, f[u], off);
  }
  if (sg == 0) {
    __align__(16) yr_half v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) yr_store(v + u, f[u] / l);
    *reinterpret_cast<uint4*>(out0 + row * 64 + cg * 8) = *reinterpret_cast<const uint4*>(v);
  }
}
extern "C" __global__ void __launch_bounds__(256) empty_kernel(yr_half* out) {
  if (threadIdx.x == 999) out[0] = yr_half{};
}
