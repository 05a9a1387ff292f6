// Exp-normalize in its safe form (issue 35): the search builds every softmax with the row max
// subtracted, and fused attention as an online softmax (a running max with rescaled
// accumulators); exp / Σexp written out by hand is read as the softmax it is; the fingerprints
// prove the safe form equal to the plain one; and a softmax made unsafe, or shifted by a wrong max,
// is rejected by the fingerprints or, where it is the same function, by the float check, with the
// reason recorded.
#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "block_json.h"
#include "block_test_graphs.h"
#include "search/internal.h"
#include "search/search.h"
#include "search_targets.h"
#include "support/error.h"
#include "verify/verify.h"

namespace yirage::search {
namespace {

using ir::DType;
using ir::KernelGraph;
using nlohmann::json;

SearchOptions options() {
  SearchOptions o;
  o.budget_seconds = 120;
  o.threads = 2;
  o.seed = 5;
  return o;
}

// A device whose blocks hold 32 KiB in the loop: a [64, 256] f32 score tile does not fit, so
// attention over 256 keys must walk them.
backend::DeviceDescription small_tile_device() {
  backend::DeviceDescription d = testing::cpu_like_device();
  d.name = "small-tile test device";
  d.capabilities["search"]["max_tile_bytes_in_loop"] = 32 * 1024;
  d.capabilities["search"]["max_tile_bytes_total"] = 64 * 1024;
  return d;
}

// softmax(Q·K)·V with the softmax as one op, at a size whose scores need a loop on
// small_tile_device().
KernelGraph attention_with_softmax_op() {
  KernelGraph g;
  auto q = g.input("Q", {2, 64, 16}, DType::f32);
  auto k = g.input("K", {2, 16, 256}, DType::f32);
  auto v = g.input("V", {2, 256, 16}, DType::f32);
  g.mark_output(g.matmul(g.softmax(g.matmul(q, k), -1), v), "out");
  return g;
}

std::vector<std::shared_ptr<const ir::BlockGraph>> bodies_of(const KernelGraph& mugraph) {
  std::vector<std::shared_ptr<const ir::BlockGraph>> out;
  for (const ir::Node& n : mugraph.nodes())
    if (const auto* f = std::get_if<ir::FusedOp>(&n.op)) out.push_back(f->body);
  return out;
}

template <class Op>
const Op* op_of(const ir::BlockGraph& g, int32_t id) {
  return std::get_if<Op>(&g.nodes()[size_t(id)].op);
}

// Every exp of the body reads x - max(x), a sub of a max on the sub's own first operand.
bool every_exp_is_safe(const ir::BlockGraph& g) {
  for (const ir::BlockNode& n : g.nodes()) {
    const auto* u = std::get_if<ir::UnaryOp>(&n.op);
    if (!u || u->fn != ir::UnaryFn::exp) continue;
    const int32_t sub = n.inputs[0];
    const auto* b = op_of<ir::BinaryOp>(g, sub);
    if (!b || b->fn != ir::BinaryFn::sub) return false;
    const ir::BlockNode& shift = g.nodes()[size_t(sub)];
    const auto* max = op_of<ir::ReduceOp>(g, shift.inputs[1]);
    if (!max || max->fn != ir::ReduceFn::max ||
        g.nodes()[size_t(shift.inputs[1])].inputs[0] != shift.inputs[0])
      return false;
  }
  return true;
}

int count_accumulators(const ir::BlockGraph& g, ir::AccumFn fn) {
  return int(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const ir::BlockNode& n) {
    const auto* a = std::get_if<ir::AccumulatorOp>(&n.op);
    return a && a->fn == fn;
  }));
}

// The best fused candidate's single body, when it is one kernel on the graph's own inputs.
std::shared_ptr<const ir::BlockGraph> one_kernel_body(const KernelGraph& graph,
                                                      const SearchResult& r) {
  for (const Candidate& c : r.ranked) {
    auto bodies = bodies_of(c.mugraph);
    if (c.kernels == 1 && bodies.size() == 1 &&
        bodies[0]->operands().size() == graph.inputs().size())
      return bodies[0];
  }
  return nullptr;
}

TEST(ExpNormalize, HandWrittenSoftmaxIsReadAsOne) {
  const KernelGraph gqa = testing::small_target("gqa");  // exp, sum, div
  int rewritten = -1;
  const KernelGraph read = with_softmax_ops(gqa, &rewritten);
  EXPECT_EQ(rewritten, 1);
  EXPECT_EQ(count_kernels(read), count_kernels(gqa) - 2);
  const int32_t probs = read.find("probs");
  ASSERT_GE(probs, 0);
  EXPECT_TRUE(std::holds_alternative<ir::SoftmaxOp>(read.node(probs).op));
  EXPECT_TRUE(verify::check_equivalent(gqa, read).equivalent);

  // exp(x - max x) / Σ: the max subtraction joins the softmax.
  KernelGraph shifted;
  auto x = shifted.input("X", {4, 16}, DType::f32);
  auto e = shifted.exp(shifted.sub(x, shifted.reduce(ir::ReduceFn::max, x, -1)));
  shifted.mark_output(shifted.div(e, shifted.reduce(ir::ReduceFn::sum, e, -1)), "p");
  const KernelGraph one = with_softmax_ops(shifted, &rewritten);
  EXPECT_EQ(rewritten, 1);
  EXPECT_EQ(count_kernels(one), 1);

  // The exponentials are also an output: the softmax op would not hold them, so nothing changes.
  KernelGraph exposed;
  auto y = exposed.input("X", {4, 16}, DType::f32);
  auto ey = exposed.exp(y);
  exposed.mark_output(exposed.div(ey, exposed.reduce(ir::ReduceFn::sum, ey, -1)), "p");
  exposed.mark_output(ey, "e");
  EXPECT_EQ(count_kernels(with_softmax_ops(exposed, &rewritten)), count_kernels(exposed));
  EXPECT_EQ(rewritten, 0);
  // Normalized over dim 0, it is a softmax over dim 0.
  KernelGraph columns;
  auto z = columns.input("X", {4, 16}, DType::f32);
  auto ez = columns.exp(z);
  columns.mark_output(columns.div(ez, columns.reduce(ir::ReduceFn::sum, ez, 0)), "p");
  const KernelGraph over_rows = with_softmax_ops(columns, &rewritten);
  EXPECT_EQ(rewritten, 1);
  const ir::Op& p = over_rows.node(over_rows.outputs()[0].tensor.node).op;
  ASSERT_TRUE(std::holds_alternative<ir::SoftmaxOp>(p));
  EXPECT_EQ(std::get<ir::SoftmaxOp>(p).dim, 0);
}

// No candidate of any description computes exp without the max subtracted: the plain form is not
// in the space any more, for a softmax op and for one written as exp, sum and div.
TEST(SafeSoftmax, EveryProposedExpIsShiftedByItsRowMax) {
  for (const char* name : {"gemm_softmax", "gqa"})
    for (const auto& device : {testing::cpu_like_device(), testing::cuda_like_device()}) {
      const KernelGraph g = testing::small_target(name);
      const SearchResult r = superoptimize(g, device, options());
      ASSERT_LT(std::min_element(
                    r.ranked.begin(), r.ranked.end(),
                    [](const Candidate& a, const Candidate& b) { return a.kernels < b.kernels; })
                    ->kernels,
                count_kernels(g))
          << name << " on " << device.name << ": " << ::testing::PrintToString(r.notes);
      for (const Candidate& c : r.ranked) {
        for (const auto& body : bodies_of(c.mugraph))
          EXPECT_TRUE(every_exp_is_safe(*body)) << name << "\n" << ir::to_json(*body).dump(1);
        EXPECT_TRUE(c.float_check.passed) << c.float_check.summary;
      }
    }
}

// Attention whose scores do not fit a block walks the keys with a running max: the chunk's max
// is subtracted in the loop and both accumulators rescale to the new max.
TEST(SafeSoftmax, FusedAttentionIsAnOnlineSoftmax) {
  const KernelGraph g = attention_with_softmax_op();
  const SearchResult r = superoptimize(g, small_tile_device(), options());
  const auto body = one_kernel_body(g, r);
  ASSERT_NE(body, nullptr) << ::testing::PrintToString(r.notes);
  EXPECT_GT(body->forloop_range(), 1);
  EXPECT_EQ(count_accumulators(*body, ir::AccumFn::rescaled_sum), 2) << ir::to_json(*body).dump(1);
  EXPECT_EQ(count_accumulators(*body, ir::AccumFn::sum), 0);
  EXPECT_TRUE(every_exp_is_safe(*body));
  for (const Candidate& c : r.ranked) {
    EXPECT_TRUE(c.proof.equivalent && c.proof.bound_met) << c.proof.summary();
    EXPECT_TRUE(c.float_check.passed) << c.float_check.summary;
  }
}

// ---- mutants of the safe form ----------------------------------------------------------------

// The nodes no saver depends on dropped and the rest renumbered, as validation wants, and the
// shapes left out.
void drop_dead_nodes(json& body) {
  testing::drop_dead_block_nodes(body);
  for (json& n : body["nodes"]) n.erase("shape");
}

size_t index_of(const json& body, const std::string& op) {
  const json& nodes = body["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]["op"] == op) return i;
  ADD_FAILURE() << "no " << op << " node in " << body.dump();
  return 0;
}

struct Mutant {
  std::string what;
  json body;
};

// Unsafe and wrong-max variants of a safe softmax body (one max, one sub, one exp).
std::vector<Mutant> softmax_mutants(const ir::BlockGraph& g) {
  const json base = ir::to_json(g);
  const size_t max = index_of(base, "max"), sub = index_of(base, "sub");
  std::vector<Mutant> out;
  {
    json m = base;  // exp(s): the max no longer subtracted
    for (json& n : m["nodes"])
      if (n.contains("inputs"))
        for (json& in : n["inputs"])
          if (in.get<size_t>() == sub) in = base["nodes"][sub]["inputs"][0];
    out.push_back({"max subtraction dropped", m});
  }
  for (const char* fn : {"sum", "mean"}) {
    json m = base;  // a row constant that is no bound on the row
    m["nodes"][max]["op"] = fn;
    out.push_back({fmt::format("{} subtracted instead of the max", fn), m});
  }
  const ir::Dims& dims = g.nodes()[size_t(g.nodes()[max].inputs[0])].tile.dims;
  for (int d = 0; d < int(dims.size()); ++d) {
    if (d == std::get<ir::ReduceOp>(g.nodes()[max].op).dim || dims[size_t(d)] == 1) continue;
    json m = base;
    m["nodes"][max]["dim"] = d;
    out.push_back({fmt::format("max over dim {}", d), m});
  }
  // The online form: an accumulator rescaled by another tile of the max's shape.
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto* acc = std::get_if<ir::AccumulatorOp>(&g.nodes()[i].op);
    if (!acc || acc->fn != ir::AccumFn::rescaled_sum) continue;
    for (size_t j = 0; j < g.nodes().size(); ++j)
      if (j != max && g.phase(int32_t(j)) == ir::BlockPhase::in_loop &&
          g.nodes()[j].tile == g.nodes()[max].tile) {
        json m = base;
        m["nodes"][i]["inputs"][1] = j;
        out.push_back({fmt::format("node {} rescaled by node {} instead of the max", i, j), m});
      }
  }
  for (Mutant& m : out) drop_dead_nodes(m.body);
  return out;
}

// One fused node on the graph's inputs, running `body`.
KernelGraph mugraph_of(const KernelGraph& graph, const ir::BlockGraph& body) {
  KernelGraph mg;
  std::vector<ir::TensorRef> in;
  for (const ir::TensorRef& t : graph.inputs())
    in.push_back(mg.input(graph.node(t.node).name, graph.type(t).dims, graph.type(t).dtype));
  auto outs = mg.add_node(ir::FusedOp{std::make_shared<const ir::BlockGraph>(body)}, in, "fused");
  for (size_t o = 0; o < outs.size(); ++o) mg.mark_output(outs[o], graph.outputs()[o].name);
  return mg;
}

enum class Verdict { invalid, fingerprints, float_check, accepted };

Verdict judge(const KernelGraph& graph, const Mutant& m, std::string& reason) {
  try {
    const ir::BlockGraph body = ir::block_graph_from_json(m.body);
    verify::FingerprintOptions fo;
    fo.seed = 3;
    const verify::EquivalenceResult proof = verify::check_equivalent(graph, body, fo);
    if (!proof.equivalent) {
      reason = proof.summary();
      return Verdict::fingerprints;
    }
    const FloatCheck check = float_check(graph, mugraph_of(graph, body), 9, false);
    reason = check.summary;
    return check.passed ? Verdict::accepted : Verdict::float_check;
  } catch (const Error& e) {
    reason = e.what();
    return Verdict::invalid;
  }
}

// The searched safe µGraphs of GEMM + softmax (the max subtracted after the loop) and of attention
// (the online form), each mutated into an unsafe softmax or one shifted by a wrong max: none
// passes both checks. The unsafe GEMM + softmax is the same function, so it is the float check
// that rejects it, for values that overflow where the input graph's are finite.
TEST(SafeSoftmax, UnsafeOrWrongMaxMutantsAreRejected) {
  struct Source {
    const char* name;
    KernelGraph graph;
    backend::DeviceDescription device;
  };
  const Source sources[] = {
      {"gemm_softmax", testing::small_target("gemm_softmax"), testing::cpu_like_device()},
      {"attention", attention_with_softmax_op(), small_tile_device()}};
  int reached_fingerprints = 0, by_float_check = 0;
  for (const Source& src : sources) {
    const SearchResult r = superoptimize(src.graph, src.device, options());
    const auto body = one_kernel_body(src.graph, r);
    ASSERT_NE(body, nullptr) << src.name;
    for (const Mutant& m : softmax_mutants(*body)) {
      std::string reason;
      const Verdict v = judge(src.graph, m, reason);
      RecordProperty(fmt::format("{}: {}", src.name, m.what), reason);
      EXPECT_NE(v, Verdict::accepted) << src.name << ": " << m.what << " passed: " << reason;
      if (v != Verdict::invalid) ++reached_fingerprints;
      if (v == Verdict::float_check) ++by_float_check;
      if (std::string_view(src.name) == "gemm_softmax" && m.what == "max subtraction dropped") {
        EXPECT_EQ(v, Verdict::float_check) << reason;
        EXPECT_NE(reason.find("non-finite"), std::string::npos) << reason;
      }
    }
  }
  EXPECT_GE(reached_fingerprints, 6);
  EXPECT_GE(by_float_check, 1);
}

// The unsafe online form, exp(Q·K)·V / Σexp(Q·K) with plain sums (what the search built before),
// is equal to softmax(Q·K)·V and the fingerprints say so; the float check rejects it.
TEST(SafeSoftmax, TheUnsafeOnlineFormFailsTheFloatCheck) {
  const KernelGraph graph = ir::testing::attention_kernel(DType::f32, true);
  const ir::BlockGraph unsafe = ir::testing::attention_exp_block(DType::f32);
  verify::FingerprintOptions fo;
  fo.seed = 3;
  EXPECT_TRUE(verify::check_equivalent(graph, unsafe, fo).equivalent);
  const FloatCheck check = float_check(graph, mugraph_of(graph, unsafe), 9, false);
  EXPECT_FALSE(check.passed) << check.summary;
  EXPECT_NE(check.summary.find("non-finite"), std::string::npos) << check.summary;
  const FloatCheck safe = float_check(
      graph, mugraph_of(graph, ir::testing::attention_softmax_block(DType::f32)), 9, false);
  EXPECT_TRUE(safe.passed) << safe.summary;
}

}  // namespace
}  // namespace yirage::search
