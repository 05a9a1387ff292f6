// Block graphs: tile inference and phases, the validity rules and their errors, and literal
// execution of fused kernels compared with the reference executor on the kernel graphs they
// replace, in every float dtype.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "ir/block_graph.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::ir {
namespace {

using test_util::error_of;
using testing::expect_close;
using ::testing::HasSubstr;
using testing::kAllReplicated;
using testing::random_tensor;
using testing::reshaped;
using ::testing::StartsWith;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Runs the block graph on `operands` and the kernel graph on `inputs`; one output each.
void expect_same(const BlockGraph& block, const std::vector<HostTensor>& operands,
                 const KernelGraph& kernel, const std::vector<HostTensor>& inputs) {
  block.validate({});
  std::vector<HostTensor> fused = verify::run_block_graph(block, operands);
  std::vector<HostTensor> reference = verify::run_reference(kernel, inputs);
  ASSERT_EQ(fused.size(), 1u);
  ASSERT_EQ(reference.size(), 1u);
  expect_close(fused[0], reference[0]);
}

// ---------------------------------------------------------------------------------------------
// Fused kernels against the reference

TEST(BlockExecutor, RmsNormLinear) {
  std::mt19937_64 rng(1);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph kernel = testing::rmsnorm_linear_kernel(dtype);
    std::vector<HostTensor> inputs;
    for (TensorRef in : kernel.inputs()) inputs.push_back(random_tensor(kernel.type(in), rng));
    expect_same(testing::rmsnorm_linear_block(dtype),
                {inputs[0], reshaped(inputs[1], {32, 1}), inputs[2]}, kernel, inputs);
  }
}

TEST(BlockExecutor, GatedMlp) {
  std::mt19937_64 rng(2);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph kernel = testing::gated_mlp_kernel(dtype);
    std::vector<HostTensor> inputs;
    for (TensorRef in : kernel.inputs()) inputs.push_back(random_tensor(kernel.type(in), rng));
    expect_same(testing::gated_mlp_block(dtype), inputs, kernel, inputs);
  }
}

TEST(BlockExecutor, AttentionWithoutMaxSubtraction) {
  std::mt19937_64 rng(3);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph kernel = testing::attention_kernel(dtype, false);
    std::vector<HostTensor> inputs;
    for (TensorRef in : kernel.inputs()) inputs.push_back(random_tensor(kernel.type(in), rng));
    expect_same(testing::attention_exp_block(dtype), inputs, kernel, inputs);
  }
}

TEST(BlockExecutor, AttentionSoftmaxWithRescaledSum) {
  std::mt19937_64 rng(4);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph kernel = testing::attention_kernel(dtype, true);
    std::vector<HostTensor> inputs;
    for (TensorRef in : kernel.inputs()) inputs.push_back(random_tensor(kernel.type(in), rng));
    expect_same(testing::attention_softmax_block(dtype), inputs, kernel, inputs);
  }
}

// Scores up to several hundred overflow exp in f32; only the rescaled form stays finite. The
// chunks' maxima differ widely, so the rescale of earlier chunks is exercised.
TEST(BlockExecutor, RescaledSumSurvivesLargeScores) {
  std::mt19937_64 rng(5);
  KernelGraph kernel = testing::attention_kernel(DType::f32, true);
  std::vector<HostTensor> inputs;
  for (TensorRef in : kernel.inputs())
    inputs.push_back(random_tensor(kernel.type(in), rng, -8.0f, 8.0f));
  expect_same(testing::attention_softmax_block(DType::f32), inputs, kernel, inputs);
  std::vector<HostTensor> plain =
      verify::run_block_graph(testing::attention_exp_block(DType::f32), inputs);
  bool overflowed = false;
  for (float v : plain[0].to_floats()) overflowed |= !std::isfinite(v);
  EXPECT_TRUE(overflowed) << "the inputs do not reach exp's overflow; the test proves nothing";
}

TEST(BlockExecutor, SplitKPartialsThenKernelSum) {
  std::mt19937_64 rng(6);
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph matmul;
    auto x = matmul.input("X", {testing::kSplitM, testing::kSplitK}, dtype);
    auto w = matmul.input("W", {testing::kSplitK, testing::kSplitN}, dtype);
    matmul.mark_output(matmul.matmul(x, w));
    HostTensor xv = random_tensor(matmul.type(x), rng), wv = random_tensor(matmul.type(w), rng);

    BlockGraph block = testing::split_k_block(dtype);
    block.validate({});
    std::vector<HostTensor> partials =
        verify::run_block_graph(block, {reshaped(xv, {1, testing::kSplitM, testing::kSplitK}), wv});
    ASSERT_EQ(partials[0].type.dims, (Dims{testing::kSplits, testing::kSplitM, testing::kSplitN}));
    KernelGraph rest;
    auto p = rest.input("partials", partials[0].type.dims, dtype);
    rest.mark_output(rest.reduce(ReduceFn::sum, p, 0, false));
    expect_close(verify::run_reference(rest, partials)[0],
                 verify::run_reference(matmul, {xv, wv})[0]);
  }
}

// Every accumulator function and reduce_to_width, on one operand [4, 24] walked in 3 chunks.
TEST(BlockExecutor, AccumulatorsAndReduceToWidth) {
  std::mt19937_64 rng(7);
  const TensorType type{DType::f32, {4, 24}};
  HostTensor xv = random_tensor(type, rng);
  struct Case {
    AccumFn fn;
    std::function<int32_t(BlockGraph&, int32_t)> chunk;  // the in-loop op before the accumulator
    std::function<TensorRef(KernelGraph&, TensorRef)> expected;
  };
  const Case cases[] = {
      {AccumFn::sum,
       [](BlockGraph& g, int32_t x) {
         return g.add(ReduceToWidthOp{1, 2}, {x});
       },
       [](KernelGraph& k, TensorRef x) {
         // Each chunk of 8 columns sums runs of 4 into 2 columns; summed over the chunks, column
         // j gets the elements whose position within their chunk is in run j.
         auto parts = k.split(x, 1, {4, 4, 4, 4, 4, 4});
         auto run0 = k.add(k.add(parts[0], parts[2]), parts[4]);
         auto run1 = k.add(k.add(parts[1], parts[3]), parts[5]);
         return k.concat({k.reduce(ReduceFn::sum, run0, 1), k.reduce(ReduceFn::sum, run1, 1)}, 1);
       }},
      {AccumFn::mean,
       [](BlockGraph& g, int32_t x) {
         return g.add(ReduceOp{ReduceFn::mean, 1}, {x});
       },
       [](KernelGraph& k, TensorRef x) { return k.reduce(ReduceFn::mean, x, 1); }},
      {AccumFn::max,
       [](BlockGraph& g, int32_t x) {
         return g.add(ReduceOp{ReduceFn::max, 1}, {x});
       },
       [](KernelGraph& k, TensorRef x) { return k.reduce(ReduceFn::max, x, 1); }},
      {AccumFn::rms,
       [](BlockGraph& g, int32_t x) {
         return g.add(ReduceOp{ReduceFn::mean, -1}, {g.add(UnaryOp{UnaryFn::square}, {x})});
       },
       [](KernelGraph& k, TensorRef x) {
         return k.sqrt(k.reduce(ReduceFn::mean, k.square(x), 1));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(accum_name(c.fn));
    BlockGraph block({{2, 1, 1}}, 3, {type});
    int32_t x = block.iterator(0, {0, kReplicate, kReplicate}, 1);  // [2, 8]
    block.save(block.accumulate(c.fn, c.chunk(block, x)), {0, kReplicate, kReplicate});
    KernelGraph kernel;
    kernel.mark_output(c.expected(kernel, kernel.input("x", type.dims, type.dtype)));
    expect_same(block, {xv}, kernel, {xv});
  }
}

// An imap and fmap on the same dim: block b reads chunk b, iteration i the i-th part of it.
TEST(BlockExecutor, IteratorLayoutWhenGridAndLoopShareADim) {
  BlockGraph g({{2, 1, 1}}, 3, {{DType::f32, {12}}});
  int32_t x = g.iterator(0, {0, kReplicate, kReplicate}, 0);
  EXPECT_EQ(g.nodes()[size_t(x)].tile.dims, (Dims{2}));
  g.save(g.accumulate(AccumFn::sum, x), {0, kReplicate, kReplicate});
  // Element i holds 2^i, so each sum names exactly the elements that went into it.
  HostTensor in({DType::f32, {12}});
  for (int64_t i = 0; i < 12; ++i) in.set(i, float(int64_t(1) << i));
  // Block 0 reads elements 0..5 as {0, 1} {2, 3} {4, 5}; block 1 reads 6..11 the same way.
  std::vector<float> out = verify::run_block_graph(g, {in})[0].to_floats();
  EXPECT_THAT(out,
              ::testing::ElementsAre(1 + 4 + 16, 2 + 8 + 32, 64 + 256 + 1024, 128 + 512 + 2048));
}

TEST(BlockExecutor, OverlappingSaversAreCaught) {
  BlockGraph g({{2, 1, 1}}, 1, {{DType::f32, {4, 8}}});
  int32_t x = g.iterator(0, {1, kReplicate, kReplicate}, kReplicate);  // [4, 4]
  g.save(g.accumulate(AccumFn::sum, x), kAllReplicated);               // both blocks write [4, 4]
  EXPECT_THAT(error_of([&] { g.validate({}); }),
              HasSubstr("grid axis x has 2 blocks but is not in the omap"));
  HostTensor in({DType::f32, {4, 8}});
  EXPECT_THAT(error_of([&] { verify::run_block_graph(g, {in}); }),
              HasSubstr("output 0 (f32[4, 4]) element [0, 0] was written 2 times"));
}

TEST(BlockExecutor, RejectsMismatchedOperands) {
  BlockGraph g = testing::gated_mlp_block(DType::f32);
  HostTensor x({DType::f32, {8, 32}}), w({DType::f32, {32, 16}}), w16({DType::f16, {32, 16}});
  EXPECT_EQ(error_of([&] {
              verify::run_block_graph(g, {x, w});
            }),
            "run_block_graph: the block graph takes 3 operands, got 2");
  EXPECT_EQ(error_of([&] {
              verify::run_block_graph(g, {x, w, w16});
            }),
            "run_block_graph: operand 2: expected f32[32, 16], got f16[32, 16]");
}

// ---------------------------------------------------------------------------------------------
// Tile inference, phases and sizes

BlockLimits limits_of(int64_t in_loop, int64_t total, int64_t blocks,
                      StreamedWeights streamed = {}) {
  BlockLimits limits;
  limits.max_tile_bytes_in_loop = in_loop;
  limits.max_tile_bytes_total = total;
  limits.max_grid_blocks = blocks;
  limits.streamed = std::move(streamed);
  return limits;
}

TEST(BlockGraph, InfersTilesPhasesAndOutputs) {
  BlockGraph g = testing::rmsnorm_linear_block(DType::f16);
  const std::vector<BlockNode>& n = g.nodes();
  EXPECT_EQ(n[0].tile, (TensorType{DType::f16, {4, 8}}));  // X [4, 32]: loop of 4 over dim 1
  EXPECT_EQ(n[1].tile, (TensorType{DType::f16, {8, 1}}));
  EXPECT_EQ(n[2].tile, (TensorType{DType::f16, {8, 8}}));  // W [32, 24]: 3 blocks over dim 1
  EXPECT_EQ(n[6].tile.dims, (Dims{4, 1}));
  EXPECT_EQ(std::get<ReduceOp>(n[6].op).dim, 1);
  const BlockPhase expected[] = {
      BlockPhase::in_loop,   BlockPhase::in_loop,   BlockPhase::in_loop, BlockPhase::in_loop,
      BlockPhase::in_loop,   BlockPhase::in_loop,   BlockPhase::in_loop, BlockPhase::post_loop,
      BlockPhase::post_loop, BlockPhase::post_loop, BlockPhase::saver};
  ASSERT_EQ(n.size(), std::size(expected));
  for (size_t i = 0; i < n.size(); ++i) EXPECT_EQ(g.phase(int32_t(i)), expected[i]) << i;
  EXPECT_EQ(g.output_types(), (std::vector<TensorType>{{DType::f16, {4, 24}}}));
  // In the loop: iterators at 2 bytes (32 + 8 + 64 elements), computed tiles at 4 bytes
  // (gw 64, partial 32, squares 32, chunk mean 4). After it: sum 32, rms 4, out 32 at 4 bytes.
  EXPECT_EQ(g.in_loop_bytes(), 2 * (32 + 8 + 64) + 4 * (64 + 32 + 32 + 4));
  EXPECT_EQ(g.total_bytes(), g.in_loop_bytes() + 4 * (32 + 4 + 32));
}

// The cuda lowering's rules as the limits count them: three buffers of each tile the loop walks
// (X, G and W), and none for the tiles it computes where they are read or folds into their
// accumulators from registers (G ⊙ W, the partial product, the squares and their chunk mean).
TEST(BlockGraph, LimitsCountPipelineBuffersAndNotRegisterTiles) {
  const BlockGraph g = testing::rmsnorm_linear_block(DType::f16);
  RegisterTiles elementwise, summed;
  elementwise.single_use_elementwise = true;
  summed.summed_into_accumulator = true;
  const RegisterTiles both{true, true};
  std::vector<int32_t> kept;
  for (int32_t id = 0; id < int32_t(g.nodes().size()); ++id)
    if (g.in_registers(id, both)) kept.push_back(id);
  EXPECT_EQ(kept, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_TRUE(g.in_registers(3, elementwise) && g.in_registers(5, elementwise));
  EXPECT_TRUE(g.in_registers(4, summed) && g.in_registers(6, summed));
  EXPECT_FALSE(g.in_registers(3, summed) || g.in_registers(4, elementwise));
  const int64_t walked = 2 * (32 + 8 + 64), in_registers = 4 * (64 + 32 + 32 + 4);
  const int64_t total = g.total_bytes() + 2 * walked - in_registers;
  BlockLimits limits = limits_of(0, total, 0);
  limits.pipeline_stages = 3;
  limits.in_registers = both;
  EXPECT_EQ(g.tile_overrun(limits).kind, BlockGraph::TileOverrun::Kind::none);
  limits.max_tile_bytes_total = total - 1;
  EXPECT_EQ(g.tile_overrun(limits).bytes, total);
  EXPECT_EQ(error_of([&] { g.validate(limits); }),
            fmt::format("block graph: the tiles take {} bytes in all, with 3 buffers of each tile "
                        "the loop walks, more than the limit of {}",
                        total, total - 1));
  // Stages past the loop's range (4 here) are not kept.
  limits.pipeline_stages = 8;
  EXPECT_EQ(g.tile_overrun(limits).bytes, total + walked);
}

TEST(BlockGraph, RescaledSumCountsItsRunningMax) {
  BlockGraph g = testing::attention_softmax_block(DType::f32);
  // Node 8 is rescaled_sum(pv [1, 4, 8], m [1, 4, 1]).
  ASSERT_EQ(block_op_label(g.nodes()[8].op), "accum rescaled_sum");
  EXPECT_EQ(g.tile_bytes(8), 4 * (32 + 4));
}

TEST(BlockGraph, ValidateEnforcesLimits) {
  BlockGraph g = testing::gated_mlp_block(DType::f32);
  const int64_t in_loop = g.in_loop_bytes(), total = g.total_bytes();
  g.validate(limits_of(in_loop, total, 4));  // every limit exactly met
  EXPECT_EQ(
      error_of([&] { g.validate(limits_of(in_loop - 1, 0, 0)); }),
      fmt::format("block graph: the loop body's tiles take {} bytes, more than the limit of {}",
                  in_loop, in_loop - 1));
  EXPECT_EQ(error_of([&] { g.validate(limits_of(0, total - 1, 0)); }),
            fmt::format("block graph: the tiles take {} bytes in all, more than the limit of {}",
                        total, total - 1));
  EXPECT_EQ(error_of([&] { g.validate(limits_of(0, 0, 3)); }),
            "block graph: the grid [2, 2, 1] has 4 blocks, more than the limit of 3");
}

// x [rows, 4096] times a 16-bit weight [4096, cols * blocks] in 8 iterations of K, the
// product summed over the loop: the streamed weights' form (StreamedWeights).
BlockGraph streamed_product(int64_t rows, int64_t cols, DType dtype = DType::f16,
                            bool finish = true) {
  const int64_t blocks = 6144 / cols;
  BlockGraph g({{blocks, 1, 1}}, 8, {{dtype, {rows, 4096}}, {dtype, {4096, 6144}}});
  const int32_t x = g.iterator(0, kAllReplicated, 1);               // [rows, 512]
  const int32_t w = g.iterator(1, {1, kReplicate, kReplicate}, 0);  // [512, cols]
  const int32_t product = g.add(MatmulOp{}, {x, w});
  if (finish) g.save(g.accumulate(AccumFn::sum, product), {1, kReplicate, kReplicate});
  return g;
}

const StreamedWeights kStreamed{.max_rows = 16,
                                .k_multiple = 128,
                                .column_widths = {32, 64},
                                .max_staged_bytes = 1 << 16,
                                .max_blocks = 132};

TEST(BlockGraph, AWeightTileAProductStreamsIsNotHeld) {
  const BlockGraph g = streamed_product(1, 64);
  const int32_t w = 1;
  EXPECT_TRUE(g.streams(w, kStreamed));
  EXPECT_FALSE(g.streams(0, kStreamed));  // x is A, walked along its second dim
  EXPECT_FALSE(g.streams(w, {}));         // a description without streamed weights
  const int64_t held = 2 * 512 + 4 * 64;  // x's tile and the product's
  EXPECT_EQ(g.in_loop_bytes(), held + 2 * 512 * 64);
  EXPECT_EQ(g.in_loop_bytes(kStreamed), held);
  EXPECT_EQ(g.total_bytes(kStreamed), held + 4 * 64);  // and the sum
  EXPECT_EQ(g.staged_bytes(kStreamed), 1 * 4096 * 2);  // A for all 8 iterations
  const int64_t total = g.total_bytes(kStreamed) + g.staged_bytes(kStreamed);
  g.validate(limits_of(held, total, 96, kStreamed));
  EXPECT_THAT(error_of([&] { g.validate(limits_of(held, total, 96)); }),
              HasSubstr("the loop body's tiles take 66816 bytes"));
  // An A too large to stage: the weight is held.
  StreamedWeights small = kStreamed;
  small.max_staged_bytes = 4096;
  EXPECT_FALSE(g.streams(w, small));
  EXPECT_THAT(error_of([&] { g.validate(limits_of(held, total, 96, small)); }),
              HasSubstr("the loop body's tiles take 66816 bytes"));
}

TEST(BlockGraph, ProductsOfTwoAsStageBoth) {
  BlockGraph g({{96, 1, 1}}, 8,
               {{DType::f16, {1, 4096}},
                {DType::f16, {1, 4096}},
                {DType::f16, {4096, 6144}},
                {DType::f16, {4096, 6144}}});
  const int32_t x1 = g.iterator(0, kAllReplicated, 1), x2 = g.iterator(1, kAllReplicated, 1);
  const int32_t w1 = g.iterator(2, {1, kReplicate, kReplicate}, 0),
                w2 = g.iterator(3, {1, kReplicate, kReplicate}, 0);
  const int32_t a = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x1, w1}));
  const int32_t b = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x2, w2}));
  g.save(g.add(BinaryOp{BinaryFn::add}, {a, b}), {1, kReplicate, kReplicate});
  StreamedWeights one_a = kStreamed;
  one_a.max_staged_bytes = 12000;  // each A alone (8192 bytes) fits, both do not
  EXPECT_TRUE(g.streams(w1, one_a) && g.streams(w2, one_a));
  EXPECT_EQ(g.staged_bytes(one_a), 2 * 8192);
  EXPECT_EQ(error_of([&] { g.validate(limits_of(0, 0, 0, one_a)); }),
            "block graph: the streamed products hold 16384 bytes of A, more than the limit of "
            "12000");
}

TEST(BlockGraph, OnlyFewRowProductsOfAWeightReadOnceStream) {
  EXPECT_FALSE(streamed_product(32, 64).streams(1, kStreamed));             // rows
  EXPECT_FALSE(streamed_product(1, 128).streams(1, kStreamed));             // width
  EXPECT_FALSE(streamed_product(1, 64, DType::f32).streams(1, kStreamed));  // 32-bit weight
  StreamedWeights one_wave = kStreamed;
  one_wave.max_blocks = 64;  // the grid is 96 blocks
  EXPECT_FALSE(streamed_product(1, 64).streams(1, one_wave));
  StreamedWeights k1024 = kStreamed;
  k1024.k_multiple = 1024;  // the tile's K is 512
  EXPECT_FALSE(streamed_product(1, 64).streams(1, k1024));

  // A graph being built: the weight nothing reads yet, then its product nothing reads yet.
  BlockGraph g({{96, 1, 1}}, 8, {{DType::f16, {1, 4096}}, {DType::f16, {4096, 6144}}});
  const int32_t x = g.iterator(0, kAllReplicated, 1);
  const int32_t w = g.iterator(1, {1, kReplicate, kReplicate}, 0);
  EXPECT_FALSE(g.streams(w, kStreamed));
  EXPECT_TRUE(g.streams(w, kStreamed, true));
  const int32_t product = g.add(MatmulOp{}, {x, w});
  EXPECT_FALSE(g.streams(w, kStreamed));
  EXPECT_TRUE(g.streams(w, kStreamed, true));
  EXPECT_EQ(g.staged_bytes(kStreamed, true), 4096 * 2);
  // Read twice, or its product read by anything but a sum accumulator: held.
  BlockGraph twice = g;
  twice.add(UnaryOp{UnaryFn::exp}, {w});
  EXPECT_FALSE(twice.streams(w, kStreamed, true));
  BlockGraph scaled = g;
  scaled.add(UnaryOp{UnaryFn::square}, {product});
  EXPECT_FALSE(scaled.streams(w, kStreamed, true));
}

// ---------------------------------------------------------------------------------------------
// Builder errors: one line naming the block node, the op, its operand tiles and the rule

TEST(BlockGraphErrors, ImapDoesNotDivide) {
  BlockGraph g({{4, 1, 1}}, 1, {{DType::f32, {4, 30}}});
  EXPECT_EQ(error_of([&] {
              g.iterator(0, {1, kReplicate, kReplicate}, kReplicate);
            }),
            "block node 0: iterator(operand 0: f32[4, 30]): dim 1 of extent 30 does not divide "
            "into the 4 blocks of grid axis x");
}

TEST(BlockGraphErrors, FmapDoesNotDivide) {
  BlockGraph g({{2, 1, 1}}, 3, {{DType::f32, {4, 32}}});
  EXPECT_EQ(error_of([&] {
              g.iterator(0, {1, kReplicate, kReplicate}, 1);
            }),
            "block node 0: iterator(operand 0: f32[4, 32]): dim 1 of extent 16 per block does "
            "not divide into 3 iterations");
}

TEST(BlockGraphErrors, ImapNamesADimTwice) {
  BlockGraph g({{2, 2, 1}}, 1, {{DType::f32, {4, 32}}});
  EXPECT_EQ(error_of([&] {
              g.iterator(0, {1, 1, kReplicate}, kReplicate);
            }),
            "block node 0: iterator(operand 0: f32[4, 32]): imap names dim 1 for both grid axes "
            "x and y");
}

TEST(BlockGraphErrors, MapsOutOfRange) {
  BlockGraph g({{1, 1, 1}}, 1, {{DType::f32, {4, 32}}});
  EXPECT_THAT(error_of([&] {
                g.iterator(0, {kReplicate, 2, kReplicate}, kReplicate);
              }),
              HasSubstr("imap[1] = 2 is neither a dim of the rank-2 tensor nor -1 (replicate)"));
  EXPECT_THAT(error_of([&] {
                g.iterator(0, {-2, kReplicate, kReplicate}, kReplicate);
              }),
              HasSubstr("imap[0] = -2 is neither"));
  EXPECT_THAT(error_of([&] { g.iterator(0, kAllReplicated, 5); }),
              HasSubstr("fmap = 5 is neither a dim of the rank-2 operand nor -1"));
  int32_t acc = g.accumulate(AccumFn::sum, g.iterator(0, kAllReplicated, kReplicate));
  EXPECT_EQ(error_of([&] {
              g.save(acc, {0, 0, kReplicate});
            }),
            "block node 2: save(f32[4, 32]): omap names dim 0 for both grid axes x and y");
  EXPECT_THAT(error_of([&] {
                g.save(acc, {3, kReplicate, kReplicate});
              }),
              HasSubstr("omap[0] = 3 is neither a dim of the rank-2 tensor"));
}

TEST(BlockGraphErrors, BadOperandAndNodeIndices) {
  BlockGraph g({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}, {DType::f32, {8, 4}}});
  EXPECT_EQ(error_of([&] { g.iterator(2, kAllReplicated, kReplicate); }),
            "block node 0: iterator(operand 2): the fused kernel has 2 operands");
  EXPECT_EQ(error_of([&] { g.iterator(-1, kAllReplicated, kReplicate); }),
            "block node 0: iterator(operand -1): the fused kernel has 2 operands");
  int32_t a = g.iterator(0, kAllReplicated, kReplicate);
  EXPECT_EQ(error_of([&] {
              g.add(MatmulOp{}, {a, 1});
            }),
            "block node 1: matmul: operand 1 refers to block node 1; a node reads only nodes "
            "added before it (0 to 0)");
  EXPECT_EQ(error_of([&] { g.add(InputIteratorOp{0}, {a}); }),
            "block node 1: iterator(operand 0: f32[4, 8]): takes 0 operands, got 1");
}

TEST(BlockGraphErrors, SharedOpRulesNameTheBlockNode) {
  BlockGraph g({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}, {DType::f32, {16, 8}}});
  int32_t a = g.iterator(0, kAllReplicated, kReplicate);
  int32_t b = g.iterator(1, kAllReplicated, kReplicate);
  EXPECT_EQ(error_of([&] {
              g.add(MatmulOp{}, {a, b});
            }),
            "block node 2: matmul(f32[4, 8], f32[16, 8]): inner dims differ (8 vs 16)");
  EXPECT_EQ(error_of([&] {
              g.add(ReduceToWidthOp{1, 3}, {a});
            }),
            "block node 2: reduce_to_width(f32[4, 8]): width 3 must be >= 1 and divide dim 1's "
            "extent 8");
}

TEST(BlockGraphErrors, ALibraryMatmulIsKernelLevelOnly) {
  BlockGraph g({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}, {DType::f32, {8, 16}}});
  int32_t a = g.iterator(0, kAllReplicated, kReplicate);
  int32_t b = g.iterator(1, kAllReplicated, kReplicate);
  EXPECT_THAT(error_of([&] {
                g.add(MatmulOp{.library = true}, {a, b});
              }),
              StartsWith("block node 2: matmul: a library matmul is a kernel-level call"));
}

TEST(BlockGraphErrors, MixingPhases) {
  BlockGraph g({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}});
  int32_t x = g.iterator(0, kAllReplicated, 1);
  int32_t acc = g.accumulate(AccumFn::sum, x);
  EXPECT_EQ(error_of([&] {
              g.add(BinaryOp{BinaryFn::add}, {acc, x});
            }),
            "block node 2: add(f32[4, 4], f32[4, 4]): operand 0 (block node 1) runs after the "
            "loop, but operand 1 (block node 0) runs in the loop body; an op reads either in-loop "
            "tiles or post-loop tiles");
}

TEST(BlockGraphErrors, AccumulatorOfAPostLoopTile) {
  BlockGraph g({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}});
  int32_t acc = g.accumulate(AccumFn::sum, g.iterator(0, kAllReplicated, 1));
  EXPECT_EQ(error_of([&] { g.accumulate(AccumFn::max, acc); }),
            "block node 2: accum max(f32[4, 4]): operand 0 (block node 1) runs after the loop; "
            "an accumulator folds in-loop tiles");
}

TEST(BlockGraphErrors, SaverOfAnInLoopTileOrReadingASaver) {
  BlockGraph g({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}});
  int32_t x = g.iterator(0, kAllReplicated, 1);
  EXPECT_EQ(error_of([&] { g.save(x, kAllReplicated); }),
            "block node 1: save(f32[4, 4]): block node 0 runs in the loop body; a saver writes a "
            "tile computed after the loop (accumulate it first)");
  int32_t saved = g.save(g.accumulate(AccumFn::sum, x), kAllReplicated);
  EXPECT_EQ(error_of([&] { g.add(UnaryOp{UnaryFn::exp}, {saved}); }),
            "block node 3: exp: operand 0 is block node 2, a saver; savers produce no tile");
}

TEST(BlockGraphErrors, RescaledSumOperands) {
  BlockGraph g({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}, {DType::f32, {4, 6}}});
  int32_t v = g.iterator(0, kAllReplicated, 1);  // [4, 4]
  int32_t m = g.iterator(1, kAllReplicated, 1);  // [4, 3]
  EXPECT_EQ(error_of([&] { g.rescaled_sum(v, m); }),
            "block node 2: accum rescaled_sum(f32[4, 4], f32[4, 3]): m (operand 1) must "
            "broadcast to the shape of v (operand 0)");
  EXPECT_EQ(error_of([&] { g.accumulate(AccumFn::rescaled_sum, v); }),
            "block node 2: accum rescaled_sum(f32[4, 4]): takes 2 operands, got 1");
}

TEST(BlockGraphErrors, ConstructorChecks) {
  EXPECT_EQ(error_of([] {
              BlockGraph({{2, 0, 1}}, 1, {});
            }),
            "block graph: grid axis y has extent 0; extents must be >= 1");
  EXPECT_EQ(error_of([] {
              BlockGraph({{1, 1, 1}}, 0, {});
            }),
            "block graph: forloop_range 0 must be between 1 and 2^40");
  EXPECT_EQ(error_of([] {
              BlockGraph({{1, 1, 1}}, 1, {{DType::i32, {4}}});
            }),
            "block graph: operand 0 has dtype i32; fused kernels compute on f32, f16 or bf16");
  EXPECT_THAT(error_of([] {
                BlockGraph({{1, 1, 1}}, 1, {{DType::f32, {}}});
              }),
              StartsWith("block graph: operand 0 has shape []; operands have 1 to 4 dims"));
  EXPECT_THAT(error_of([] {
                BlockGraph({{1 << 20, 1 << 20, 1 << 20}}, 1, {});
              }),
              HasSubstr("more than 2^40 blocks"));
}

TEST(BlockGraphErrors, ValidateStructure) {
  BlockGraph no_saver({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}});
  no_saver.accumulate(AccumFn::sum, no_saver.iterator(0, kAllReplicated, kReplicate));
  EXPECT_EQ(error_of([&] { no_saver.validate({}); }),
            "block graph: no saver; a fused kernel writes at least one output");

  BlockGraph unused({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}, {DType::f32, {2}}});
  unused.save(unused.accumulate(AccumFn::sum, unused.iterator(0, kAllReplicated, kReplicate)),
              kAllReplicated);
  EXPECT_EQ(error_of([&] { unused.validate({}); }),
            "block graph: operand 1 (f32[2]) is loaded by no iterator");

  BlockGraph dead({{1, 1, 1}}, 1, {{DType::f32, {4, 8}}});
  int32_t x = dead.iterator(0, kAllReplicated, kReplicate);
  dead.add(UnaryOp{UnaryFn::exp}, {x});
  dead.save(dead.accumulate(AccumFn::sum, x), kAllReplicated);
  EXPECT_EQ(error_of([&] { dead.validate({}); }),
            "block node 1: exp computes a f32[4, 8] tile that no node reads");

  BlockGraph missing_axis({{1, 1, 3}}, 1, {{DType::f32, {3, 8}}});
  int32_t y = missing_axis.iterator(0, {kReplicate, kReplicate, 0}, kReplicate);
  missing_axis.save(missing_axis.accumulate(AccumFn::sum, y), {1, kReplicate, kReplicate});
  EXPECT_EQ(error_of([&] { missing_axis.validate({}); }),
            "block node 2: save(f32[1, 8]): grid axis z has 3 blocks but is not in the omap, so "
            "they would all write the same elements");
}

}  // namespace
}  // namespace yirage::ir
