// The operations of a kernel graph, one plain struct each.
//
// An op holds only its attributes. Operands are the node's `inputs`; result types live in the
// node's `outputs` and are inferred when the node is added (infer_types.cpp). Axis attributes are
// stored normalised to 0..rank-1. Adding an op means: a struct here, a case in `op_name`, a rule
// in infer_types.cpp, the JSON fields in json.cpp, the hash fields in hash.cpp, and the reference
// kernel in verify/reference.cpp. The compiler points at each through the std::visit overloads.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/quant.h"
#include "ir/shape.h"

namespace yirage::ir {

enum class UnaryFn : uint8_t {
  exp,
  silu,
  gelu,
  relu,
  sqrt,
  rsqrt,
  square,
  neg,
  reciprocal,
  mul_scalar
};
enum class BinaryFn : uint8_t { add, sub, mul, div, pow };
enum class ReduceFn : uint8_t { sum, mean, max };

// How rope pairs the elements of a head: GGUF/llama.cpp "normal" rotates adjacent pairs
// (2i, 2i+1); the Hugging Face/NeoX layout rotates (i, i + head_dim/2).
enum class RopeStyle : uint8_t { interleaved, neox };

// A graph input. Its name is the node's name; its type is the node's single output.
struct InputOp {};

// [..., M, K] x [..., K, N] -> [..., M, N]; batch dims broadcast.
// `library`: compute it with the backend's BLAS library (capabilities "library_matmul") instead of
// generated code. Same math, so the reference executor ignores it; it is a kernel-level leaf only:
// block graphs reject it and the search never fuses it, since a library call cannot share a
// kernel. tune::optimize sets it on the variants it measures against generated GEMMs.
struct MatmulOp {
  bool library = false;
};

// gelu is the exact erf form. `scalar` is used by mul_scalar only.
struct UnaryOp {
  UnaryFn fn;
  double scalar = 0.0;
};

// NumPy broadcasting; both operands have the same dtype.
struct BinaryOp {
  BinaryFn fn;
};

struct ReduceOp {
  ReduceFn fn;
  int dim;
  bool keepdim = true;
};

// inputs: x, then the optional weight of shape normalized_shape.
// y = x / sqrt(mean(x^2 over the normalized dims) + eps) * weight
struct RmsNormOp {
  Dims normalized_shape;
  double eps = 1e-6;
  bool has_weight = false;
};

// inputs: x, then the optional weight, then the optional bias, each of shape normalized_shape.
struct LayerNormOp {
  Dims normalized_shape;
  double eps = 1e-5;
  bool has_weight = false;
  bool has_bias = false;
};

struct SoftmaxOp {
  int dim;
};

// inputs: two or more tensors equal in every dim but `dim`.
struct ConcatOp {
  int dim;
};

// One output per entry of `sizes`, which add up to the extent of `dim`.
struct SplitOp {
  int dim;
  Dims sizes;
};

// `shape` is the resolved target shape (no -1 entries once stored).
struct ReshapeOp {
  Dims shape;
};

// Output dim i is input dim perm[i].
struct PermuteOp {
  std::vector<int> perm;
};

// inputs: table [V, D], ids (i32) of any shape -> [ids..., D]. An id outside [0, V) is an error
// at execution time.
struct EmbeddingOp {};

// inputs: x [..., S, H, D] with even D, positions (i32) [S].
// Rotates pair (a, b) of head element pairs by angle pos * theta^(-2i/D).
struct RopeOp {
  double theta = 10000.0;
  RopeStyle style = RopeStyle::interleaved;
};

// inputs: x f32 [..., M, K] with K a multiple of 32, w u8 [N, K/32 · block bytes] holding N rows
// of GGUF blocks -> f32 [..., M, N], x times the dequantized weight transposed, computed as
// ggml's CPU backend does (ir/quant.h): the activations are quantized per 32-element block. A
// kernel-level op only: the search keeps it as one kernel and fuses around it.
//
// `prefetch`, a schedule choice with the same math (the reference executor ignores it): whether
// each tile of weight rows asks for the next one while it computes, for one activation row
// (decode) and for several alike. It sped decode up by a quarter on one x86 host, by half on
// another, and slowed it by a fifth on a third (src/kernels/quant_tiles.inc has the figures), so
// the tuner measures both where the backend honours it (capabilities "quant_matmul_prefetch").
struct QuantMatmulOp {
  QuantFormat format = QuantFormat::q4_1;
  bool prefetch = true;
};

// Causal attention over a paged KV cache, with this step's keys and values appended first.
// inputs: q f32 [rows, heads, D], k and v f32 [rows, kv_heads, D] (RoPE already applied to q and
// k), pool f16 [blocks, 2 · kv_heads, block_tokens, D] (every sequence's keys at [b][h], values
// at [b][kv_heads + h]), table i32 [rows, max_blocks] (each row's pool blocks in order) and
// positions i32 [rows]
// -> out f32 [rows, heads · D] and the pool with the appends, of the pool's type.
//
// First every row r with positions[r] = p >= 0 stores its k and v, rounded to f16, at token slot
// p % block_tokens of pool block table[r][p / block_tokens]; then each of its heads h attends
// over positions 0 ... p of its own table with kv head h / (heads / kv_heads): softmax(q · kᵀ /
// √D) · v in the safe form. Rows of one sequence in one step (a prompt's chunk) share a table and
// see each other's appends. A row with position -1 is padding: it stores nothing and its output
// is 0. A table entry outside the pool, a position past the table, or two rows storing to one
// slot is an error in the reference executor and the cpu backend; the cuda backend, which cannot
// raise one, gives the rows with a bad entry or position NaN outputs and stores nothing for them
// (two rows storing to one slot it does not detect).
//
// The pool output is meant to be bound to the pool input's buffer (Node aliasing is the caller's:
// backends that see two buffers copy the pool first). A kernel-level op: the search keeps it as
// one kernel and fuses around it, and the fingerprint treats it as an uninterpreted function of
// all its inputs.
struct PagedAttentionOp {
  int64_t block_tokens = 16;
};

class BlockGraph;  // block_graph.h

// A fused kernel: `body` runs over a grid of blocks (block_graph.h). The node's inputs are the
// body's operands, of exactly the types body->operands(); its results are
// body->output_types(), one per saver. Bodies are immutable, so copies of a graph share them.
struct FusedOp {
  std::shared_ptr<const BlockGraph> body;
};

using Op = std::variant<InputOp, MatmulOp, UnaryOp, BinaryOp, ReduceOp, RmsNormOp, LayerNormOp,
                        SoftmaxOp, ConcatOp, SplitOp, ReshapeOp, PermuteOp, EmbeddingOp, RopeOp,
                        QuantMatmulOp, PagedAttentionOp, FusedOp>;

// Whether `op` is a matmul marked as a library call.
inline bool is_library_matmul(const Op& op) {
  const auto* m = std::get_if<MatmulOp>(&op);
  return m && m->library;
}

// The op's name in JSON, DOT and error messages: "matmul", "exp", "add", "sum", "rms_norm", ...
std::string_view op_name(const Op& op);

std::string_view unary_name(UnaryFn fn);
std::string_view binary_name(BinaryFn fn);
std::string_view reduce_name(ReduceFn fn);
std::string_view rope_style_name(RopeStyle style);

// Helper for std::visit with lambdas.
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace yirage::ir
