// AVX2 + FMA + F16C kernels (compiled with those -m flags; called only after a CPUID check).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "llm/kernels.h"

namespace yirage::llm {
namespace {

// 4 × 2 tiles: 8 accumulators, 4 unpacked weight blocks and the operands fit AVX2's 16
// registers.
constexpr int kRowTile = 4;
constexpr int kColTile = 2;

#include "llm/kernels_simd.inc"

const KernelTable kAvx2{"avx2",
                        gemm_quantized<kQ4_1>,
                        gemm_quantized<kQ8_0>,
                        gemm_quantized<kQ4_0>,
                        gemm_float<GgmlType::F32>,
                        gemm_float<GgmlType::F16>,
                        gemm_float<GgmlType::BF16>,
                        attn_scores,
                        attn_accumulate,
                        softmax_exp,
                        swiglu,
                        round_f16,
                        quantize_q8};

}  // namespace

const KernelTable& detail::avx2_kernels() {
  return kAvx2;
}

}  // namespace yirage::llm

#endif  // __x86_64__
