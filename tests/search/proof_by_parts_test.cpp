// The search's µGraphs around quant_matmuls are proved part by part (verify/by_parts.cpp): each
// fused kernel against the ops it replaces, never the whole graph's matmuls in field arithmetic,
// which at an LLM's widths took minutes per proof.
#include <gtest/gtest.h>

#include "search/search.h"
#include "search_targets.h"
#include "verify/verify.h"

namespace yirage::search {
namespace {

using ir::KernelGraph;
using ir::TensorRef;

struct MlpShape {
  int rows = 4, width = 64, hidden = 128;
  double eps = 1e-5;
  ir::UnaryFn activation = ir::UnaryFn::silu;
};

TensorRef q8_weights(KernelGraph& g, const char* name, int64_t n, int64_t k) {
  return g.input(name, {n, k / ir::kQuantBlock * 34}, ir::DType::u8);
}

// The engine's "attention output + gated mlp" block (llm/fused_blocks.cpp) at small widths.
KernelGraph output_and_mlp(const MlpShape& s) {
  KernelGraph g;
  const TensorRef attn = g.input("attention", {s.rows, s.width}, ir::DType::f32);
  const TensorRef x = g.input("x", {s.rows, s.width}, ir::DType::f32);
  const TensorRef wo = q8_weights(g, "wo", s.width, s.width);
  const TensorRef gain = g.input("ffn_norm", {s.width}, ir::DType::f32);
  const TensorRef gate = q8_weights(g, "gate", s.hidden, s.width);
  const TensorRef up = q8_weights(g, "up", s.hidden, s.width);
  const TensorRef down = q8_weights(g, "down", s.width, s.hidden);
  const ir::QuantFormat f = ir::QuantFormat::q8_0;
  const TensorRef x1 = g.add(x, g.quant_matmul(attn, wo, f));
  const TensorRef xn = g.rms_norm(x1, {s.width}, gain, s.eps);
  const TensorRef h =
      g.mul(g.unary(s.activation, g.quant_matmul(xn, gate, f)), g.quant_matmul(xn, up, f));
  g.mark_output(g.add(x1, g.quant_matmul(h, down, f)), "x_next");
  return g;
}

verify::FingerprintOptions seeded() {
  verify::FingerprintOptions o;
  o.seed = 11;
  return o;
}

// The search's fused candidates for the block; the test fails when it finds none, since then
// nothing here would be checked.
std::vector<Candidate> fused_candidates(const KernelGraph& graph, SearchStats* stats = nullptr) {
  SearchOptions o;
  o.budget_seconds = 30;
  o.threads = 2;
  o.seed = 5;
  o.fingerprint = seeded();
  SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  if (stats) *stats = r.stats;
  std::vector<Candidate> fused;
  for (Candidate& c : r.ranked)
    if (c.kernels < count_kernels(graph)) fused.push_back(std::move(c));
  EXPECT_FALSE(fused.empty()) << "the search fused nothing in the MLP block";
  return fused;
}

TEST(ProofByParts, TheSearchProvesAnLlmBlockKernelByKernel) {
  const KernelGraph graph = output_and_mlp({});
  SearchStats stats;
  const std::vector<Candidate> fused = fused_candidates(graph, &stats);
  // The input graph runs on the reference once per distribution for all the candidates, each
  // candidate once per distribution; nothing runs the input graph again per candidate.
  const int distributions = int(std::size(verify::kAllDistributions));
  EXPECT_EQ(stats.reference_runs, distributions * (1 + int(fused.size())));
  EXPECT_GE(stats.proofs, int(fused.size()));
  for (const Candidate& c : fused) {
    // Its ops in front of the fused kernels, the quant_matmul of the attention output at least,
    // are taken from the input graph's run, not run again.
    EXPECT_NE(c.float_check.summary.find("shared with the input graph's run"), std::string::npos)
        << c.float_check.summary;
    // parts > 0: the fingerprints ran on the fused kernels' regions; a whole-graph proof, which
    // scales with the quant_matmuls' rows × K × N, leaves it at 0.
    EXPECT_GE(c.proof.parts, 1) << c.proof.summary();
    EXPECT_TRUE(c.proof.equivalent && c.proof.bound_met) << c.proof.summary();
    EXPECT_LE(c.proof.false_accept_bound, 1e-9);
    EXPECT_NE(c.proof.summary().find("by parts"), std::string::npos) << c.proof.summary();
    EXPECT_TRUE(c.float_check.passed) << c.float_check.summary;
    // The whole-graph check, affordable at these widths, agrees.
    const verify::EquivalenceResult whole = verify::check_equivalent(graph, c.mugraph, seeded());
    EXPECT_TRUE(whole.equivalent && whole.bound_met) << whole.summary();
  }
}

TEST(ProofByParts, AChangeInsideOrOutsideTheFusedKernelsIsCaught) {
  const std::vector<Candidate> fused = fused_candidates(output_and_mlp({}));
  MlpShape gelu;
  gelu.activation = ir::UnaryFn::gelu;
  MlpShape eps;
  eps.eps = 1e-3;
  for (const MlpShape& other : {gelu, eps}) {
    const KernelGraph changed = output_and_mlp(other);
    for (const Candidate& c : fused) {
      const verify::EquivalenceResult r =
          verify::check_equivalent_by_parts(changed, c.mugraph, seeded());
      EXPECT_FALSE(r.equivalent) << r.summary();
    }
  }
}

TEST(ProofByParts, AGraphAgainstItselfNeedsNoFingerprint) {
  const KernelGraph graph = output_and_mlp({});
  const verify::EquivalenceResult r = verify::check_equivalent_by_parts(graph, graph, seeded());
  EXPECT_TRUE(r.equivalent && r.bound_met) << r.summary();
  EXPECT_EQ(r.parts, 0);
  EXPECT_EQ(r.trials, 0);  // matched op for op, nothing left to fingerprint
}

// `g` with every top-level quant_matmul's prefetch off and every matmul a library call: the
// tuner's "+ no prefetch" and library variants of a candidate.
KernelGraph with_schedule_choices_changed(const KernelGraph& g) {
  return *ir::with_ops_rewritten(g, [](const ir::Node&, ir::Op& op) {
    if (auto* q = std::get_if<ir::QuantMatmulOp>(&op)) q->prefetch = false;
    if (auto* m = std::get_if<ir::MatmulOp>(&op)) m->library = true;
    return true;
  });
}

// A variant that differs only in schedule choices is matched op for op like the candidate it
// came from: before, its quant_matmuls matched nothing and the whole graph was fingerprinted,
// 12 s at SmolLM2's LM head on every cache hit of `yirage generate`.
TEST(ProofByParts, ScheduleChoicesDoNotStopTheMatching) {
  const KernelGraph graph = output_and_mlp({});
  const KernelGraph unfused_variant = with_schedule_choices_changed(graph);
  ASSERT_NE(ir::structural_hash(unfused_variant), ir::structural_hash(graph));
  const verify::EquivalenceResult itself =
      verify::check_equivalent_by_parts(graph, unfused_variant, seeded());
  EXPECT_TRUE(itself.equivalent && itself.bound_met) << itself.summary();
  EXPECT_EQ(itself.parts, 0);
  EXPECT_EQ(itself.trials, 0);
  for (const Candidate& c : fused_candidates(graph)) {
    const verify::EquivalenceResult r = verify::check_equivalent_by_parts(
        graph, with_schedule_choices_changed(c.mugraph), seeded());
    EXPECT_TRUE(r.equivalent && r.bound_met) << r.summary();
    EXPECT_EQ(r.parts, c.proof.parts) << r.summary();
  }
  // The IR's own normal form agrees: the variant is the graph, schedule choices aside.
  EXPECT_EQ(ir::structural_hash(ir::without_schedule_choices(unfused_variant)),
            ir::structural_hash(graph));
}

}  // namespace
}  // namespace yirage::search
