// Matrix kernels on quantized weights, the inner loops of the forward pass.
//
// Weights stay in their GGUF blocks. As in llama.cpp, activations are quantized per 32-element
// block to 8-bit integers (Q8_1-style for Q4_1 weights, Q8_0-style for Q4_0 and Q8_0 weights), so
// that a block's dot product is an exact integer sum scaled once; F32, F16 and BF16 weights take
// f32 activations. Each kernel computes a tile of y = W·xᵀ for a range of weight rows and
// activation rows. One table of kernels exists per instruction set (scalar, AVX2+FMA, AVX-512
// VNNI), chosen once from CPUID.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "llm/quant.h"

namespace yirage::llm {

inline constexpr int kQ8Block = 32;

// Activation rows in the form a weight type's kernel reads.
struct Activations {
  int k = 0;  // row length (a multiple of 32 for the integer kinds)
  int rows = 0;
  // Quantized rows: qs[row * k + i]; per 32-block scale d and d·Σq (the Q8_1 "s").
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  // Plain rows for F32/F16 weights: f[row * k + i].
  const float* f = nullptr;
};

// Keys or values of one attention head, in blocks of `block_rows` positions: row j lives at
// base + blocks[j / block_rows] · block_stride + (j % block_rows) · row_stride floats. A paged
// cache (paged_kv.h) passes a sequence's block table, so attention reads through it in place; a
// contiguous cache is a single block (contiguous_rows).
struct KvRows {
  const float* base = nullptr;
  const int32_t* blocks = nullptr;
  int block_rows = 0;
  size_t block_stride = 0;
  size_t row_stride = 0;
};

// Rows `stride` floats apart from `base`, as one block.
KvRows contiguous_rows(const float* base, size_t stride);

// y[c * ldy + r] = dot(weight row r, activation row c) for r < nr, c < nc. `w` points at weight
// row 0, rows `w_stride` bytes apart; `x_row` is the first activation row used.
using GemmFn = void (*)(int k, const std::byte* w, size_t w_stride, int nr, const Activations& x,
                        int x_row, int nc, float* y, size_t ldy);

struct KernelTable {
  std::string_view isa;
  GemmFn q4_1 = nullptr;  // weights Q4_1, activations Q8_1
  GemmFn q8_0 = nullptr;  // weights Q8_0, activations Q8_0
  GemmFn q4_0 = nullptr;  // weights Q4_0, activations Q8_0
  GemmFn f32 = nullptr;   // weights F32, activations f32
  GemmFn f16 = nullptr;   // weights F16, activations f32
  GemmFn bf16 = nullptr;  // weights BF16, activations f32
  // Attention over f32 rows read through `KvRows`: out[j] = dot(q, k_j) for j < n, and
  // out += Σ_j p[j] · v_j, summed in the same order however the rows are split into blocks.
  // `one_query`: the step evaluates a single position (decoding), for which llama.cpp sums in
  // another order than for a prompt (kernels_simd.inc).
  void (*attn_scores)(const float* q, const KvRows& k, int n, int dim, bool one_query,
                      float* out) = nullptr;
  void (*attn_accumulate)(const float* p, const KvRows& v, int n, int dim, bool one_query,
                          float* out) = nullptr;
  // Softmax numerators in place, x[i] = exp(x[i] − max), returning their sum, and
  // g[i] = silu(g[i]) · u[i]: with ggml's exp and, for the sum, ggml's order, as llama.cpp built
  // for the same instruction set computes them (see ggml_expf and kernels_simd.inc).
  double (*softmax_exp)(float* x, int n, float max) = nullptr;
  void (*swiglu)(float* g, const float* u, int n) = nullptr;
  // x[i] rounded through f16 in place, as ggml stores f16 values (keys, values, scores).
  void (*round_f16)(float* x, size_t n) = nullptr;
  // `blocks` blocks of 32 floats quantized as quantize_activations says (s: the Q8_1 sums, or
  // null for Q8_0).
  void (*quantize_q8)(const float* x, size_t blocks, int8_t* qs, float* d, float* s) = nullptr;
};

// exp as ggml's CPU backend computes it for softmax and SiLU (ggml_v_expf).
float ggml_expf(float x);

// The plain C++ kernels, valid everywhere; the oracle for the SIMD ones.
const KernelTable& scalar_kernels();
// Every table this CPU can run, scalar first.
std::vector<const KernelTable*> available_kernels();
// The fastest table for this CPU; YIRAGE_LLM_ISA=scalar|avx2|avx512vnni picks another (an error
// if this CPU cannot run it).
const KernelTable& best_kernels();

// How activations must be prepared for weights of `type`.
enum class ActivationKind { Q8_0, Q8_1, F32 };
// Fails for weight types without a kernel, naming `what`.
ActivationKind activation_kind(GgmlType type, std::string_view what);
GemmFn gemm_for(const KernelTable& table, GgmlType type);

// Quantizes `rows` rows of length k (a multiple of 32) from x (row stride k) the way ggml's
// quantize_row_q8_0 / quantize_row_q8_1 do: d = max|x| / 127, q = round-to-even(x · 127/max|x|),
// and d and s rounded through f16 as ggml stores them.
void quantize_activations(ActivationKind kind, const float* x, int rows, int k, Activations& out,
                          const KernelTable& kernels = scalar_kernels());

namespace detail {
// Per-ISA tables, defined in kernels_avx2.cpp / kernels_avx512.cpp.
const KernelTable& avx2_kernels();
const KernelTable& avx512vnni_kernels();
}  // namespace detail

}  // namespace yirage::llm
