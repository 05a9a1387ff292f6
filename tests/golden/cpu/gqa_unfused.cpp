extern "C" size_t yr_workspace_bytes(int nt) {
  return size_t(12416) + size_t(nt) * (size_t(0) + size_t(yr::kPackFloats) * 4);
}
extern "C" int yr_run(void* const* in, void* const* out, char* ws, int nt, char* err, size_t errlen) {
  (void)in; (void)out; (void)err; (void)errlen; (void)nt;
  char* thr = ws + 12416;
  const size_t thr_stride = size_t(0) + size_t(yr::kPackFloats) * 4;
  (void)thr; (void)thr_stride;
  // node 0 'Q': input
  // node 1 'K': input
  // node 2 'V': input
  // node 3 'scores': matmul
  { static const int64_t ao[] = {0, 128}, bo[] = {0, 256};
    yr::matmul(2, ao, bo, 16, 32, 8, ((float*)in[0]), ((float*)in[1]), ((float*)(ws + 0)), ((float*)(ws + 0)), thr, thr_stride, nt); }
  // node 4 'exp_scores': exp
  yr::unary_par(yr::Exp(), ((float*)(ws + 0)), ((float*)(ws + 4096)), 1024, nt);
  // node 5 'row_sum': sum
  yr::reduce(yr::Red::sum, ((float*)(ws + 4096)), ((float*)(ws + 8192)), 32, 32, 1, nt);
  // node 6 'probs': div
  { static const int64_t sa[] = {0, 512, 32, 1}, sb[] = {0, 16, 1, 0}, d[] = {1, 2, 16, 32};
    yr::binary4_par(yr::Div(), ((float*)(ws + 4096)), sa, ((float*)(ws + 8192)), sb, ((float*)(ws + 8320)), d, nt); }
  // node 7 'out': matmul
  { static const int64_t ao[] = {0, 512}, bo[] = {0, 256};
    yr::matmul(2, ao, bo, 16, 8, 32, ((float*)(ws + 8320)), ((float*)in[2]), ((float*)out[0]), ((float*)out[0]), thr, thr_stride, nt); }
  return 0;
}
