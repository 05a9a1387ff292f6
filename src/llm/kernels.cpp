#include "llm/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "ir/quant.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rounds through f16, as ggml does when it stores a block scale.
float round_f16(float x) {
  return f16_to_f32(f32_to_f16(x));
}

// The reference arithmetic of ir/quant.h, one weight row at a time.
template <ir::QuantFormat Format>
void scalar_quantized(int k, const std::byte* w, size_t w_stride, int nr, const Activations& x,
                      int x_row, int nc, float* y, size_t ldy) {
  const int nb = k / kQ8Block;
  for (int c = 0; c < nc; ++c) {
    const size_t row = static_cast<size_t>(x_row + c);
    const float* xs = x.s.empty() ? nullptr : x.s.data() + row * nb;
    for (int r = 0; r < nr; ++r)
      y[c * ldy + r] = ir::quant_row_dot(Format, w + r * w_stride, nb, x.qs.data() + row * k,
                                         x.d.data() + row * nb, xs);
  }
}

void scalar_f32(int k, const std::byte* w, size_t w_stride, int nr, const Activations& x, int x_row,
                int nc, float* y, size_t ldy) {
  for (int c = 0; c < nc; ++c) {
    const float* xf = x.f + static_cast<size_t>(x_row + c) * k;
    for (int r = 0; r < nr; ++r) {
      const auto* row = reinterpret_cast<const float*>(w + r * w_stride);
      float sum = 0;
      for (int i = 0; i < k; ++i) sum += row[i] * xf[i];
      y[c * ldy + r] = sum;
    }
  }
}

// 16-bit float weights, F16 or BF16 as `widen` decodes them.
template <float (*widen)(uint16_t)>
void scalar_half(int k, const std::byte* w, size_t w_stride, int nr, const Activations& x,
                 int x_row, int nc, float* y, size_t ldy) {
  for (int c = 0; c < nc; ++c) {
    const float* xf = x.f + static_cast<size_t>(x_row + c) * k;
    for (int r = 0; r < nr; ++r) {
      const std::byte* row = w + r * w_stride;
      float sum = 0;
      for (int i = 0; i < k; ++i) sum += widen(load_u16(row + 2 * i)) * xf[i];
      y[c * ldy + r] = sum;
    }
  }
}

// Row j of `rows`, by division: the scalar kernels are the plain statement of what the SIMD ones
// compute walking block by block.
const float* kv_row(const KvRows& rows, int j) {
  return rows.base + static_cast<size_t>(rows.blocks[j / rows.block_rows]) * rows.block_stride +
         static_cast<size_t>(j % rows.block_rows) * rows.row_stride;
}

void scalar_scores(const float* q, const KvRows& k, int n, int dim, bool, float* out) {
  for (int j = 0; j < n; ++j) {
    const float* row = kv_row(k, j);
    float sum = 0;
    for (int i = 0; i < dim; ++i) sum += q[i] * row[i];
    out[j] = sum;
  }
}

void scalar_accumulate(const float* p, const KvRows& v, int n, int dim, bool, float* out) {
  for (int j = 0; j < n; ++j) {
    const float* row = kv_row(v, j);
    for (int i = 0; i < dim; ++i) out[i] += p[j] * row[i];
  }
}

}  // namespace

KvRows contiguous_rows(const float* base, size_t stride) {
  static constexpr int32_t kOnlyBlock[1] = {0};
  return {base, kOnlyBlock, std::numeric_limits<int>::max(), 0, stride};
}

// exp as ggml's CPU backend computes it for softmax and SiLU (ggml_v_expf in its AVX2 build, after
// ARM's optimized routine): a polynomial on the reduced argument b, then 2^n · (1 + j) in one
// fused multiply-add. glibc's expf differs from it in the last bit now and then, and SmolLM2's
// outlier activations amplify one bit into a visible logit difference, so we use the same steps.
float ggml_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (std::fabs(n) <= 126) {
    const float k = std::ldexp(1.0f, static_cast<int>(n));
    return std::fma(j, k, k);
  }
  // Results near or past f32's range (|x| > 87): only their order of magnitude matters here.
  if (std::fabs(n) > 192) return n <= 0 ? 0.0f : INFINITY;
  return static_cast<float>(std::ldexp(1.0 + j, static_cast<int>(n)));
}

namespace {

// ggml's AVX2 softmax sums the numerators 8 at a time: each group of 8 (zero-padded) is reduced in
// float, halves then pairs, then added to a double.
float reduce8(const float* v) {
  float t[4];
  for (int i = 0; i < 4; ++i) t[i] = v[i + 4] + v[i];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

double scalar_softmax_exp(float* x, int n, float max) {
  double sum = 0;
  for (int i = 0; i < n; i += 8) {
    float group[8] = {};
    for (int j = 0; j < 8 && i + j < n; ++j) group[j] = x[i + j] = ggml_expf(x[i + j] - max);
    sum += reduce8(group);
  }
  return sum;
}

void scalar_swiglu(float* g, const float* u, int n) {
  for (int i = 0; i < n; ++i) g[i] = g[i] / (1.0f + ggml_expf(-g[i])) * u[i];
}

void scalar_round_f16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = round_f16(x[i]);
}

const KernelTable kScalar{"scalar",
                          scalar_quantized<ir::QuantFormat::q4_1>,
                          scalar_quantized<ir::QuantFormat::q8_0>,
                          scalar_quantized<ir::QuantFormat::q4_0>,
                          scalar_f32,
                          scalar_half<f16_to_f32>,
                          scalar_half<bf16_to_f32>,
                          scalar_scores,
                          scalar_accumulate,
                          scalar_softmax_exp,
                          scalar_swiglu,
                          scalar_round_f16,
                          ir::quantize_q8_blocks};

// F16C is read from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know it.
bool cpu_has_f16c() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1u);
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
  return false;
#endif
}

bool cpu_has_avx512vnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

}  // namespace

const KernelTable& scalar_kernels() {
  return kScalar;
}

std::vector<const KernelTable*> available_kernels() {
  std::vector<const KernelTable*> tables{&kScalar};
#if defined(__x86_64__)
  if (cpu_has_avx2()) tables.push_back(&detail::avx2_kernels());
  if (cpu_has_avx512vnni()) tables.push_back(&detail::avx512vnni_kernels());
#endif
  return tables;
}

const KernelTable& best_kernels() {
  static const KernelTable* best = [] {
    std::vector<const KernelTable*> tables = available_kernels();
    const char* forced = std::getenv("YIRAGE_LLM_ISA");
    if (forced == nullptr || *forced == '\0') return tables.back();
    for (const KernelTable* t : tables)
      if (t->isa == forced) return t;
    fail("YIRAGE_LLM_ISA={}: this CPU cannot run it (available: scalar{}{})", forced,
         tables.size() > 1 ? ", avx2" : "", tables.size() > 2 ? ", avx512vnni" : "");
  }();
  return *best;
}

ActivationKind activation_kind(GgmlType type, std::string_view what) {
  switch (type) {
    case GgmlType::Q4_1: return ActivationKind::Q8_1;
    case GgmlType::Q4_0:
    case GgmlType::Q8_0: return ActivationKind::Q8_0;
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return ActivationKind::F32;
    default:
      fail(
          "{}: no matmul kernel for weights of type {} (supported: F32, F16, BF16, Q4_0, Q4_1, "
          "Q8_0)",
          what, ggml_type_name(type));
  }
}

GemmFn gemm_for(const KernelTable& table, GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1: return table.q4_1;
    case GgmlType::Q8_0: return table.q8_0;
    case GgmlType::Q4_0: return table.q4_0;
    case GgmlType::F32: return table.f32;
    case GgmlType::F16: return table.f16;
    case GgmlType::BF16: return table.bf16;
    default: fail("no matmul kernel for weights of type {}", ggml_type_name(type));
  }
}

void quantize_activations(ActivationKind kind, const float* x, int rows, int k, Activations& out,
                          const KernelTable& kernels) {
  out.k = k;
  out.rows = rows;
  if (kind == ActivationKind::F32) {
    out.f = x;
    return;
  }
  if (k % kQ8Block != 0) fail("quantize_activations: row length {} is not a multiple of 32", k);
  const size_t nb = static_cast<size_t>(k / kQ8Block);
  out.qs.resize(static_cast<size_t>(rows) * k);
  out.d.resize(rows * nb);
  // Q8_1's sums are all written by the kernel; Q8_0 has none, and its s stays zero.
  const bool sums = kind == ActivationKind::Q8_1;
  if (sums)
    out.s.resize(rows * nb);
  else
    out.s.assign(rows * nb, 0.0f);
  kernels.quantize_q8(x, rows * nb, out.qs.data(), out.d.data(), sums ? out.s.data() : nullptr);
}

}  // namespace yirage::llm
