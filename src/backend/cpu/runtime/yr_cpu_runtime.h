// The runtime every generated CPU module includes: storage types, SIMD vectors, the GEMM kernels
// (yr_cpu_gemm.inc, included at the end) and the tile and row kernels the generated code calls
// with constant shapes.
//
// This file is not compiled into YiRage itself. CMake embeds its text in the backend
// (runtime_source.cpp), and the code generator pastes it at the top of each generated source,
// so a module is one self-contained translation unit the system compiler turns into a .so.
//
// SIMD is written once with GCC/Clang vector extensions: YR_VBYTES (set by the code generator
// from the device description's ISA flags) picks 64-byte vectors for AVX-512, 32 for AVX2+FMA, 16
// for NEON/SSE, and the compiler, given the matching -march, emits the ISA's own instructions
// (vfmadd231ps, fmla, ...). Without a vector ISA the same code lowers to scalar operations and
// stays correct. f16 conversions use F16C/AVX-512 instructions where present, else a bit-exact
// software path. Values are computed in f32 and rounded once when stored to f16/bf16.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#ifndef YR_VBYTES
#define YR_VBYTES 16
#endif

namespace yr {

constexpr int VL = YR_VBYTES / 4;  // floats per vector
typedef float vf __attribute__((vector_size(YR_VBYTES)));
typedef int32_t vi __attribute__((vector_size(YR_VBYTES)));
typedef uint32_t vu __attribute__((vector_size(YR_VBYTES)));
typedef uint16_t vh __attribute__((vector_size(YR_VBYTES / 2)));

struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

// ---- scalar conversions (the same rounding as ir/dtype.h) ------------------------------------

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;
  if (absx >= 0x477ff000u) return sign | 0x7c00u;
  if (absx < 0x38800000u) {
    float a;
    std::memcpy(&a, &absx, 4);
    return sign | uint16_t(std::nearbyint(a * 0x1p24f));
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

inline float ld(float v) {
  return v;
}
inline float ld(bf16 v) {
  uint32_t bits = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float ld(f16 v) {
  return f16_to_f32(v.bits);
}
inline float ld(int32_t v) {
  return float(v);
}

inline void st(float* p, float v) {
  *p = v;
}
inline void st(bf16* p, float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    p->bits = uint16_t((x >> 16) | 0x40u);
  else
    p->bits = uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline void st(f16* p, float v) {
  p->bits = f32_to_f16(v);
}

// ---- vectors ---------------------------------------------------------------------------------

inline vf splat(float s) {
  return vf{} + s;
}
// A broadcast straight from memory: on x86 a load-port operation, where broadcasting a register
// would take the shuffle port that 512-bit FMAs also need.
inline vf bcast(const float* p) {
#if YR_VBYTES == 64 && defined(__AVX512F__)
  return (vf)_mm512_set1_ps(*p);
#elif YR_VBYTES == 32 && defined(__AVX__)
  return (vf)_mm256_broadcast_ss(p);
#else
  return splat(*p);
#endif
}
inline vf vld(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline vf vld(const bf16* p) {
  vh h;
  std::memcpy(&h, p, sizeof h);
  vu w = __builtin_convertvector(h, vu) << 16;
  return (vf)w;
}
inline vf vld(const f16* p) {
#if YR_VBYTES == 64 && defined(__AVX512F__)
  return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
#elif YR_VBYTES == 32 && defined(__F16C__)
  return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
#else
  vf v;
  for (int i = 0; i < VL; ++i) v[i] = f16_to_f32(p[i].bits);
  return v;
#endif
}
inline void vst(float* p, vf v) {
  std::memcpy(p, &v, sizeof v);
}
inline void vst(bf16* p, vf v) {
  vu x = (vu)v;
  vu rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  vu quiet = (x >> 16) | 0x40u;
  vu out = ((x & 0x7fffffffu) > 0x7f800000u) ? quiet : rounded;
  vh h = __builtin_convertvector(out, vh);
  std::memcpy(p, &h, sizeof h);
}
inline void vst(f16* p, vf v) {
#if YR_VBYTES == 64 && defined(__AVX512F__)
  _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT));
#elif YR_VBYTES == 32 && defined(__F16C__)
  _mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT));
#else
  for (int i = 0; i < VL; ++i) p[i].bits = f32_to_f16(v[i]);
#endif
}
inline float hsum(vf v) {
  float s = 0;
  for (int i = 0; i < VL; ++i) s += v[i];
  return s;
}
inline vf vmax(vf a, vf b) {
  return (b > a) | (b != b) ? b : a;
}  // a NaN wins, as in the IR
inline float smax(float a, float b) {
  return (b > a || b != b) ? b : a;
}

// exp as ggml's CPU backend computes it (ggml_v_expf, from ARM's optimized routines): n = round(x
// / ln2), b = x - n·ln2 in two fmas, a degree-5 polynomial, then the scaling by 2^n. Under 2 ulp,
// and the same bits as ggml built for the same target, so that a model's SiLU and softmax match
// llama.cpp's. ggml has two forms of the last step: with 64-byte vectors (AVX-512), 1 + p(b)
// rounded and then scaled by 2^n exactly (vscalefps); elsewhere 2^n·p + 2^n in one fma. They differ
// in the last bit now and then, so the form follows YR_VBYTES, scalar and vector alike.
#if YR_VBYTES == 64 && defined(__AVX512F__)
#define YR_EXP_SCALEF 1
#else
#define YR_EXP_SCALEF 0
#endif

// Beyond |n| > 126 the fma form scales in double; past |n| > 192 the result is 0 or infinity; NaN
// stays NaN.
inline float exp_wide(float x, float n, float j) {
  if (x != x) return x;
  if (std::fabs(n) > 192) return n <= 0 ? 0.0f : std::numeric_limits<float>::infinity();
  return float(std::ldexp(1.0 + double(j), int(n)));
}

inline float sexp(float x) {
  const float r = 0x1.8p23f;
  const float n = std::fma(x, 0x1.715476p+0f, r) - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float p = std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                           std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f));
#if YR_EXP_SCALEF
  if (x != x) return x;
  if (std::fabs(n) > 192) return n <= 0 ? 0.0f : std::numeric_limits<float>::infinity();
  return std::ldexp(std::fma(p, u, std::fma(0x1.ffffecp-1f, b, 1.0f)), int(n));
#else
  const float j = std::fma(p, u, 0x1.ffffecp-1f * b);
  if (std::fabs(n) <= 126) {
    const float k = std::ldexp(1.0f, int(n));
    return std::fma(j, k, k);
  }
  return exp_wide(x, n, j);
#endif
}

// a·b + c rounded once. Spelled out, since contraction alone may fuse either product of a·b + c·d.
inline vf vfma(vf a, vf b, vf c) {
#if YR_VBYTES == 64 && defined(__AVX512F__)
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif YR_VBYTES == 32 && defined(__FMA__)
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  for (int i = 0; i < VL; ++i) a[i] = std::fma(a[i], b[i], c[i]);
  return a;
#endif
}

// The same steps on vectors.
inline vf vexp(vf x) {
  const vf r = splat(0x1.8p23f);
  const vf n = vfma(x, splat(0x1.715476p+0f), r) - r;
  const vf b = vfma(-n, splat(0x1.7f7d1cp-20f), vfma(-n, splat(0x1.62e4p-1f), x));
  const vf u = b * b;
  const vf p = vfma(vfma(splat(0x1.0e4020p-7f), b, splat(0x1.573e2ep-5f)), u,
                    vfma(splat(0x1.555e66p-3f), b, splat(0x1.fffdb6p-2f)));
  const vf big = n < 0 ? -n : n;
#if YR_EXP_SCALEF
  vf y = (vf)_mm512_scalef_ps((__m512)vfma(p, u, vfma(splat(0x1.ffffecp-1f), b, splat(1.0f))),
                              (__m512)n);
  bool far = false;
  for (int i = 0; i < VL; ++i) far |= big[i] > 192.0f;
  if (far)
    for (int i = 0; i < VL; ++i)
      if (big[i] > 192.0f) y[i] = n[i] <= 0 ? 0.0f : std::numeric_limits<float>::infinity();
  return y;
#else
  const vf j = vfma(p, u, splat(0x1.ffffecp-1f) * b);
  const vi ni = __builtin_convertvector(n, vi);
  const vf k = (vf)((ni + 127) << 23);
  vf y = vfma(j, k, k);
  bool wide = false;
  for (int i = 0; i < VL; ++i) wide |= !(big[i] <= 126.0f);
  if (wide)
    for (int i = 0; i < VL; ++i)
      if (!(big[i] <= 126.0f)) y[i] = exp_wide(x[i], n[i], j[i]);
  return y;
#endif
}

// ---- elementwise functions, scalar and vector ------------------------------------------------

struct Exp {
  float operator()(float x) const { return sexp(x); }
  vf operator()(vf x) const { return vexp(x); }
};
struct Silu {
  float operator()(float x) const { return x / (1.0f + sexp(-x)); }
  vf operator()(vf x) const { return x / (1.0f + vexp(-x)); }
};
struct Gelu {
  float operator()(float x) const { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
  vf operator()(vf x) const {
    for (int i = 0; i < VL; ++i) x[i] = (*this)(x[i]);
    return x;
  }
};
struct Relu {
  float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
  vf operator()(vf x) const { return x < 0.0f ? splat(0.0f) : x; }
};
struct Sqrt {
  float operator()(float x) const { return std::sqrt(x); }
  vf operator()(vf x) const {
    for (int i = 0; i < VL; ++i) x[i] = std::sqrt(x[i]);
    return x;
  }
};
struct Rsqrt {
  float operator()(float x) const { return 1.0f / std::sqrt(x); }
  vf operator()(vf x) const { return 1.0f / Sqrt()(x); }
};
struct Square {
  float operator()(float x) const { return x * x; }
  vf operator()(vf x) const { return x * x; }
};
struct Neg {
  float operator()(float x) const { return -x; }
  vf operator()(vf x) const { return -x; }
};
struct Recip {
  float operator()(float x) const { return 1.0f / x; }
  vf operator()(vf x) const { return 1.0f / x; }
};
struct MulScalar {
  float s;
  float operator()(float x) const { return x * s; }
  vf operator()(vf x) const { return x * s; }
};

struct Add {
  template <class V>
  V operator()(V a, V b) const {
    return a + b;
  }
};
struct Sub {
  template <class V>
  V operator()(V a, V b) const {
    return a - b;
  }
};
struct Mul {
  template <class V>
  V operator()(V a, V b) const {
    return a * b;
  }
};
struct Div {
  template <class V>
  V operator()(V a, V b) const {
    return a / b;
  }
};
struct Pow {
  float operator()(float a, float b) const { return std::pow(a, b); }
  vf operator()(vf a, vf b) const {
    for (int i = 0; i < VL; ++i) a[i] = std::pow(a[i], b[i]);
    return a;
  }
};

// ---- elementwise loops -----------------------------------------------------------------------

// out[i] = f(x[i]) for n contiguous elements.
template <class F, class TI, class TO>
inline void unary(const F& f, const TI* x, TO* out, int64_t n) {
  int64_t i = 0;
  for (; i + VL <= n; i += VL) vst(out + i, f(vld(x + i)));
  for (; i < n; ++i) st(out + i, f(ld(x[i])));
}

// out (contiguous, dims d[4]) = f(a, b) with per-dim element strides sa, sb (0 = broadcast).
template <class F, class TA, class TB, class TO>
inline void binary4(const F& f, const TA* a, const int64_t* sa, const TB* b, const int64_t* sb,
                    TO* out, const int64_t* d) {
  const int64_t n = d[3];
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        const TA* pa = a + i0 * sa[0] + i1 * sa[1] + i2 * sa[2];
        const TB* pb = b + i0 * sb[0] + i1 * sb[1] + i2 * sb[2];
        TO* po = out + ((i0 * d[1] + i1) * d[2] + i2) * n;
        int64_t j = 0;
        if (sa[3] == 1 && sb[3] == 1) {
          for (; j + VL <= n; j += VL) vst(po + j, f(vld(pa + j), vld(pb + j)));
        } else if (sa[3] == 1 && sb[3] == 0) {
          const vf vb = splat(ld(pb[0]));
          for (; j + VL <= n; j += VL) vst(po + j, f(vld(pa + j), vb));
        } else if (sa[3] == 0 && sb[3] == 1) {
          const vf va = splat(ld(pa[0]));
          for (; j + VL <= n; j += VL) vst(po + j, f(va, vld(pb + j)));
        }
        for (; j < n; ++j) st(po + j, f(ld(pa[j * sa[3]]), ld(pb[j * sb[3]])));
      }
}

// Parallel forms over the leading dims, for kernel-level ops on whole tensors.
template <class F, class TI, class TO>
inline void unary_par(const F& f, const TI* x, TO* out, int64_t n, int nt) {
  const int64_t chunk = 16384;
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk, len = n - begin < chunk ? n - begin : chunk;
    unary(f, x + begin, out + begin, len);
  }
}

template <class F, class TA, class TB, class TO>
inline void binary4_par(const F& f, const TA* a, const int64_t* sa, const TB* b, const int64_t* sb,
                        TO* out, const int64_t* d, int nt) {
  const int64_t rows = d[0] * d[1] * d[2];
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && rows * d[3] > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i0 = r / (d[1] * d[2]), i1 = (r / d[2]) % d[1], i2 = r % d[2];
    const int64_t one[4] = {1, 1, 1, d[3]};
    binary4(f, a + i0 * sa[0] + i1 * sa[1] + i2 * sa[2], sa,
            b + i0 * sb[0] + i1 * sb[1] + i2 * sb[2], sb, out + r * d[3], one);
  }
}

// ---- copies ------------------------------------------------------------------------------------

// Copies a strided box (dims d[4], source strides s[4]) into a contiguous destination, converting
// the element type: iterator loads and shape ops.
template <class TI, class TO>
inline void gather4(const TI* src, const int64_t* s, TO* dst, const int64_t* d) {
  const int64_t n = d[3];
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        const TI* p = src + i0 * s[0] + i1 * s[1] + i2 * s[2];
        TO* o = dst + ((i0 * d[1] + i1) * d[2] + i2) * n;
        if (s[3] == 1) {
          int64_t j = 0;
          for (; j + VL <= n; j += VL) vst(o + j, vld(p + j));
          for (; j < n; ++j) st(o + j, ld(p[j]));
        } else {
          for (int64_t j = 0; j < n; ++j) st(o + j, ld(p[j * s[3]]));
        }
      }
}

// The reverse: a contiguous box into a strided destination (savers).
template <class TI, class TO>
inline void scatter4(const TI* src, TO* dst, const int64_t* s, const int64_t* d) {
  const int64_t n = d[3];
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        const TI* p = src + ((i0 * d[1] + i1) * d[2] + i2) * n;
        TO* o = dst + i0 * s[0] + i1 * s[1] + i2 * s[2];
        int64_t j = 0;
        for (; j + VL <= n; j += VL) vst(o + j, vld(p + j));
        for (; j < n; ++j) st(o + j, ld(p[j]));
      }
}

// Byte-exact strided copy for shape ops on stored tensors (no rounding).
template <class T>
inline void copy4(const T* src, const int64_t* s, T* dst, const int64_t* ds, const int64_t* d,
                  int nt) {
  const int64_t rows = d[0] * d[1] * d[2];
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && rows * d[3] > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i0 = r / (d[1] * d[2]), i1 = (r / d[2]) % d[1], i2 = r % d[2];
    const T* p = src + i0 * s[0] + i1 * s[1] + i2 * s[2];
    T* o = dst + i0 * ds[0] + i1 * ds[1] + i2 * ds[2];
    if (s[3] == 1 && ds[3] == 1)
      std::memcpy(o, p, size_t(d[3]) * sizeof(T));
    else
      for (int64_t j = 0; j < d[3]; ++j) o[j * ds[3]] = p[j * s[3]];
  }
}

// ---- reductions and norms (x viewed as [outer, extent, inner]) ------------------------------

enum class Red { sum, mean, max };

template <class TI, class TO>
inline void reduce(Red fn, const TI* x, TO* out, int64_t outer, int64_t extent, int64_t inner,
                   int nt) {
  const float init = fn == Red::max ? -std::numeric_limits<float>::infinity() : 0.0f;
  const float scale = fn == Red::mean ? 1.0f / float(extent) : 1.0f;
#pragma omp parallel for num_threads(nt) \
    schedule(static) if (nt > 1 && outer * extent * inner > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    if (inner == 1) {
      const TI* p = x + o * extent;
      vf acc = splat(init);
      int64_t k = 0;
      for (; k + VL <= extent; k += VL)
        acc = fn == Red::max ? vmax(acc, vld(p + k)) : acc + vld(p + k);
      float r = init;
      if (fn == Red::max)
        for (int i = 0; i < VL; ++i) r = smax(r, acc[i]);
      else
        r = hsum(acc);
      for (; k < extent; ++k) r = fn == Red::max ? smax(r, ld(p[k])) : r + ld(p[k]);
      st(out + o, r * scale);
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        float r = init;
        for (int64_t k = 0; k < extent; ++k) {
          const float v = ld(x[(o * extent + k) * inner + i]);
          r = fn == Red::max ? smax(r, v) : r + v;
        }
        st(out + o * inner + i, r * scale);
      }
    }
  }
}

// Sums runs of extent/width consecutive elements along the middle axis.
template <class TI, class TO>
inline void reduce_to_width(const TI* x, TO* out, int64_t outer, int64_t extent, int64_t inner,
                            int64_t width) {
  const int64_t run = extent / width;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t w = 0; w < width; ++w)
      for (int64_t i = 0; i < inner; ++i) {
        float s = 0.0f;
        for (int64_t k = 0; k < run; ++k) s += ld(x[(o * extent + w * run + k) * inner + i]);
        st(out + (o * width + w) * inner + i, s);
      }
}

template <class T>
inline float sum_squares(const T* p, int64_t n, float center) {
  vf acc0 = splat(0), acc1 = splat(0), c = splat(center);
  int64_t k = 0;
  for (; k + 2 * VL <= n; k += 2 * VL) {
    vf a = vld(p + k) - c, b = vld(p + k + VL) - c;
    acc0 += a * a;
    acc1 += b * b;
  }
  float s = hsum(acc0 + acc1);
  for (; k < n; ++k) s += (ld(p[k]) - center) * (ld(p[k]) - center);
  return s;
}

// The mean of squares of an rms_norm row: squares in float, their sum in double, as ggml computes
// it (a model's norms then match llama.cpp's bits) and as the reference does.
template <class T>
inline float mean_square(const T* p, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const float a = ld(p[k]), b = ld(p[k + 1]), c = ld(p[k + 2]), d = ld(p[k + 3]);
    s0 += double(a * a);
    s1 += double(b * b);
    s2 += double(c * c);
    s3 += double(d * d);
  }
  for (; k < n; ++k) s0 += double(ld(p[k]) * ld(p[k]));
  return float(((s0 + s1) + (s2 + s3)) / double(n));
}

template <class T>
inline float sum_row(const T* p, int64_t n) {
  vf acc = splat(0);
  int64_t k = 0;
  for (; k + VL <= n; k += VL) acc += vld(p + k);
  float s = hsum(acc);
  for (; k < n; ++k) s += ld(p[k]);
  return s;
}

// y = (x - mean) / sqrt(var + eps) * w + b per row of `group` elements; rms_norm passes
// centered = false (no mean, var = mean of squares). w and b may be null.
template <class TI, class TW, class TO>
inline void norm_rows(const TI* x, const TW* w, const TW* b, TO* out, int64_t rows, int64_t group,
                      float eps, bool centered, int nt) {
#pragma omp parallel for num_threads(nt) \
    schedule(static) if (nt > 1 && rows * group > 32768 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const TI* p = x + r * group;
    TO* o = out + r * group;
    const float mean = centered ? sum_row(p, group) / float(group) : 0.0f;
    const float inv = 1.0f / std::sqrt((centered ? sum_squares(p, group, mean) / float(group)
                                                 : mean_square(p, group)) +
                                       eps);
    const vf vm = splat(mean), vinv = splat(inv);
    int64_t j = 0;
    for (; j + VL <= group; j += VL) {
      vf y = (vld(p + j) - vm) * vinv;
      if (w) y *= vld(w + j);
      if (b) y += vld(b + j);
      vst(o + j, y);
    }
    for (; j < group; ++j) {
      float y = (ld(p[j]) - mean) * inv;
      if (w) y *= ld(w[j]);
      if (b) y += ld(b[j]);
      st(o + j, y);
    }
  }
}

template <class TI, class TO>
inline void softmax(const TI* x, TO* out, int64_t outer, int64_t extent, int64_t inner,
                    char* scratch, size_t stride, int nt) {
  // Each thread keeps one row of exps at the start of its scratch slice.
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && outer * extent > 16384)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      float* e = (float*)(scratch + size_t(omp_get_thread_num()) * stride);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < extent; ++k) m = smax(m, ld(x[(o * extent + k) * inner + i]));
      for (int64_t k = 0; k < extent; ++k) e[k] = ld(x[(o * extent + k) * inner + i]) - m;
      unary(Exp(), e, e, extent);
      const float inv = 1.0f / sum_row(e, extent);
      if (inner == 1) {
        int64_t k = 0;
        for (; k + VL <= extent; k += VL) vst(out + o * extent + k, vld(e + k) * inv);
        for (; k < extent; ++k) st(out + o * extent + k, e[k] * inv);
      } else {
        for (int64_t k = 0; k < extent; ++k) st(out + (o * extent + k) * inner + i, e[k] * inv);
      }
    }
  }
}

// ---- accumulators of fused kernels ----------------------------------------------------------

inline void acc_fold(bool is_max, float* acc, const float* t, int64_t n) {
  int64_t j = 0;
  if (is_max) {
    for (; j + VL <= n; j += VL) vst(acc + j, vmax(vld(acc + j), vld(t + j)));
    for (; j < n; ++j) acc[j] = smax(acc[j], t[j]);
  } else {
    for (; j + VL <= n; j += VL) vst(acc + j, vld(acc + j) + vld(t + j));
    for (; j < n; ++j) acc[j] += t[j];
  }
}

// The online-softmax rescale: run holds the running max M of m (mcount floats) followed by two
// rows of scratch; acc = acc * exp(M_old - M_new) + v * exp(m - M_new), with m broadcast to v's
// dims d through strides sm. A -inf max (nothing seen yet) contributes nothing.
inline void rescaled_fold(float* acc, float* run, const float* v, const float* m, const int64_t* sm,
                          const int64_t* d, int64_t mcount) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* scale_old = run + mcount;
  float* scale_new = run + 2 * mcount;
  for (int64_t k = 0; k < mcount; ++k) {
    const float next = smax(run[k], m[k]);
    scale_old[k] = run[k] == neg_inf ? 0.0f : std::exp(run[k] - next);
    scale_new[k] = m[k] == neg_inf ? 0.0f : std::exp(m[k] - next);
    run[k] = next;
  }
  int64_t j = 0;
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        const int64_t base = i0 * sm[0] + i1 * sm[1] + i2 * sm[2];
        for (int64_t i3 = 0; i3 < d[3]; ++i3, ++j) {
          const int64_t k = base + i3 * sm[3];
          acc[j] = acc[j] * scale_old[k] + v[j] * scale_new[k];
        }
      }
}

// ---- GEMM: C[M,N] (f32, ldc) = or += A[M,K] (lda) * B[K,N] (ldb) ----------------------------
#include "yr_cpu_gemm.inc"

}  // namespace yr
