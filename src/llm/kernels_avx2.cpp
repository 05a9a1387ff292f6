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

constexpr KernelTable kAvx2 = simd_kernels("avx2");

}  // namespace

const KernelTable& detail::avx2_kernels() {
  return kAvx2;
}

}  // namespace yirage::llm

#endif  // __x86_64__
