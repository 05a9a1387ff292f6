// The block-graph IR additions the search needs: the rms accumulator's eps and layer_norm as a
// block op, kept in step across JSON, DOT, the literal executor and the fingerprint evaluator.
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "support/error.h"
#include "verify/verify.h"

namespace yirage::ir {
namespace {

using testing::kAllReplicated;

// rms_norm(X, eps) · W with the norm folded through the matmul, as the search finds it.
BlockGraph rms_eps_block(double eps) {
  BlockGraph g({{3, 1, 1}}, 4, {{DType::f32, {4, 32}}, {DType::f32, {32, 24}}});
  int32_t x = g.iterator(0, kAllReplicated, 1);
  int32_t w = g.iterator(1, {1, kReplicate, kReplicate}, 0);
  int32_t sum = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w}));
  int32_t mean = g.add(ReduceOp{ReduceFn::mean, 1}, {g.add(UnaryOp{UnaryFn::square}, {x})});
  int32_t rms = g.accumulate(AccumFn::rms, mean, eps);
  g.save(g.add(BinaryOp{BinaryFn::div}, {sum, rms}), {1, kReplicate, kReplicate});
  return g;
}

KernelGraph rms_eps_kernel(double eps) {
  KernelGraph g;
  auto x = g.input("X", {4, 32}, DType::f32);
  auto w = g.input("W", {32, 24}, DType::f32);
  g.mark_output(g.matmul(g.rms_norm(x, {32}, std::nullopt, eps), w), "out");
  return g;
}

TEST(BlockIrExtensions, RmsAccumulatorEps) {
  const double eps = 0.25;  // large, so that forgetting it shows in floats too
  const BlockGraph block = rms_eps_block(eps);
  const BlockGraph back = block_graph_from_json(to_json(block));
  EXPECT_EQ(to_json(back), to_json(block));
  EXPECT_NE(to_json(block).dump().find("\"eps\":0.25"), std::string::npos);
  EXPECT_NE(to_dot(block).find("accum rms"), std::string::npos);

  std::mt19937_64 rng(5);
  std::vector<HostTensor> in = {testing::random_tensor(block.operands()[0], rng),
                                testing::random_tensor(block.operands()[1], rng)};
  testing::expect_close(verify::run_block_graph(block, in)[0],
                        verify::run_reference(rms_eps_kernel(eps), in)[0]);

  verify::FingerprintOptions o;
  o.seed = 9;
  EXPECT_TRUE(verify::check_equivalent(rms_eps_kernel(eps), block, o).equivalent);
  EXPECT_FALSE(verify::check_equivalent(rms_eps_kernel(eps), rms_eps_block(0.0), o).equivalent);
  EXPECT_FALSE(verify::check_equivalent(rms_eps_kernel(0.0), block, o).equivalent);

  // Only rms has an eps, and it is finite and not negative.
  BlockGraph g({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}});
  int32_t x = g.iterator(0, kAllReplicated, 1);
  EXPECT_THROW(g.accumulate(AccumFn::sum, x, 1e-6), Error);
  EXPECT_THROW(g.accumulate(AccumFn::rms, x, -1.0), Error);
}

TEST(BlockIrExtensions, LayerNormRunsOnTiles) {
  // layer_norm(X · W): blocks take whole rows, the loop walks K, the norm runs after it.
  BlockGraph block({{4, 1, 1}}, 4, {{DType::f32, {8, 32}}, {DType::f32, {32, 16}}});
  int32_t x = block.iterator(0, {0, kReplicate, kReplicate}, 1);
  int32_t w = block.iterator(1, kAllReplicated, 0);
  int32_t proj = block.accumulate(AccumFn::sum, block.add(MatmulOp{}, {x, w}));
  int32_t ln = block.add(LayerNormOp{.normalized_shape = {16}}, {proj});
  block.save(ln, {0, kReplicate, kReplicate});
  EXPECT_EQ(block_op_name(block.nodes()[size_t(ln)].op), "layer_norm");
  EXPECT_EQ(to_json(block_graph_from_json(to_json(block))), to_json(block));

  KernelGraph kernel;
  auto kx = kernel.input("X", {8, 32}, DType::f32);
  auto kw = kernel.input("W", {32, 16}, DType::f32);
  kernel.mark_output(kernel.layer_norm(kernel.matmul(kx, kw), {16}), "out");

  std::mt19937_64 rng(6);
  std::vector<HostTensor> in = {testing::random_tensor(block.operands()[0], rng),
                                testing::random_tensor(block.operands()[1], rng)};
  testing::expect_close(verify::run_block_graph(block, in)[0],
                        verify::run_reference(kernel, in)[0]);
  verify::FingerprintOptions o;
  o.seed = 10;
  EXPECT_TRUE(verify::check_equivalent(kernel, block, o).equivalent);
  // A norm over a partial row (the loop walking the normalized dim) is another function.
  BlockGraph partial({{4, 1, 1}}, 1, {{DType::f32, {8, 32}}, {DType::f32, {32, 16}}});
  int32_t px = partial.iterator(0, kAllReplicated, kReplicate);
  int32_t pw = partial.iterator(1, {1, kReplicate, kReplicate}, kReplicate);
  int32_t pp = partial.accumulate(AccumFn::sum, partial.add(MatmulOp{}, {px, pw}));
  partial.save(partial.add(LayerNormOp{.normalized_shape = {4}}, {pp}),
               {1, kReplicate, kReplicate});
  EXPECT_FALSE(verify::check_equivalent(kernel, partial, o).equivalent);
}

}  // namespace
}  // namespace yirage::ir
