// AVX-512 VNNI kernels: the AVX2 code with vpdpbusd for the u8 × s8 dot products and 4 × 4 tiles,
// which AVX-512VL's 32 vector registers hold (compiled with -mavx512vnni -mavx512vl ...; called
// only after a CPUID check).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "llm/kernels.h"

namespace yirage::llm {
namespace {

constexpr int kRowTile = 4;
constexpr int kColTile = 4;

#include "llm/kernels_simd.inc"

constexpr KernelTable kAvx512 = simd_kernels("avx512vnni");

}  // namespace

const KernelTable& detail::avx512vnni_kernels() {
  return kAvx512;
}

}  // namespace yirage::llm

#endif  // __x86_64__
