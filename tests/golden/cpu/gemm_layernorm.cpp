static void yr_fused_0(const void* const* ops, void* const* outs, char* scratch, size_t stride, int nt) {
  (void)ops; (void)outs;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && 2 > 1)
  for (int64_t blk = 0; blk < 2; ++blk) {
    const int64_t bx = blk % 2, by = (blk / 2) % 1, bz = blk / (2 * 1);
    (void)bx; (void)by; (void)bz;
    char* slice = scratch + size_t(omp_get_thread_num()) * stride;
    float* pack = (float*)slice;
    float* tiles = (float*)(slice + size_t(yr::kPackFloats) * 4);
    (void)pack; (void)tiles;
    std::fill_n((tiles + 0), 256, 0.0f);
    for (int64_t it = 0; it < 2; ++it) {
      const float* it0 = ((float*)ops[0]) + (0 + bx * 256 + it * 16);
      const float* it1 = ((float*)ops[1]) + (0 + it * 512);
      { static const int64_t ao[] = {0}, bo[] = {0};
        for (int64_t q = 0; q < 1; ++q) yr::gemm(8, 32, 16, it0 + ao[q], 32, it1 + bo[q], 32, (tiles + 0) + q * 256, 32, true, pack); }
    }
    yr::norm_rows((tiles + 0), (const float*)nullptr, (const float*)nullptr, (tiles + 256), 8, 32, 1.000000000e-05f, true, 1);
    { static const int64_t s[] = {0, 0, 32, 1}, d[] = {1, 1, 8, 32};
      yr::scatter4((tiles + 256), (float*)outs[0] + (0 + bx * 256), s, d); }
  }
}
extern "C" size_t yr_workspace_bytes(int nt) {
  return size_t(0) + size_t(nt) * (size_t(2048) + size_t(yr::kPackFloats) * 4);
}
extern "C" int yr_run(void* const* in, void* const* out, char* ws, int nt, char* err, size_t errlen) {
  (void)in; (void)out; (void)err; (void)errlen; (void)nt;
  char* thr = ws + 0;
  const size_t thr_stride = size_t(2048) + size_t(yr::kPackFloats) * 4;
  (void)thr; (void)thr_stride;
  // node 0 'X': input
  // node 1 'W': input
  // node 2 'fused_proj': fused
  { const void* o[] = {(const void*)((float*)in[0]), (const void*)((float*)in[1]), }; void* w[] = {(void*)((float*)out[0]), }; yr_fused_0(o, w, thr, thr_stride, nt); }
  return 0;
}
