// Quantized weights in GGUF block layouts: what a quant_matmul reads, and ggml's arithmetic on it.
//
// A quant_matmul's weight is a u8 tensor [N, K/32 · block bytes]: row n holds the K/32 blocks of
// output feature n exactly as a GGUF file stores them, so a model's weights are used in place.
// The product is defined as ggml's CPU backend computes it, since llama.cpp is what users compare
// a model's answers with: each 32-element block of the activations is quantized to int8 (ggml's
// Q8_1 for q4_1 weights, Q8_0 for q8_0 weights), each block's dot product is an exact integer sum
// scaled once, and the blocks of a row add up in float. These scalar functions are the reference
// (verify/) and the oracle of the SIMD kernels (backend/cpu's runtime, llm/). q4_0 and q8_0
// weights read Q8_0 activations, q4_1 weights Q8_1; f16 and bf16 weights, the float activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace yirage::ir {

enum class QuantFormat : uint8_t {
  q4_1,  // {f16 d; f16 m; u8 qs[16]}: element j is (qs[j] & 15)·d + m, element j+16 (qs[j] >> 4)
  q8_0,  // {f16 d; i8 qs[32]}: element j is qs[j]·d
  q4_0,  // {f16 d; u8 qs[16]}: element j is ((qs[j] & 15) − 8)·d, element j+16 ((qs[j] >> 4) − 8)
  // 16-bit float weights, as Hugging Face checkpoints store them, read as they are: 32 elements
  // (64 bytes) a "block", so that rows are whole blocks as in the formats above. The activations
  // are not quantized: the product is Σ x·w in float (quant_row_dot_floats).
  f16,   // IEEE half
  bf16,  // bfloat16, the top 16 bits of a float
};

inline constexpr int kQuantBlock = 32;  // elements per block, in every format

std::string_view quant_format_name(QuantFormat format);
std::optional<QuantFormat> quant_format_from_name(std::string_view name);
int64_t quant_block_bytes(QuantFormat format);
// Whether the format's dot product reads the activations' block sums s = d·Σq (Q8_1).
bool quant_uses_block_sums(QuantFormat format);
// Whether the weights are 16-bit floats (f16, bf16), whose product reads the activations as
// floats, not quantized.
bool quant_reads_float_activations(QuantFormat format);

// ggml's quantize_row_q8_0/_q8_1 for `blocks` blocks of 32 floats: d = max|x| / 127 and
// q = x · (127 / max|x|) rounded half to even, as ggml's SIMD quantizers round; d and, when `s` is
// not null, s = d·Σq are rounded through f16, as ggml stores them.
void quantize_q8_blocks(const float* x, size_t blocks, int8_t* q, float* d, float* s);

// One weight row of `blocks` blocks in `format` times one quantized activation row (q, d and s as
// quantize_q8_blocks wrote them; s may be null unless q4_1): Σ over blocks, in float, of
// d_w·d_x·Σ q_w·q_x (+ m_w·s_x for q4_1).
float quant_row_dot(QuantFormat format, const std::byte* row, int blocks, const int8_t* q,
                    const float* d, const float* s);

// One 16-bit float weight row of k elements times one float activation row: Σ x_i·w_i in float,
// in order. The formats for which quant_reads_float_activations holds.
float quant_row_dot_floats(QuantFormat format, const std::byte* row, int64_t k, const float* x);

// Element i of a weight row, dequantized (tests and tools).
float quant_element(QuantFormat format, const std::byte* row, int64_t i);

}  // namespace yirage::ir
