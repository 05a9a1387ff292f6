// Hand-built µGraphs of the public suite at full size, the fused kernels the CUDA backend runs
// until the search (src/search) produces them: for each workload, a few tilings of the same
// fusion, which the benchmark profiles and the compile test compiles. Each graph takes exactly
// the workload's inputs (names, order, types) and gives its output, so the reference of the
// suite's kernel graph checks it.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "ir/ir.h"
#include "suite/suite.h"
#include "support/error.h"

namespace yirage::cuda_suite {

using ir::AccumFn;
using ir::BlockGraph;
using ir::DType;
using ir::KernelGraph;
using ir::kReplicate;
using ir::TensorRef;

struct Variant {
  std::string name;  // the tiling, e.g. "n64_k128"
  KernelGraph graph;
};

inline constexpr ir::AxisMap kAll{kReplicate, kReplicate, kReplicate};
inline constexpr ir::AxisMap kOnX0{0, kReplicate, kReplicate};
inline constexpr ir::AxisMap kOnX1{1, kReplicate, kReplicate};
inline constexpr int64_t kHidden = 4096;

// A fused node of `body`; its outputs, one per saver.
inline std::vector<TensorRef> fused_outputs(KernelGraph& g, BlockGraph body,
                                            std::vector<TensorRef> inputs,
                                            const std::string& name) {
  return g.add_node(ir::FusedOp{std::make_shared<const BlockGraph>(std::move(body))},
                    std::move(inputs), name);
}

inline TensorRef fused(KernelGraph& g, BlockGraph body, std::vector<TensorRef> inputs,
                       const std::string& name) {
  return fused_outputs(g, std::move(body), std::move(inputs), name)[0];
}

// rms_norm(X, G) · W in one kernel: blocks split W's columns by n, the loop walks K by kc. The
// norm weight scales X's columns ((X ⊙ G) · W = X · (G ⊙ W)), so the weight tile goes to the
// tensor cores as loaded; G comes in as a [1, K] row that broadcasts over X's rows.
inline TensorRef rmsnorm_linear_node(KernelGraph& g, TensorRef x, TensorRef gain, TensorRef w,
                                     int64_t n, int64_t kc, const std::string& name) {
  const ir::TensorType xt = g.type(x), wt = g.type(w);
  const int64_t k = xt.dims[1], cols = wt.dims[1];
  TensorRef row = g.reshape(gain, {1, k});
  BlockGraph b({{cols / n, 1, 1}}, k / kc, {xt, g.type(row), wt});
  int32_t xi = b.iterator(0, kAll, 1);
  int32_t gi = b.iterator(1, kAll, 1);
  int32_t wi = b.iterator(2, kOnX1, 0);
  int32_t xg = b.add(ir::BinaryOp{ir::BinaryFn::mul}, {xi, gi});
  int32_t sum = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xg, wi}));
  int32_t sq = b.add(ir::UnaryOp{ir::UnaryFn::square}, {xi});
  int32_t rms = b.accumulate(AccumFn::rms, b.add(ir::ReduceOp{ir::ReduceFn::mean, 1}, {sq}), 1e-6);
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::div}, {sum, rms}), kOnX1);
  return fused(g, std::move(b), {x, row, w}, name);
}

// Split-K: a matrix-vector-like product streams a weight far larger than its activations, and a
// grid over columns alone leaves each block a narrow column strip: a few dozen bytes of every
// weight row, which the DRAM serves poorly, and too few blocks once the strips widen. These
// variants take wide strips (n columns) and split K over a second grid axis (s ways) instead.
// Each block saves its partial tile, the s partials stacked on rows, and a second fused kernel
// sums them over its loop and finishes the epilogue.
inline constexpr ir::AxisMap kSplitRows{kReplicate, 1, kReplicate};  // X: y walks K (dim 1)
inline constexpr ir::AxisMap kSplitWeight{1, 0, kReplicate};         // W: x on N, y on K
inline constexpr ir::AxisMap kStackParts{1, 0, kReplicate};          // partials: y stacks rows

// The first kernel of rms_norm(X, G) · W split over K: the partial products X·(G ⊙ W) over the
// split's K range, and the split's mean of X² (one copy per column strip).
inline std::pair<TensorRef, TensorRef> rmsnorm_linear_parts(KernelGraph& g, TensorRef x,
                                                            TensorRef gain, TensorRef w, int64_t n,
                                                            int64_t splits, int64_t kc,
                                                            const std::string& name) {
  const ir::TensorType xt = g.type(x), wt = g.type(w);
  const int64_t k = xt.dims[1], cols = wt.dims[1];
  TensorRef row = g.reshape(gain, {1, k});
  BlockGraph b({{cols / n, splits, 1}}, k / splits / kc, {xt, g.type(row), wt});
  int32_t xi = b.iterator(0, kSplitRows, 1);
  int32_t gi = b.iterator(1, kSplitRows, 1);
  int32_t wi = b.iterator(2, kSplitWeight, 0);
  int32_t xg = b.add(ir::BinaryOp{ir::BinaryFn::mul}, {xi, gi});
  int32_t part = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xg, wi}));
  int32_t sq = b.add(ir::UnaryOp{ir::UnaryFn::square}, {xi});
  int32_t ms = b.accumulate(AccumFn::mean, b.add(ir::ReduceOp{ir::ReduceFn::mean, 1}, {sq}));
  b.save(part, kStackParts);
  b.save(ms, kStackParts);
  std::vector<TensorRef> outs = fused_outputs(g, std::move(b), {x, row, w}, name);
  return {outs[0], outs[1]};
}

// The second kernel: Σ partials / sqrt(mean of the splits' means of X² + eps), blocks of n2
// columns. The means come once per column strip of the first kernel; their row mean is the value.
inline TensorRef rmsnorm_linear_finish(KernelGraph& g, TensorRef parts, TensorRef ms,
                                       int64_t splits, int64_t n2, const std::string& name) {
  const int64_t cols = g.type(parts).dims[1];
  BlockGraph b({{cols / n2, 1, 1}}, splits, {g.type(parts), g.type(ms)});
  int32_t pi = b.iterator(0, kOnX1, 0);
  int32_t mi = b.iterator(1, kAll, 0);
  int32_t sum = b.accumulate(AccumFn::sum, pi);
  int32_t rms = b.accumulate(AccumFn::rms, b.add(ir::ReduceOp{ir::ReduceFn::mean, 1}, {mi}), 1e-6);
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::div}, {sum, rms}), kOnX1);
  return fused(g, std::move(b), {parts, ms}, name);
}

// X · W split over K: the first kernel's partials; `finish` sums them (plus R's tile, if any).
inline TensorRef linear_parts(KernelGraph& g, TensorRef x, TensorRef w, int64_t n, int64_t splits,
                              int64_t kc, const std::string& name) {
  const ir::TensorType xt = g.type(x), wt = g.type(w);
  const int64_t k = xt.dims[1], cols = wt.dims[1];
  BlockGraph b({{cols / n, splits, 1}}, k / splits / kc, {xt, wt});
  int32_t xi = b.iterator(0, kSplitRows, 1);
  int32_t wi = b.iterator(1, kSplitWeight, 0);
  b.save(b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, wi})), kStackParts);
  return fused(g, std::move(b), {x, w}, name);
}

inline TensorRef linear_finish(KernelGraph& g, TensorRef parts, std::optional<TensorRef> r,
                               int64_t splits, int64_t n2, const std::string& name) {
  const int64_t cols = g.type(parts).dims[1];
  std::vector<ir::TensorType> operands{g.type(parts)};
  if (r) operands.push_back(g.type(*r));
  BlockGraph b({{cols / n2, 1, 1}}, splits, operands);
  int32_t out = b.accumulate(AccumFn::sum, b.iterator(0, kOnX1, 0));
  if (r) {
    int32_t ri = b.iterator(1, kOnX1, kReplicate);
    out = b.add(ir::BinaryOp{ir::BinaryFn::add}, {out, b.accumulate(AccumFn::mean, ri)});
  }
  b.save(out, kOnX1);
  std::vector<TensorRef> inputs{parts};
  if (r) inputs.push_back(*r);
  return fused(g, std::move(b), inputs, name);
}

// X · W (+ R, a residual of the output's shape): blocks split columns by n, the loop walks K.
inline TensorRef linear_node(KernelGraph& g, TensorRef x, TensorRef w, std::optional<TensorRef> r,
                             int64_t n, int64_t kc, const std::string& name) {
  const ir::TensorType xt = g.type(x), wt = g.type(w);
  const int64_t k = xt.dims[1], cols = wt.dims[1];
  std::vector<ir::TensorType> operands{xt, wt};
  if (r) operands.push_back(g.type(*r));
  BlockGraph b({{cols / n, 1, 1}}, k / kc, operands);
  int32_t xi = b.iterator(0, kAll, 1);
  int32_t wi = b.iterator(1, kOnX1, 0);
  int32_t out = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, wi}));
  if (r) {
    // The residual tile is the same every iteration; its mean over the loop is itself.
    int32_t ri = b.iterator(2, kOnX1, kReplicate);
    out = b.add(ir::BinaryOp{ir::BinaryFn::add}, {out, b.accumulate(AccumFn::mean, ri)});
  }
  b.save(out, kOnX1);
  std::vector<TensorRef> inputs{x, w};
  if (r) inputs.push_back(*r);
  return fused(g, std::move(b), inputs, name);
}

// n48 makes 128 blocks: one wave on the 132 multiprocessors of an H100/H200, where a deep load
// pipeline (BlockLowering::plan) keeps each block's weight stream in flight. K tiles of 512 halve
// the loop's iterations, and with them its fixed cost per iteration (a barrier, the staging of A).
inline std::vector<Variant> rmsnorm_linear(int bs) {
  std::vector<Variant> out;
  // At bs8, X's tile leaves no room for three stages of the 48x512 one.
  std::vector<std::pair<int, int>> tilings{{32, 256}, {64, 256}, {16, 512}, {48, 256}};
  // n64 with long K tiles: the weight streams through registers (codegen_block_stream.cpp), and
  // the for-loop, which only stages X·G and sums X², takes 2 to 8 iterations.
  // n48 makes 128 blocks, one on nearly every multiprocessor; its weight tiles take the TMA
  // unswizzled (96-byte rows).
  // n128 makes 48 blocks: on sm_90 each runs as a cluster pair streaming half of K
  // (codegen_block_cluster.cpp), 256 bytes of each weight row a block.
  // K tiles of 4096 make a for-loop of one iteration, whose loads all go out before the weight's.
  if (bs == 1)
    tilings.insert(tilings.end(), {{48, 512},
                                   {64, 2048},
                                   {64, 1024},
                                   {64, 512},
                                   {48, 2048},
                                   {128, 2048},
                                   {128, 1024},
                                   {64, 4096},
                                   {128, 4096}});
  // At bs8 each block of an n128 pair stages only its half of X's 16 rows, which leaves the weight
  // three 32 KB chunks in flight (27.6 µs, was 40.2; docs/design/cuda-findings.md).
  if (bs == 8) tilings.insert(tilings.end(), {{64, 512}, {128, 512}});
  for (auto [n, kc] : tilings) {
    KernelGraph g;
    TensorRef x = g.input("X", {2 * bs, kHidden}, DType::f16);
    TensorRef gain = g.input("G", {kHidden}, DType::f16);
    TensorRef w = g.input("W", {kHidden, 6144}, DType::f16);
    g.mark_output(rmsnorm_linear_node(g, x, gain, w, n, kc, "fused_rmsnorm_linear"), "out");
    out.push_back({fmt::format("n{}_k{}", n, kc), std::move(g)});
  }
  // n64 splits: whole 128-byte TMA panels, and two or three blocks per multiprocessor.
  for (auto [n, s, kc] : {std::array<int64_t, 3>{256, 16, 64},
                          {512, 16, 32},
                          {256, 8, 64},
                          {64, 2, 256},
                          {64, 4, 256}}) {
    KernelGraph g;
    TensorRef x = g.input("X", {2 * bs, kHidden}, DType::f16);
    TensorRef gain = g.input("G", {kHidden}, DType::f16);
    TensorRef w = g.input("W", {kHidden, 6144}, DType::f16);
    auto [parts, ms] = rmsnorm_linear_parts(g, x, gain, w, n, s, kc, "rmsnorm_linear_parts");
    g.mark_output(rmsnorm_linear_finish(g, parts, ms, s, 64, "rmsnorm_linear_finish"), "out");
    out.push_back({fmt::format("split{}_n{}_k{}", s, n, kc), std::move(g)});
  }
  return out;
}

// silu(X · W1) ⊙ (X · W2) in one kernel: blocks split the columns by n, the loop walks K by kc.
inline TensorRef gated_node(KernelGraph& g, TensorRef x, TensorRef w1, TensorRef w2, int64_t n,
                            int64_t kc, const std::string& name) {
  const int64_t k = g.type(x).dims[1], cols = g.type(w1).dims[1];
  BlockGraph b({{cols / n, 1, 1}}, k / kc, {g.type(x), g.type(w1), g.type(w2)});
  int32_t xi = b.iterator(0, kAll, 1);
  int32_t w1i = b.iterator(1, kOnX1, 0);
  int32_t w2i = b.iterator(2, kOnX1, 0);
  int32_t gate = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, w1i}));
  int32_t up = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, w2i}));
  int32_t silu = b.add(ir::UnaryOp{ir::UnaryFn::silu}, {gate});
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::mul}, {silu, up}), kOnX1);
  return fused(g, std::move(b), {x, w1, w2}, name);
}

// silu(gate) · up as one kernel of n-column blocks.
inline TensorRef silu_mul_node(KernelGraph& g, TensorRef gate, TensorRef up, int64_t n) {
  BlockGraph f({{g.type(gate).dims[1] / n, 1, 1}}, 1, {g.type(gate), g.type(up)});
  int32_t gi = f.accumulate(AccumFn::sum, f.iterator(0, kOnX1, kReplicate));
  int32_t ui = f.accumulate(AccumFn::sum, f.iterator(1, kOnX1, kReplicate));
  f.save(f.add(ir::BinaryOp{ir::BinaryFn::mul}, {f.add(ir::UnaryOp{ir::UnaryFn::silu}, {gi}), ui}),
         kOnX1);
  return fused(g, std::move(f), {gate, up}, "silu_mul");
}

inline std::vector<Variant> gated_mlp(int bs) {
  std::vector<Variant> out;
  // Shared memory bounds the tiles: X's tile grows with bs. At bs1 the weights stream through
  // registers, and K tiles of 1024 leave the for-loop (which stages X) four iterations.
  // n64 makes 64 blocks, which sm_90 runs as 128 in cluster pairs.
  const auto tilings = bs == 1
                           ? std::vector<std::pair<int, int>>{{32, 256},  {16, 512},  {64, 128},
                                                              {32, 1024}, {64, 1024}, {64, 2048}}
                           : std::vector<std::pair<int, int>>{{32, 128}, {16, 256}, {64, 64}};
  for (auto [n, kc] : tilings) {
    KernelGraph g;
    TensorRef x = g.input("X", {8 * bs, kHidden}, DType::f16);
    TensorRef w1 = g.input("W1", {kHidden, kHidden}, DType::f16);
    TensorRef w2 = g.input("W2", {kHidden, kHidden}, DType::f16);
    g.mark_output(gated_node(g, x, w1, w2, n, kc, "fused_gated_mlp"), "out");
    out.push_back({fmt::format("n{}_k{}", n, kc), std::move(g)});
  }
  // Split over K: partial gate and up products, then silu(Σ gate) · Σ up.
  const auto splits =
      bs == 1 ? std::vector<std::array<int64_t, 3>>{{256, 16, 32}, {128, 16, 64}, {64, 4, 128}}
              : std::vector<std::array<int64_t, 3>>{{128, 8, 32}, {64, 8, 64}, {64, 4, 128}};
  for (auto [n, s, kc] : splits) {
    KernelGraph g;
    TensorRef x = g.input("X", {8 * bs, kHidden}, DType::f16);
    TensorRef w1 = g.input("W1", {kHidden, kHidden}, DType::f16);
    TensorRef w2 = g.input("W2", {kHidden, kHidden}, DType::f16);
    BlockGraph b({{kHidden / n, s, 1}}, kHidden / s / kc, {g.type(x), g.type(w1), g.type(w2)});
    int32_t xi = b.iterator(0, kSplitRows, 1);
    int32_t w1i = b.iterator(1, kSplitWeight, 0);
    int32_t w2i = b.iterator(2, kSplitWeight, 0);
    b.save(b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, w1i})), kStackParts);
    b.save(b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xi, w2i})), kStackParts);
    std::vector<TensorRef> parts = fused_outputs(g, std::move(b), {x, w1, w2}, "gated_parts");
    BlockGraph f({{kHidden / 64, 1, 1}}, s, {g.type(parts[0]), g.type(parts[1])});
    int32_t gate = f.accumulate(AccumFn::sum, f.iterator(0, kOnX1, 0));
    int32_t up = f.accumulate(AccumFn::sum, f.iterator(1, kOnX1, 0));
    f.save(
        f.add(ir::BinaryOp{ir::BinaryFn::mul}, {f.add(ir::UnaryOp{ir::UnaryFn::silu}, {gate}), up}),
        kOnX1);
    g.mark_output(fused(g, std::move(f), {parts[0], parts[1]}, "gated_finish"), "out");
    out.push_back({fmt::format("split{}_n{}_k{}", s, n, kc), std::move(g)});
  }
  // Library products around one fused pass: X·W1 and X·W2 are kernel-level matmuls (cuBLAS calls
  // where cuBLAS loaded), and one kernel takes silu(gate) · up, where the plain graph takes two
  // (64-column blocks were slower: git show 94f00b8:bench/results/library_pass_h200.txt).
  {
    KernelGraph g;
    TensorRef x = g.input("X", {8 * bs, kHidden}, DType::f16);
    TensorRef w1 = g.input("W1", {kHidden, kHidden}, DType::f16);
    TensorRef w2 = g.input("W2", {kHidden, kHidden}, DType::f16);
    g.mark_output(silu_mul_node(g, g.matmul(x, w1), g.matmul(x, w2), 32), "out");
    out.push_back({"mm_mm_silu_mul", std::move(g)});
  }
  return out;
}

// exp(Q·K) / rowsum · V as one kernel: blocks split heads (x) and query rows (y) by qb; the loop
// walks the keys by lc, accumulating exp(S)·V and the row sums (tests/block_test_graphs.h's
// attention_exp_block at full size). Q [H, S, D], K [H, D, L], V [H, L, D].
inline TensorRef attention_node(KernelGraph& g, TensorRef q, TensorRef k, TensorRef v, int64_t qb,
                                int64_t lc) {
  const int64_t heads = g.type(q).dims[0], queries = g.type(q).dims[1];
  const int64_t keys = g.type(k).dims[2];
  BlockGraph b({{heads, queries / qb, 1}}, keys / lc, {g.type(q), g.type(k), g.type(v)});
  int32_t qi = b.iterator(0, {0, 1, kReplicate}, kReplicate);
  int32_t ki = b.iterator(1, {0, kReplicate, kReplicate}, 2);
  int32_t vi = b.iterator(2, {0, kReplicate, kReplicate}, 1);
  int32_t e = b.add(ir::UnaryOp{ir::UnaryFn::exp}, {b.add(ir::MatmulOp{}, {qi, ki})});
  int32_t ev = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {e, vi}));
  int32_t l = b.accumulate(AccumFn::sum, b.add(ir::ReduceOp{ir::ReduceFn::sum, 2}, {e}));
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::div}, {ev, l}), {0, 1, kReplicate});
  return fused(g, std::move(b), {q, k, v}, "fused_attention");
}

// The same split over the keys (a third grid axis, s ways), as flash-decoding does: without a
// running max, exp(S)·V and the row sums of each key range simply add. The first kernel stacks
// each split's partials on the last dim; the second sums them and divides.
// The finish takes fq query rows a block.
inline TensorRef attention_split_node(KernelGraph& g, TensorRef q, TensorRef k, TensorRef v,
                                      int64_t qb, int64_t lc, int64_t s, int64_t fq = 8) {
  const int64_t heads = g.type(q).dims[0], queries = g.type(q).dims[1];
  const int64_t keys = g.type(k).dims[2];
  BlockGraph b({{heads, queries / qb, s}}, keys / s / lc, {g.type(q), g.type(k), g.type(v)});
  int32_t qi = b.iterator(0, {0, 1, kReplicate}, kReplicate);
  int32_t ki = b.iterator(1, {0, kReplicate, 2}, 2);
  int32_t vi = b.iterator(2, {0, kReplicate, 1}, 1);
  int32_t e = b.add(ir::UnaryOp{ir::UnaryFn::exp}, {b.add(ir::MatmulOp{}, {qi, ki})});
  b.save(b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {e, vi})), {0, 1, 2});
  b.save(b.accumulate(AccumFn::sum, b.add(ir::ReduceOp{ir::ReduceFn::sum, 2}, {e})), {0, 1, 2});
  std::vector<TensorRef> parts = fused_outputs(g, std::move(b), {q, k, v}, "attention_parts");
  // The finish reads a row's s partials at once, as [s, d] (a view of the stacked row): a loop
  // over the splits would make each of its few blocks wait on s small loads in turn.
  const int64_t d = g.type(v).dims[2];
  fq = std::min(fq, queries);
  TensorRef stacked = g.reshape(parts[0], {heads, queries, s, d});
  BlockGraph f({{heads, queries / fq, 1}}, 1, {g.type(stacked), g.type(parts[1])});
  int32_t ev = f.accumulate(AccumFn::sum, f.add(ir::ReduceOp{ir::ReduceFn::sum, 2, false},
                                                {f.iterator(0, {0, 1, kReplicate}, kReplicate)}));
  int32_t l = f.accumulate(AccumFn::sum, f.add(ir::ReduceOp{ir::ReduceFn::sum, 2},
                                               {f.iterator(1, {0, 1, kReplicate}, kReplicate)}));
  f.save(f.add(ir::BinaryOp{ir::BinaryFn::div}, {ev, l}), {0, 1, kReplicate});
  return fused(g, std::move(f), {stacked, parts[1]}, "attention_finish");
}

// gqa's inputs at bs: Q [2bs, 256, 64], K [2bs, 64, 4096], V [2bs, 4096, 64].
inline std::array<TensorRef, 3> gqa_inputs(KernelGraph& g, int bs) {
  const int64_t heads = 2 * bs, queries = 256, d = 64, keys = 4096;
  return {g.input("Q", {heads, queries, d}, DType::f16), g.input("K", {heads, d, keys}, DType::f16),
          g.input("V", {heads, keys, d}, DType::f16)};
}

inline std::vector<Variant> gqa(int bs) {
  std::vector<Variant> out;
  for (auto [qb, lc] : {std::pair{16, 64}, {32, 128}}) {
    KernelGraph g;
    auto [q, k, v] = gqa_inputs(g, bs);
    g.mark_output(attention_node(g, q, k, v, qb, lc), "out");
    out.push_back({fmt::format("qb{}_lc{}", qb, lc), std::move(g)});
  }
  // Splits give the grid 64 to 512 blocks (bs 1 has two heads, bs 8 sixteen); the finish
  // takes 16, 8, 4 or 2 query rows a block.
  using Split = std::array<int64_t, 4>;  // qb, lc, s, fq
  const std::vector<Split> splits =
      bs == 1 ? std::vector<Split>{{128, 64, 32, 8}, {128, 64, 32, 2}, {128, 64, 64, 2},
                                   {64, 64, 32, 2},  {128, 64, 16, 2}, {64, 64, 16, 2},
                                   {128, 64, 32, 4}}
              : std::vector<Split>{{128, 64, 4, 8},  {128, 128, 4, 8}, {128, 128, 4, 16},
                                   {128, 128, 4, 2}, {128, 64, 4, 2},  {128, 64, 8, 2},
                                   {64, 64, 8, 2},   {128, 64, 8, 8},  {128, 128, 8, 16},
                                   {128, 64, 8, 16}};
  for (auto [qb, lc, s, fq] : splits) {
    KernelGraph g;
    auto [q, k, v] = gqa_inputs(g, bs);
    g.mark_output(attention_split_node(g, q, k, v, qb, lc, s, fq), "out");
    out.push_back({fmt::format("split{}_qb{}_lc{}_fq{}", s, qb, lc, fq), std::move(g)});
  }
  // Library products around one fused pass: S = Q·K and P·V are kernel-level matmuls (cuBLAS
  // calls where cuBLAS loaded), and one kernel turns S into P = exp(S) / rowsum(exp(S)), r whole
  // rows per block, so S and P cross memory once each.
  for (int64_t r : {1, 2, 4}) {
    KernelGraph g;
    auto [q, k, v] = gqa_inputs(g, bs);
    const int64_t heads = g.type(q).dims[0], queries = g.type(q).dims[1];
    TensorRef scores = g.matmul(q, k);
    BlockGraph b({{heads, queries / r, 1}}, 1, {g.type(scores)});
    int32_t e = b.accumulate(AccumFn::sum, b.add(ir::UnaryOp{ir::UnaryFn::exp},
                                                 {b.iterator(0, {0, 1, kReplicate}, kReplicate)}));
    int32_t l = b.add(ir::ReduceOp{ir::ReduceFn::sum, 2}, {e});
    b.save(b.add(ir::BinaryOp{ir::BinaryFn::div}, {e, l}), {0, 1, kReplicate});
    TensorRef p = fused(g, std::move(b), {scores}, "exp_normalize");
    g.mark_output(g.matmul(p, v), "out");
    out.push_back({fmt::format("mm_expnorm{}_mm", r), std::move(g)});
  }
  return out;
}

// X·W + (X·A)·B in one kernel; each block recomputes the small X·A.
inline std::vector<Variant> lora(int) {
  std::vector<Variant> out;
  for (int64_t n : {32, 64}) {
    KernelGraph g;
    TensorRef x = g.input("X", {16, 256}, DType::f16);
    TensorRef w = g.input("W", {256, kHidden}, DType::f16);
    TensorRef a = g.input("A", {256, 16}, DType::f16);
    TensorRef bm = g.input("B", {16, kHidden}, DType::f16);
    BlockGraph b({{kHidden / n, 1, 1}}, 1, {g.type(x), g.type(w), g.type(a), g.type(bm)});
    int32_t xi = b.iterator(0, kAll, kReplicate);
    int32_t wi = b.iterator(1, kOnX1, kReplicate);
    int32_t ai = b.iterator(2, kAll, kReplicate);
    int32_t bi = b.iterator(3, kOnX1, kReplicate);
    int32_t base = b.add(ir::MatmulOp{}, {xi, wi});
    int32_t delta = b.add(ir::MatmulOp{}, {b.add(ir::MatmulOp{}, {xi, ai}), bi});
    int32_t sum = b.add(ir::BinaryOp{ir::BinaryFn::add}, {base, delta});
    b.save(b.accumulate(AccumFn::sum, sum), kOnX1);
    g.mark_output(fused(g, std::move(b), {x, w, a, bm}, "fused_lora"), "out");
    out.push_back({fmt::format("n{}", n), std::move(g)});
  }
  return out;
}

// rms(X + α ⊙ (rms(H) + X)) in one kernel, a block per row.
inline TensorRef ntrans_node(KernelGraph& g, TensorRef h, TensorRef x, TensorRef alpha,
                             const std::string& name) {
  const ir::TensorType t = g.type(h);
  BlockGraph b({{t.dims[0], 1, 1}}, 1, {t, g.type(x), g.type(alpha)});
  const ir::RmsNormOp rms{.normalized_shape = {t.dims[1]}};
  int32_t hi = b.iterator(0, kOnX0, kReplicate);
  int32_t xi = b.iterator(1, kOnX0, kReplicate);
  int32_t ai = b.iterator(2, kOnX0, kReplicate);
  int32_t hn = b.add(rms, {hi});
  int32_t inner = b.add(ir::BinaryOp{ir::BinaryFn::add}, {hn, xi});
  int32_t scaled = b.add(ir::BinaryOp{ir::BinaryFn::mul}, {ai, inner});
  int32_t residual = b.add(ir::BinaryOp{ir::BinaryFn::add}, {xi, scaled});
  int32_t acc = b.accumulate(AccumFn::sum, residual);
  b.save(b.add(rms, {acc}), kOnX0);
  return fused(g, std::move(b), {h, x, alpha}, name);
}

inline std::vector<Variant> ntrans(int bs) {
  KernelGraph g;
  const ir::Dims dims{8 * bs, kHidden};
  TensorRef h = g.input("H", dims, DType::f16);
  TensorRef x = g.input("X", dims, DType::f16);
  TensorRef alpha = g.input("alpha", dims, DType::f16);
  g.mark_output(ntrans_node(g, h, x, alpha, "fused_ntrans"), "out");
  std::vector<Variant> out;
  out.push_back({"row", std::move(g)});
  return out;
}

// Row chains besides ntrans's for the register rows (codegen_block_rows.cpp), a block per row:
// layer_norm with a [width] weight and bias, silu, saved through a sum accumulator; and the
// product with X through a max accumulator, saved too.
inline KernelGraph row_chain_graph(DType t, int64_t rows, int64_t width) {
  KernelGraph g;
  TensorRef x = g.input("X", {rows, width}, t);
  TensorRef w = g.input("W", {width}, t);
  TensorRef bias = g.input("B", {width}, t);
  BlockGraph b({{rows, 1, 1}}, 1, {g.type(x), g.type(w), g.type(bias)});
  int32_t xi = b.iterator(0, kOnX0, kReplicate);
  int32_t wi = b.iterator(1, kAll, kReplicate);
  int32_t bi = b.iterator(2, kAll, kReplicate);
  const ir::LayerNormOp norm{.normalized_shape = {width}, .has_weight = true, .has_bias = true};
  int32_t act = b.add(ir::UnaryOp{ir::UnaryFn::silu}, {b.add(norm, {xi, wi, bi})});
  b.save(b.accumulate(AccumFn::sum, act), kOnX0);
  b.save(b.accumulate(AccumFn::max, b.add(ir::BinaryOp{ir::BinaryFn::mul}, {act, xi})), kOnX0);
  std::vector<TensorRef> outs = fused_outputs(g, std::move(b), {x, w, bias}, "row_chain");
  g.mark_output(outs[0], "silu");
  g.mark_output(outs[1], "product");
  return g;
}

// A fused linear, then the kernel-level softmax.
inline std::vector<Variant> gemm_softmax(int) {
  std::vector<Variant> out;
  for (auto [n, kc] : {std::pair{64, 256}, {32, 512}, {256, 64}, {128, 128}}) {
    KernelGraph g;
    TensorRef x = g.input("X", {8, 2048}, DType::f16);
    TensorRef w = g.input("W", {2048, 32000}, DType::f16);
    TensorRef logits = linear_node(g, x, w, std::nullopt, n, kc, "fused_linear");
    g.mark_output(g.softmax(logits, -1), "out");
    out.push_back({fmt::format("n{}_k{}", n, kc), std::move(g)});
  }
  for (auto [n, s, kc] : {std::array<int64_t, 3>{256, 4, 64}, {640, 8, 32}}) {
    KernelGraph g;
    TensorRef x = g.input("X", {8, 2048}, DType::f16);
    TensorRef w = g.input("W", {2048, 32000}, DType::f16);
    TensorRef parts = linear_parts(g, x, w, n, s, kc, "linear_parts");
    TensorRef logits = linear_finish(g, parts, std::nullopt, s, 128, "linear_finish");
    g.mark_output(g.softmax(logits, -1), "out");
    out.push_back({fmt::format("split{}_n{}_k{}", s, n, kc), std::move(g)});
  }
  return out;
}

// A fused linear, then the kernel-level layer_norm.
inline std::vector<Variant> gemm_layernorm(int) {
  std::vector<Variant> out;
  for (auto [n, kc] : {std::pair{32, 256}, {16, 512}, {32, 512}}) {
    KernelGraph g;
    TensorRef x = g.input("X", {16, kHidden}, DType::f16);
    TensorRef w = g.input("W", {kHidden, kHidden}, DType::f16);
    TensorRef proj = linear_node(g, x, w, std::nullopt, n, kc, "fused_linear");
    g.mark_output(g.layer_norm(proj, {kHidden}), "out");
    out.push_back({fmt::format("n{}_k{}", n, kc), std::move(g)});
  }
  for (auto [n, s, kc] : {std::array<int64_t, 3>{256, 16, 64}, {128, 16, 128}}) {
    KernelGraph g;
    TensorRef x = g.input("X", {16, kHidden}, DType::f16);
    TensorRef w = g.input("W", {kHidden, kHidden}, DType::f16);
    TensorRef parts = linear_parts(g, x, w, n, s, kc, "linear_parts");
    TensorRef proj = linear_finish(g, parts, std::nullopt, s, 64, "linear_finish");
    g.mark_output(g.layer_norm(proj, {kHidden}), "out");
    out.push_back({fmt::format("split{}_n{}_k{}", s, n, kc), std::move(g)});
  }
  return out;
}

// One of the Llama MLP's projections: blocks of n columns walking K by kc, in one kernel, or
// split over K (`splits` > 1) into partials and a second kernel that sums them.
struct Projection {
  int64_t n, splits, kc;
  std::string name() const {
    return splits == 1 ? fmt::format("n{}_k{}", n, kc)
                       : fmt::format("split{}_n{}_k{}", splits, n, kc);
  }
};

// rms_norm(X) · Wgu as `p` tiles it.
inline TensorRef norm_gate_up(KernelGraph& g, TensorRef x, TensorRef gain, TensorRef wgu,
                              const Projection& p) {
  if (p.splits == 1) return rmsnorm_linear_node(g, x, gain, wgu, p.n, p.kc, "fused_norm_gate_up");
  auto [parts, ms] =
      rmsnorm_linear_parts(g, x, gain, wgu, p.n, p.splits, p.kc, "norm_gate_up_parts");
  return rmsnorm_linear_finish(g, parts, ms, p.splits, 64, "norm_gate_up_finish");
}

// silu(gate) ⊙ up · Wd + X as `p` tiles it: silu · mul runs on the loop's tiles of gate and up,
// ahead of the product; the residual is added in the one kernel, or in the split's finish.
inline TensorRef mlp_down(KernelGraph& g, TensorRef gate, TensorRef up, TensorRef wd, TensorRef x,
                          const Projection& p) {
  const int64_t inter = g.type(gate).dims[1];
  const bool split = p.splits > 1;
  std::vector<ir::TensorType> operands{g.type(gate), g.type(up), g.type(wd)};
  if (!split) operands.push_back(g.type(x));
  BlockGraph b({{kHidden / p.n, p.splits, 1}}, inter / p.splits / p.kc, operands);
  int32_t gi = b.iterator(0, split ? kSplitRows : kAll, 1);
  int32_t ui = b.iterator(1, split ? kSplitRows : kAll, 1);
  int32_t wi = b.iterator(2, split ? kSplitWeight : kOnX1, 0);
  int32_t h =
      b.add(ir::BinaryOp{ir::BinaryFn::mul}, {b.add(ir::UnaryOp{ir::UnaryFn::silu}, {gi}), ui});
  int32_t down = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {h, wi}));
  if (split) {
    b.save(down, kStackParts);
    TensorRef parts = fused(g, std::move(b), {gate, up, wd}, "down_parts");
    return linear_finish(g, parts, x, p.splits, 64, "down_finish");
  }
  int32_t xi = b.iterator(3, kOnX1, kReplicate);
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::add}, {down, b.accumulate(AccumFn::mean, xi)}), kOnX1);
  return fused(g, std::move(b), {gate, up, wd, x}, "fused_mlp_down");
}

// rms_norm · Wgu, the split into gate and up halves, silu(g)·u fused into the down projection
// with the residual add; each projection in one kernel or split over K.
inline std::vector<Variant> llama_mlp_block(int bs) {
  std::vector<Variant> out;
  const int64_t inter = 14336;
  // Grids of more than one wave keep the weights in the for-loop's stages. At bs1, 112 blocks of
  // 256 columns for gate_up and 128 of 32 (or 64 pairs of 64) for down stream them, as
  // rmsnorm_linear's and gated_mlp's kernels do. At bs8 such streams took 115.9-130.4 µs against
  // the library products' 100.4 (docs/design/cuda-findings.md): down's staged A, 8 rows of
  // all of K, leaves its weight no room unless split over K, and the 8-row gate_up streams slowly.
  // With pairs staging half of K each, down n64_k512 streams whole, but the two streams took
  // 136.0-138.3 µs against 98.8, left out. Not profiled; the likely bound is rmsnorm_linear
  // bs8's: the for-loops' per-element work (docs/design/cuda-findings.md, streams of 8 and 16
  // rows).
  std::vector<std::pair<Projection, Projection>> tilings{
      {{64, 1, 256}, {32, 1, 256}},
      {{224, 1, 128}, {32, 1, 512}},
      {{256, 4, 64}, {256, 16, 64}},
      {{512, 4, 32}, {256, 8, 64}},
  };
  if (bs == 1)
    tilings.insert(tilings.end(),
                   {{{256, 1, 4096}, {64, 1, 2048}}, {{256, 1, 2048}, {32, 1, 2048}}});
  for (const auto& [up_p, down_p] : tilings) {
    KernelGraph g;
    TensorRef x = g.input("X", {bs, kHidden}, DType::f16);
    TensorRef gain = g.input("G", {kHidden}, DType::f16);
    TensorRef wgu = g.input("Wgu", {kHidden, 2 * inter}, DType::f16);
    TensorRef wd = g.input("Wd", {inter, kHidden}, DType::f16);
    TensorRef gu = norm_gate_up(g, x, gain, wgu, up_p);
    std::vector<TensorRef> halves =
        g.add_node(ir::SplitOp{.dim = 1, .sizes = {inter, inter}}, {gu}, "split");
    g.mark_output(mlp_down(g, halves[0], halves[1], wd, x, down_p), "out");
    out.push_back({up_p.name() + "_down_" + down_p.name(), std::move(g)});
  }
  // Library products around fused passes: the norm as its own kernel, both projections as
  // kernel-level matmuls (cuBLAS calls where cuBLAS loaded), and between them silu(g) · u in one
  // kernel of 64-column blocks, where the plain graph takes two.
  {
    KernelGraph g;
    TensorRef x = g.input("X", {bs, kHidden}, DType::f16);
    TensorRef gain = g.input("G", {kHidden}, DType::f16);
    TensorRef wgu = g.input("Wgu", {kHidden, 2 * inter}, DType::f16);
    TensorRef wd = g.input("Wd", {inter, kHidden}, DType::f16);
    TensorRef gu = g.matmul(g.rms_norm(x, {kHidden}, gain), wgu);
    std::vector<TensorRef> halves =
        g.add_node(ir::SplitOp{.dim = 1, .sizes = {inter, inter}}, {gu}, "split");
    TensorRef h = silu_mul_node(g, halves[0], halves[1], 64);
    g.mark_output(g.binary(ir::BinaryFn::add, g.matmul(h, wd), x), "out");
    out.push_back({"mm_silu_mul_mm", std::move(g)});
  }
  return out;
}

// Not a suite workload: the shapes that cover the register-streamed weights' cases
// (codegen_block_stream.cpp), for the compile and GPU tests. m rows: 3 (one 8-row half, five of
// its rows padding) or 16 (two halves); 64-column groups shared by warps that split K (n64) and
// eight groups a warp each (n512); sixteen groups (two accumulator sets a warp); 32-column groups
// (8-byte loads) with gate and up sharing one staged X; unit counts that are no multiple of the
// loads in flight; and by TMA, three 16-column tiles (n48: unswizzled rows, each warp on all
// three). W is wider than the tiles, so that a wrong column mapping reads the wrong columns.
inline KernelGraph register_stream_graph(DType t, int64_t m) {
  KernelGraph g;
  TensorRef x = g.input("X", {m, 1024}, t);
  TensorRef gain = g.input("G", {1024}, t);
  TensorRef w = g.input("W", {1024, 1024}, t);
  TensorRef w2 = g.input("W2", {1024, 1024}, t);
  g.mark_output(rmsnorm_linear_node(g, x, gain, w, 64, 256, "norm_linear"), "a");
  g.mark_output(linear_node(g, x, w, std::nullopt, 512, 32, "linear_n512"), "b");
  g.mark_output(linear_node(g, x, w, std::nullopt, 1024, 16, "linear_n1024"), "c");
  g.mark_output(gated_node(g, x, w, w2, 32, 128, "gated_n32"), "d");
  TensorRef narrow = g.input("W3", {1024, 96}, t);
  g.mark_output(linear_node(g, x, narrow, std::nullopt, 48, 128, "linear_n48"), "e");
  return g;
}

// The variants of a workload by its suite name.
inline std::vector<Variant> variants(const std::string& workload, int bs) {
  if (workload == "rmsnorm_linear") return rmsnorm_linear(bs);
  if (workload == "gated_mlp") return gated_mlp(bs);
  if (workload == "gqa") return gqa(bs);
  if (workload == "lora") return lora(bs);
  if (workload == "ntrans") return ntrans(bs);
  if (workload == "gemm_softmax") return gemm_softmax(bs);
  if (workload == "gemm_layernorm") return gemm_layernorm(bs);
  if (workload == "llama_mlp_block") return llama_mlp_block(bs);
  fail("no hand-built CUDA µGraph for workload '{}'", workload);
}

}  // namespace yirage::cuda_suite
