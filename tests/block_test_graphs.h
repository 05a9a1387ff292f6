// Hand-built block graphs of the fused kernels the tests share, with the kernel graphs they must
// agree with. Shapes are small so that the literal executor runs them in milliseconds.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ir/block_graph.h"
#include "ir/ir.h"

namespace yirage::ir::testing {

inline HostTensor random_tensor(const TensorType& type, std::mt19937_64& rng, float lo = -1.0f,
                                float hi = 1.0f) {
  HostTensor t(type);
  fill_random(t, rng, lo, hi);
  return t;
}

// The same elements under another shape, as a kernel-level reshape would give them.
inline HostTensor reshaped(HostTensor t, Dims dims) {
  t.type.dims = std::move(dims);
  return t;
}

// The kernel graph's reference rounds every intermediate to the dtype while the block executor
// keeps f32 tiles, so the two agree to a few units in the last place of the dtype.
inline void expect_close(const HostTensor& actual, const HostTensor& expected) {
  ASSERT_EQ(actual.type, expected.type);
  const float tol = expected.type.dtype == DType::f32   ? 1e-5f
                    : expected.type.dtype == DType::f16 ? 1e-2f
                                                        : 4e-2f;
  int64_t bad = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const float a = actual.get(i), e = expected.get(i);
    if (!(std::fabs(a - e) <= tol * (1.0f + std::fabs(e))) && ++bad <= 3)
      ADD_FAILURE() << dtype_name(expected.type.dtype) << " element " << i << ": got " << a
                    << ", expected " << e;
  }
  EXPECT_EQ(bad, 0) << "elements out of tolerance";
}

// Kernel-level matmuls in each batch layout, M x K x N = 17 x 40 x 24, one output each: one
// matrix per product on both sides, a shared B, a shared A, and batch dims that broadcast
// ([2, 1] against [3]).
inline KernelGraph matmul_layouts_graph(DType t) {
  KernelGraph g;
  auto a = g.input("A", {2, 3, 17, 40}, t);
  auto b = g.input("B", {2, 3, 40, 24}, t);
  auto w = g.input("W", {40, 24}, t);
  auto x = g.input("X", {17, 40}, t);
  auto q = g.input("Q", {2, 1, 6, 8}, t);
  auto k = g.input("K", {3, 8, 5}, t);
  g.mark_output(g.matmul(a, b), "batched");
  g.mark_output(g.matmul(a, w), "shared_b");
  g.mark_output(g.matmul(x, b), "shared_a");
  g.mark_output(g.matmul(q, k), "mixed_broadcast");
  return g;
}

inline constexpr AxisMap kAllReplicated{kReplicate, kReplicate, kReplicate};

// rms_norm(X, G, eps 0) · W in one kernel: blocks split W's columns, the loop walks K. No norm
// weight would make (X·W)/rms(X) per row; the weight G is folded into the W tile in the loop.
// G comes in as [K, 1] so that it broadcasts along the rows of the [K/R, n] W tile.
struct RmsNormLinearShape {
  int64_t m = 4, k = 32, n = 24, blocks = 3, range = 4;
};

inline BlockGraph rmsnorm_linear_block(DType dtype, RmsNormLinearShape s = {}) {
  BlockGraph g({{s.blocks, 1, 1}}, s.range,
               {{dtype, {s.m, s.k}}, {dtype, {s.k, 1}}, {dtype, {s.k, s.n}}});
  int32_t x = g.iterator(0, kAllReplicated, 1);               // [m, k/R]
  int32_t gamma = g.iterator(1, kAllReplicated, 0);           // [k/R, 1]
  int32_t w = g.iterator(2, {1, kReplicate, kReplicate}, 0);  // [k/R, n/blocks]
  int32_t gw = g.add(BinaryOp{BinaryFn::mul}, {w, gamma});
  int32_t partial = g.add(MatmulOp{}, {x, gw});
  int32_t squares = g.add(UnaryOp{UnaryFn::square}, {x});
  int32_t chunk_mean = g.add(ReduceOp{ReduceFn::mean, 1}, {squares});
  int32_t sum = g.accumulate(AccumFn::sum, partial);
  int32_t rms = g.accumulate(AccumFn::rms, chunk_mean);
  int32_t out = g.add(BinaryOp{BinaryFn::div}, {sum, rms});
  g.save(out, {1, kReplicate, kReplicate});
  return g;
}

inline KernelGraph rmsnorm_linear_kernel(DType dtype, RmsNormLinearShape s = {}) {
  KernelGraph g;
  auto x = g.input("X", {s.m, s.k}, dtype);
  auto gamma = g.input("G", {s.k}, dtype);
  auto w = g.input("W", {s.k, s.n}, dtype);
  g.mark_output(g.matmul(g.rms_norm(x, {s.k}, gamma, 0.0), w), "out");
  return g;
}

// silu(X·W1) * (X·W2): blocks split the columns (x) and the rows (y), the loop walks K.
inline BlockGraph gated_mlp_block(DType dtype) {
  BlockGraph g({{2, 2, 1}}, 4, {{dtype, {8, 32}}, {dtype, {32, 16}}, {dtype, {32, 16}}});
  int32_t x = g.iterator(0, {kReplicate, 0, kReplicate}, 1);   // [4, 8]
  int32_t w1 = g.iterator(1, {1, kReplicate, kReplicate}, 0);  // [8, 8]
  int32_t w2 = g.iterator(2, {1, kReplicate, kReplicate}, 0);
  int32_t gate = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w1}));
  int32_t up = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w2}));
  int32_t out = g.add(BinaryOp{BinaryFn::mul}, {g.add(UnaryOp{UnaryFn::silu}, {gate}), up});
  g.save(out, {1, 0, kReplicate});
  return g;
}

inline KernelGraph gated_mlp_kernel(DType dtype) {
  KernelGraph g;
  auto x = g.input("X", {8, 32}, dtype);
  auto w1 = g.input("W1", {32, 16}, dtype);
  auto w2 = g.input("W2", {32, 16}, dtype);
  g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w2)), "out");
  return g;
}

// Attention over Q [H, S, D], K [H, D, L], V [H, L, D]: blocks split the heads (x) and the
// queries (y), the loop walks the keys.
inline constexpr int64_t kHeads = 2, kQueries = 8, kHeadDim = 8, kKeys = 32;

inline BlockGraph attention_operands_block(DType dtype, int32_t& q, int32_t& k, int32_t& v) {
  BlockGraph g({{kHeads, 2, 1}}, 4,
               {{dtype, {kHeads, kQueries, kHeadDim}},
                {dtype, {kHeads, kHeadDim, kKeys}},
                {dtype, {kHeads, kKeys, kHeadDim}}});
  q = g.iterator(0, {0, 1, kReplicate}, kReplicate);  // [1, 4, 8]
  k = g.iterator(1, {0, kReplicate, kReplicate}, 2);  // [1, 8, 8]
  v = g.iterator(2, {0, kReplicate, kReplicate}, 1);  // [1, 8, 8]
  return g;
}

// exp(Q·K) / rowsum(exp(Q·K)) · V, the gqa workload, without the max subtraction.
inline BlockGraph attention_exp_block(DType dtype) {
  int32_t q, k, v;
  BlockGraph g = attention_operands_block(dtype, q, k, v);
  int32_t e = g.add(UnaryOp{UnaryFn::exp}, {g.add(MatmulOp{}, {q, k})});
  int32_t ev = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {e, v}));
  int32_t l = g.accumulate(AccumFn::sum, g.add(ReduceOp{ReduceFn::sum, 2}, {e}));
  g.save(g.add(BinaryOp{BinaryFn::div}, {ev, l}), {0, 1, kReplicate});
  return g;
}

// exp(-(Q·K))·V over the accumulated row means of the same exponentials, at tensor-core sizes
// (K and N multiples of 16): attention's register chain (cuda codegen_block_chain.cpp) through
// two unary ops, with a mean for its row reduction.
inline BlockGraph attention_mean_block(DType dtype) {
  BlockGraph g({{2, 2, 1}}, 4,
               {{dtype, {2, 32, 32}}, {dtype, {2, 32, 256}}, {dtype, {2, 256, 16}}});
  int32_t q = g.iterator(0, {0, 1, kReplicate}, kReplicate);  // [1, 16, 32]
  int32_t k = g.iterator(1, {0, kReplicate, kReplicate}, 2);  // [1, 32, 64]
  int32_t v = g.iterator(2, {0, kReplicate, kReplicate}, 1);  // [1, 64, 16]
  int32_t s = g.add(MatmulOp{}, {q, k});
  int32_t e = g.add(UnaryOp{UnaryFn::exp}, {g.add(UnaryOp{UnaryFn::neg}, {s})});
  int32_t ev = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {e, v}));
  int32_t l = g.accumulate(AccumFn::sum, g.add(ReduceOp{ReduceFn::mean, 2}, {e}));
  g.save(g.add(BinaryOp{BinaryFn::div}, {ev, l}), {0, 1, kReplicate});
  return g;
}

// softmax(Q·K)·V with the online max rescale, as the search builds its safe form, over Q [H, S,
// D], K [H, D, L], V [H, L, D]: blocks split the heads (x) and, `query_blocks` > 1, the queries
// (y); the loop walks the keys in `range` chunks.
inline BlockGraph online_softmax_attention_block(const TensorType& q_type, const TensorType& k_type,
                                                 const TensorType& v_type, int64_t query_blocks,
                                                 int64_t range) {
  const int rows = query_blocks > 1 ? 1 : kReplicate;
  BlockGraph g({{q_type.dims[0], query_blocks, 1}}, range, {q_type, k_type, v_type});
  const int32_t q = g.iterator(0, {0, rows, kReplicate}, kReplicate);
  const int32_t k = g.iterator(1, {0, kReplicate, kReplicate}, 2);
  const int32_t v = g.iterator(2, {0, kReplicate, kReplicate}, 1);
  int32_t s = g.add(MatmulOp{}, {q, k});
  int32_t m = g.add(ReduceOp{ReduceFn::max, 2}, {s});
  int32_t p = g.add(UnaryOp{UnaryFn::exp}, {g.add(BinaryOp{BinaryFn::sub}, {s, m})});
  int32_t pv = g.rescaled_sum(g.add(MatmulOp{}, {p, v}), m);
  int32_t l = g.rescaled_sum(g.add(ReduceOp{ReduceFn::sum, 2}, {p}), m);
  g.save(g.add(BinaryOp{BinaryFn::div}, {pv, l}), {0, rows, kReplicate});
  return g;
}

// The kernel graph the online-softmax block computes, softmax(Q·K)·V, at the given shapes.
inline KernelGraph softmax_attention_graph(DType dtype, Dims q, Dims k, Dims v) {
  KernelGraph g;
  auto qi = g.input("Q", std::move(q), dtype);
  auto ki = g.input("K", std::move(k), dtype);
  auto vi = g.input("V", std::move(v), dtype);
  g.mark_output(g.matmul(g.softmax(g.matmul(qi, ki), -1), vi), "out");
  return g;
}

// softmax(Q·K)·V with the online max rescale.
inline BlockGraph attention_softmax_block(DType dtype) {
  return online_softmax_attention_block({dtype, {kHeads, kQueries, kHeadDim}},
                                        {dtype, {kHeads, kHeadDim, kKeys}},
                                        {dtype, {kHeads, kKeys, kHeadDim}}, 2, 4);
}

inline KernelGraph attention_kernel(DType dtype, bool softmax) {
  KernelGraph g;
  auto q = g.input("Q", {kHeads, kQueries, kHeadDim}, dtype);
  auto k = g.input("K", {kHeads, kHeadDim, kKeys}, dtype);
  auto v = g.input("V", {kHeads, kKeys, kHeadDim}, dtype);
  auto scores = g.matmul(q, k);
  TensorRef probs;
  if (softmax) {
    probs = g.softmax(scores, 2);
  } else {
    auto e = g.exp(scores);
    probs = g.div(e, g.reduce(ReduceFn::sum, e, 2));
  }
  g.mark_output(g.matmul(probs, v), "out");
  return g;
}

// Split-K partial products of X [1, M, K] · W [K, N]: blocks split the columns (x) and K (y),
// the loop walks the rest of each block's K; the saver lays y out on the leading dim, giving
// [splits, M, N] partial sums that a kernel-level sum adds up.
inline constexpr int64_t kSplitM = 4, kSplitK = 64, kSplitN = 16, kSplits = 4;

inline BlockGraph split_k_block(DType dtype) {
  BlockGraph g({{2, kSplits, 1}}, 2, {{dtype, {1, kSplitM, kSplitK}}, {dtype, {kSplitK, kSplitN}}});
  int32_t x = g.iterator(0, {kReplicate, 2, kReplicate}, 2);  // [1, 4, 8]
  int32_t w = g.iterator(1, {1, 0, kReplicate}, 0);           // [8, 8]
  int32_t partial = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w}));
  g.save(partial, {2, 0, kReplicate});
  return g;
}

// A µGraph: the rmsnorm_linear fused kernel as a node of a kernel graph, with the kernel-level
// reshape that turns the norm weight into the column the body expects.
inline KernelGraph rmsnorm_linear_ugraph(DType dtype) {
  const RmsNormLinearShape s;
  KernelGraph g;
  auto x = g.input("X", {s.m, s.k}, dtype);
  auto gamma = g.input("G", {s.k}, dtype);
  auto w = g.input("W", {s.k, s.n}, dtype);
  auto column = g.reshape(gamma, {s.k, 1});
  auto body = std::make_shared<const BlockGraph>(rmsnorm_linear_block(dtype, s));
  g.mark_output(g.add_node(FusedOp{body}, {x, column, w}, "fused_rmsnorm_linear")[0], "out");
  return g;
}

// A kernel graph of one fused node that runs `body` on the graph inputs in0, in1, ... (the
// body's operand types) and marks its first output as "out".
inline KernelGraph single_fused_graph(BlockGraph body, const std::string& name) {
  KernelGraph g;
  std::vector<TensorRef> inputs;
  for (size_t i = 0; i < body.operands().size(); ++i)
    inputs.push_back(
        g.input("in" + std::to_string(i), body.operands()[i].dims, body.operands()[i].dtype));
  auto shared = std::make_shared<const BlockGraph>(std::move(body));
  g.mark_output(g.add_node(FusedOp{shared}, inputs, name)[0], "out");
  return g;
}

}  // namespace yirage::ir::testing
