// Abstract-expression pruning: prefixes of real solutions survive, foreign ones are cut.
#include <gtest/gtest.h>

#include "search/abstract_expr.h"
#include "search_targets.h"

namespace yirage::search {
namespace {

using ir::BinaryFn;
using ir::BinaryOp;
using ir::MatmulOp;
using ir::ReduceFn;
using ir::ReduceOp;
using ir::UnaryFn;
using ir::UnaryOp;

class RmsNormLinearExprs : public ::testing::Test {
 protected:
  void SetUp() override {
    target = ctx.of_graph(testing::small_target("rmsnorm_linear")).at(0);
    ctx.set_targets({target});
    x = ctx.input(0), g = ctx.input(1), w = ctx.input(2);
  }
  Poly op(ir::Op o, std::vector<Poly> in) { return ctx.of_op(o, in); }

  ExprContext ctx;
  Poly target, x, g, w;
};

TEST_F(RmsNormLinearExprs, TheFoldedNormSurvivesEveryStep) {
  const Poly gw = op(BinaryOp{BinaryFn::mul}, {w, g});
  const Poly partial = op(MatmulOp{}, {x, gw});
  const Poly squares = op(UnaryOp{UnaryFn::square}, {x});
  const Poly chunk_mean = op(ReduceOp{ReduceFn::mean, -1}, {squares});
  const Poly sum = ctx.of_block_op(ir::AccumulatorOp{ir::AccumFn::sum}, {partial}, false);
  const Poly rms = ctx.of_block_op(ir::AccumulatorOp{ir::AccumFn::rms, 1e-6}, {chunk_mean}, false);
  const Poly out = op(BinaryOp{BinaryFn::div}, {sum, rms});
  const std::vector<const Poly*> steps = {&x,       &g,          &w,   &gw,  &partial,
                                          &squares, &chunk_mean, &sum, &rms, &out};
  for (const Poly* p : steps) EXPECT_TRUE(ctx.may_be_part(*p)) << ctx.format(*p);
  EXPECT_EQ(out, target) << ctx.format(out) << " vs " << ctx.format(target);
}

TEST_F(RmsNormLinearExprs, ForeignPrefixesAreCut) {
  const Poly xw = op(MatmulOp{}, {x, w});
  for (const Poly& p : {op(UnaryOp{UnaryFn::exp}, {x}), op(UnaryOp{UnaryFn::silu}, {xw}),
                        op(UnaryOp{UnaryFn::square}, {xw}), op(BinaryOp{BinaryFn::div}, {x, w}),
                        op(BinaryOp{BinaryFn::add}, {x, w}),
                        op(BinaryOp{BinaryFn::mul}, {op(UnaryOp{UnaryFn::square}, {x}), x})})
    EXPECT_FALSE(ctx.may_be_part(p)) << ctx.format(p);
  // Without an op left that sums, x·x cannot grow into the Σ x·x of the norm.
  EXPECT_TRUE(ctx.may_be_part(op(UnaryOp{UnaryFn::square}, {x}), true));
  EXPECT_FALSE(ctx.may_be_part(op(UnaryOp{UnaryFn::square}, {x}), false));
}

TEST(AbstractExpr, AttentionNumeratorAndDenominatorAreParts) {
  ExprContext ctx;
  const Poly target = ctx.of_graph(testing::small_target("gqa")).at(0);
  ctx.set_targets({target});
  const Poly q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  const Poly e = ctx.of_op(UnaryOp{UnaryFn::exp}, {ctx.of_op(MatmulOp{}, {q, k})});
  const Poly num = ctx.of_op(MatmulOp{}, {e, v});
  const Poly den = ctx.of_op(ReduceOp{ReduceFn::sum, -1}, {e});
  EXPECT_TRUE(ctx.may_be_part(num));
  EXPECT_TRUE(ctx.may_be_part(den));
  EXPECT_EQ(ctx.of_op(BinaryOp{BinaryFn::div}, {ctx.sum(num), ctx.sum(den)}), target);
  EXPECT_FALSE(ctx.may_be_part(ctx.of_op(MatmulOp{}, {k, v})));
  EXPECT_FALSE(ctx.may_be_part(ctx.of_op(UnaryOp{UnaryFn::exp}, {q})));
}

TEST(AbstractExpr, SumsMustBeCompletedByOneCommonFactor) {
  ExprContext ctx;
  const Poly target = ctx.of_graph(testing::small_target("ntrans")).at(0);
  ctx.set_targets({target});
  const Poly h = ctx.input(0), x = ctx.input(1), alpha = ctx.input(2);
  ir::RmsNormOp rms{.normalized_shape = {32}};
  const Poly hn = ctx.of_op(rms, {h});
  const Poly hx = ctx.of_op(BinaryOp{BinaryFn::add}, {hn, x});
  EXPECT_TRUE(ctx.may_be_part(hx, false)) << ctx.format(hx);
  // h + x has both terms in the target, but no one factor turns both into target terms.
  EXPECT_FALSE(ctx.may_be_part(ctx.of_op(BinaryOp{BinaryFn::add}, {h, x}), false));
  const Poly residual =
      ctx.of_op(BinaryOp{BinaryFn::add}, {x, ctx.of_op(BinaryOp{BinaryFn::mul}, {alpha, hx})});
  EXPECT_EQ(ctx.of_op(rms, {residual}), target);
  (void)alpha;
}

}  // namespace
}  // namespace yirage::search
