// The Z3 pruning oracle (abstract_expr_z3.h) against the normal form: the same verdicts on the
// search targets' own intermediates and on foreign prefixes, the reciprocal cases where the
// axioms make more expressions part than the normal form does, and a search under Pruner::z3
// that finds the normal form's best µGraph. Built only where Z3 is (tests/search/CMakeLists.txt).
#include <iostream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "search/abstract_expr.h"
#include "search/abstract_expr_z3.h"
#include "search/search.h"
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
using Verdict = Z3Oracle::Verdict;

std::string verdict_name(Verdict v) {
  return v == Verdict::part ? "part" : v == Verdict::not_part ? "not part" : "unknown";
}

// Every tensor a target computes on the way (its inputs included) is a prefix of a real
// solution: the unfused program itself.
TEST(Z3Oracle, ProvesEveryIntermediateOfEveryTarget) {
  for (const char* name : testing::kTargetNames) {
    Z3Oracle z3;
    ExprContext ctx;
    const ir::KernelGraph graph = testing::small_target(name);
    ctx.set_targets(ctx.of_graph(graph));
    ir::KernelGraph probe = graph;
    for (size_t id = 0; id < graph.nodes().size(); ++id)
      for (size_t port = 0; port < graph.nodes()[id].outputs.size(); ++port)
        probe.mark_output({int32_t(id), int32_t(port)}, fmt::format("probe{}_{}", id, port));
    const std::vector<Poly> values = ctx.of_graph(probe);
    for (size_t i = graph.outputs().size(); i < values.size(); ++i) {
      EXPECT_TRUE(ctx.may_be_part(values[i])) << name << ": " << ctx.format(values[i]);
      EXPECT_EQ(verdict_name(z3.check(ctx, values[i])), "part")
          << name << ": " << ctx.format(values[i]);
    }
  }
}

class Z3RmsNormLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx.set_targets(ctx.of_graph(testing::small_target("rmsnorm_linear")));
    x = ctx.input(0), g = ctx.input(1), w = ctx.input(2);
  }
  Poly op(ir::Op o, std::vector<Poly> in) { return ctx.of_op(o, in); }
  // Both oracles' verdicts, so that a failure shows the two side by side.
  std::string verdicts(const Poly& p, bool sums_left = true) {
    return fmt::format("normal form: {}, Z3: {}",
                       ctx.may_be_part(p, sums_left) ? "part" : "not part",
                       verdict_name(z3.check(ctx, p, sums_left)));
  }

  Z3Oracle z3;
  ExprContext ctx;
  Poly x, g, w;
};

// The norm folded through the matmul (abstract_expr_test.cpp's solution), step by step.
TEST_F(Z3RmsNormLinear, BothKeepTheFoldedNorm) {
  const Poly gw = op(BinaryOp{BinaryFn::mul}, {w, g});
  const Poly partial = op(MatmulOp{}, {x, gw});
  const Poly squares = op(UnaryOp{UnaryFn::square}, {x});
  const Poly chunk_mean = op(ReduceOp{ReduceFn::mean, -1}, {squares});
  const Poly sum = ctx.of_block_op(ir::AccumulatorOp{ir::AccumFn::sum}, {partial}, false);
  const Poly rms = ctx.of_block_op(ir::AccumulatorOp{ir::AccumFn::rms, 1e-6}, {chunk_mean}, false);
  for (const Poly& p :
       {gw, partial, squares, chunk_mean, sum, rms, op(BinaryOp{BinaryFn::div}, {sum, rms})})
    EXPECT_EQ(verdicts(p), "normal form: part, Z3: part") << ctx.format(p);
}

TEST_F(Z3RmsNormLinear, BothCutForeignPrefixes) {
  const Poly xw = op(MatmulOp{}, {x, w});
  for (const Poly& p : {op(UnaryOp{UnaryFn::exp}, {x}), op(UnaryOp{UnaryFn::silu}, {xw}),
                        op(UnaryOp{UnaryFn::square}, {xw}), op(BinaryOp{BinaryFn::div}, {x, w}),
                        op(BinaryOp{BinaryFn::add}, {x, w}),
                        op(BinaryOp{BinaryFn::mul}, {op(UnaryOp{UnaryFn::square}, {x}), x})})
    EXPECT_EQ(verdicts(p), "normal form: not part, Z3: not part") << ctx.format(p);
}

TEST(Z3Oracle, AgreesOnAttentionAndNtransPrefixes) {
  {
    Z3Oracle z3;
    ExprContext ctx;
    ctx.set_targets(ctx.of_graph(testing::small_target("gqa")));
    const Poly q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
    const Poly e = ctx.of_op(UnaryOp{UnaryFn::exp}, {ctx.of_op(MatmulOp{}, {q, k})});
    for (const Poly& p :
         {ctx.of_op(MatmulOp{}, {e, v}), ctx.of_op(ReduceOp{ReduceFn::sum, -1}, {e})})
      EXPECT_EQ(verdict_name(z3.check(ctx, p)), "part") << ctx.format(p);
    for (const Poly& p : {ctx.of_op(MatmulOp{}, {k, v}), ctx.of_op(UnaryOp{UnaryFn::exp}, {q})}) {
      EXPECT_FALSE(ctx.may_be_part(p)) << ctx.format(p);
      EXPECT_EQ(verdict_name(z3.check(ctx, p)), "not part") << ctx.format(p);
    }
  }
  Z3Oracle z3;
  ExprContext ctx;
  ctx.set_targets(ctx.of_graph(testing::small_target("ntrans")));
  const Poly h = ctx.input(0), x = ctx.input(1);
  const Poly hx = ctx.of_op(BinaryOp{BinaryFn::add},
                            {ctx.of_op(ir::RmsNormOp{.normalized_shape = {32}}, {h}), x});
  EXPECT_EQ(verdict_name(z3.check(ctx, hx, false)), "part") << ctx.format(hx);
  // h + x: both terms are in the target, but no one factor completes both, and nothing left sums.
  const Poly h_plus_x = ctx.of_op(BinaryOp{BinaryFn::add}, {h, x});
  EXPECT_FALSE(ctx.may_be_part(h_plus_x, false));
  EXPECT_EQ(verdict_name(z3.check(ctx, h_plus_x, false)), "not part");
}

// With inv(inv(x)) = x and part(x, inv(x)), the axioms make inv(x) part of x: a program that
// divides by a prefix (or takes its reciprocal) reaches the target when the prefix's reciprocal
// is part of it. Σe/e is such a prefix of the softmax e/Σe. The normal form's containment does not
// follow reciprocals and cuts it; Z3 proves it. Searches find the same best µGraph either way
// (the test below), as dividing twice is never the cheaper program here.
TEST(Z3Oracle, ProvesReciprocalsOfPartsThatTheNormalFormCuts) {
  Z3Oracle z3;
  ExprContext ctx;
  ctx.set_targets(ctx.of_graph(testing::small_target("gemm_softmax")));
  // e = exp(s - max s), as the target's softmax is abstracted (its safe form).
  const Poly s = ctx.of_op(MatmulOp{}, {ctx.input(0), ctx.input(1)});
  const Poly e = ctx.of_op(
      UnaryOp{UnaryFn::exp},
      {ctx.of_op(BinaryOp{BinaryFn::sub}, {s, ctx.of_op(ReduceOp{ReduceFn::max, -1}, {s})})});
  const Poly inverted =
      ctx.of_op(BinaryOp{BinaryFn::div}, {ctx.of_op(ReduceOp{ReduceFn::sum, -1}, {e}), e});
  EXPECT_FALSE(ctx.may_be_part(inverted)) << ctx.format(inverted);
  EXPECT_EQ(verdict_name(z3.check(ctx, inverted)), "part") << ctx.format(inverted);
  EXPECT_EQ(z3.stats().proved_but_cut, 1u);
  ASSERT_EQ(z3.stats().differences.size(), 1u);
  EXPECT_NE(z3.stats().differences[0].find("Z3 proves where the normal form cuts"),
            std::string::npos)
      << z3.stats().differences[0];
}

// The cache key is canonical text, not atom ids: another context that interned the same inputs
// in another order asks the same question.
TEST(Z3Oracle, AnswersTheSameQueryFromAnotherContextFromTheCache) {
  Z3Oracle z3;
  const ir::KernelGraph graph = testing::small_target("lora");
  ExprContext a;
  a.set_targets(a.of_graph(graph));
  const Poly pa = a.of_op(MatmulOp{}, {a.input(0), a.input(2)});
  ExprContext b;
  const Poly w = b.input(2), x = b.input(0);  // interned in the other order
  b.set_targets(b.of_graph(graph));
  const Poly pb = b.of_op(MatmulOp{}, {x, w});
  EXPECT_EQ(verdict_name(z3.check(a, pa)), "part");
  EXPECT_EQ(verdict_name(z3.check(b, pb)), "part");
  EXPECT_EQ(z3.stats().queries, 2u);
  EXPECT_EQ(z3.stats().cache_hits, 1u);
}

TEST(Z3Pruner, SearchFindsTheNormalFormsBestMugraph) {
  for (const char* name : {"gated_mlp", "gemm_softmax"}) {
    const ir::KernelGraph graph = testing::small_target(name);
    SearchOptions options;
    options.budget_seconds = 600;
    options.threads = 2;
    options.seed = 7;
    const SearchResult normal = superoptimize(graph, testing::cpu_like_device(), options);
    options.pruner = Pruner::z3;
    const SearchResult z3 = superoptimize(graph, testing::cpu_like_device(), options);
    ASSERT_FALSE(normal.stats.budget_exhausted);
    ASSERT_FALSE(z3.stats.budget_exhausted);
    EXPECT_EQ(normal.stats.pruner, Pruner::normal_form);
    EXPECT_EQ(z3.stats.pruner, Pruner::z3);
    EXPECT_EQ(ir::structural_hash_hex(z3.ranked.at(0).mugraph),
              ir::structural_hash_hex(normal.ranked.at(0).mugraph))
        << name;
    EXPECT_EQ(z3.ranked[0].estimated_seconds, normal.ranked[0].estimated_seconds) << name;
    EXPECT_TRUE(z3.float_check.passed) << z3.float_check.summary;
    EXPECT_GT(z3.stats.z3.refuted, 0u) << name;
    EXPECT_GT(z3.stats.z3.cache_hits, 0u) << name;
    EXPECT_GT(z3.stats.expr_pruned, 0u) << name;
    EXPECT_LE(z3.stats.expr_pruned, z3.stats.pruned) << name;
    const Z3PrunerStats& s = z3.stats.z3;
    std::cerr << name << ": normal form " << normal.stats.states << " states, "
              << normal.stats.expr_pruned << " cut by expression; z3 " << z3.stats.states
              << " states, " << z3.stats.expr_pruned << " cut by expression, " << s.queries
              << " queries (" << s.cache_hits << " cached), proved " << s.proved << ", refuted "
              << s.refuted << ", unknown " << s.unknown << "\n";
  }
}

}  // namespace
}  // namespace yirage::search
