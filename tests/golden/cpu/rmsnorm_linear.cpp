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
    std::fill_n((tiles + 432), 4, 0.0f);
    std::fill_n((tiles + 448), 96, 0.0f);
    for (int64_t it = 0; it < 2; ++it) {
      { static const int64_t s[] = {0, 0, 64, 1}, d[] = {1, 1, 4, 32};
        yr::gather4(((float*)ops[0]) + (0 + it * 32), s, (tiles + 0), d); }
      { static const int64_t s[] = {0, 0, 0, 1}, d[] = {1, 1, 1, 32};
        yr::gather4(((float*)ops[1]) + (0 + it * 32), s, (tiles + 128), d); }
      const float* it2 = ((float*)ops[2]) + (0 + bx * 24 + it * 1536);
      yr::unary(yr::Square(), (tiles + 0), (tiles + 160), 128);
      yr::reduce(yr::Red::mean, (tiles + 160), (tiles + 288), 4, 32, 1, 1);
      { static const int64_t sa[] = {0, 0, 32, 1}, sb[] = {0, 0, 0, 1}, d[] = {1, 1, 4, 32};
        yr::binary4(yr::Mul(), (tiles + 0), sa, (tiles + 128), sb, (tiles + 304), d); }
      { static const int64_t ao[] = {0}, bo[] = {0};
        for (int64_t q = 0; q < 1; ++q) yr::gemm(4, 24, 32, (tiles + 304) + ao[q], 32, it2 + bo[q], 48, (tiles + 448) + q * 96, 24, true, pack); }
      yr::acc_fold(false, (tiles + 432), (tiles + 288), 4);
    }
    for (int64_t j = 0; j < 4; ++j) (tiles + 432)[j] = std::sqrt((tiles + 432)[j] / 2.0f + 1.000000000e-06f);
    { static const int64_t sa[] = {0, 0, 24, 1}, sb[] = {0, 0, 1, 0}, d[] = {1, 1, 4, 24};
      yr::binary4(yr::Div(), (tiles + 448), sa, (tiles + 432), sb, (tiles + 544), d); }
    { static const int64_t s[] = {0, 0, 48, 1}, d[] = {1, 1, 4, 24};
      yr::scatter4((tiles + 544), (float*)outs[0] + (0 + bx * 24), s, d); }
  }
}
extern "C" size_t yr_workspace_bytes(int nt) {
  return size_t(0) + size_t(nt) * (size_t(2560) + size_t(yr::kPackFloats) * 4);
}
extern "C" int yr_run(void* const* in, void* const* out, char* ws, int nt, char* err, size_t errlen) {
  (void)in; (void)out; (void)err; (void)errlen; (void)nt;
  char* thr = ws + 0;
  const size_t thr_stride = size_t(2560) + size_t(yr::kPackFloats) * 4;
  (void)thr; (void)thr_stride;
  // node 0 'X': input
  // node 1 'G': input
  // node 2 'W': input
  // node 3 'fused_normed': fused
  { const void* o[] = {(const void*)((float*)in[0]), (const void*)((float*)in[1]), (const void*)((float*)in[2]), }; void* w[] = {(void*)((float*)out[0]), }; yr_fused_0(o, w, thr, thr_stride, nt); }
  return 0;
}
