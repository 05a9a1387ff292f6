// Mutation test: broken variants of correct µGraphs must all be rejected, by validation (an
// error, never a crash) or by the fingerprint check.
//
// Mutants change one thing each: an imap or omap entry on a grid axis with more than one block,
// an fmap of a loop with more than one iteration, an accumulator's function (or the accumulator
// dropped, its readers rewired to the in-loop tile), the operands of a non-commutative op
// swapped, a reduction's dim, or the for-loop range plus or minus one. Changes that leave the
// program equal are not mutants and are not generated: an axis of one block, sum versus mean or
// max over one iteration, a loop of one iteration (range - 1 = 1 walks each dim at once).
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "search/search.h"
#include "search_targets.h"
#include "support/error.h"
#include "verify/verify.h"

namespace yirage::search {
namespace {

using nlohmann::json;

struct Source {
  std::string name;
  ir::KernelGraph reference;  // inputs in the order of the block graph's operands
  ir::BlockGraph body;
};

struct Mutant {
  std::string what;
  json body;
};

std::vector<Mutant> mutants_of(const ir::BlockGraph& g) {
  const json base = ir::to_json(g);
  const auto& grid = g.grid().extent;
  const int64_t range = g.forloop_range();
  std::vector<Mutant> out;
  auto add = [&](std::string what, json body) {
    out.push_back({std::move(what), std::move(body)});
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::BlockNode& node = g.nodes()[i];
    const json& jn = base["nodes"][i];
    const std::string at = fmt::format("node {} ({})", i, jn["op"].get<std::string>());
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&node.op)) {
      const int rank = int(g.operands()[size_t(it->operand)].dims.size());
      for (int a = 0; a < ir::kGridAxes; ++a) {
        if (grid[size_t(a)] == 1) continue;
        for (int d = -1; d < rank; ++d) {
          if (d == it->imap[size_t(a)]) continue;
          json m = base;
          m["nodes"][i]["imap"][size_t(a)] = d;
          m["nodes"][i].erase("shape");
          add(fmt::format("{}: imap[{}] = {}", at, a, d), m);
        }
      }
      if (range > 1)
        for (int d = -1; d < rank; ++d) {
          if (d == it->fmap) continue;
          json m = base;
          m["nodes"][i]["fmap"] = d;
          m["nodes"][i].erase("shape");
          add(fmt::format("{}: fmap = {}", at, d), m);
        }
    } else if (const auto* save = std::get_if<ir::OutputSaverOp>(&node.op)) {
      const int rank = int(node.tile.dims.size());
      for (int a = 0; a < ir::kGridAxes; ++a) {
        if (grid[size_t(a)] == 1) continue;
        for (int d = -1; d < rank; ++d) {
          if (d == save->omap[size_t(a)]) continue;
          json m = base;
          m["nodes"][i]["omap"][size_t(a)] = d;
          add(fmt::format("{}: omap[{}] = {}", at, a, d), m);
        }
      }
    } else if (const auto* acc = std::get_if<ir::AccumulatorOp>(&node.op)) {
      for (const char* fn : {"sum", "mean", "rms", "max"}) {
        if (ir::accum_name(acc->fn) == fn) continue;
        const bool same_over_one =
            range == 1 && std::string(fn) != "rms" && acc->fn != ir::AccumFn::rms;
        if (same_over_one || acc->fn == ir::AccumFn::rescaled_sum) continue;
        json m = base;
        m["nodes"][i]["fn"] = fn;
        m["nodes"][i].erase("eps");
        if (std::string(fn) == "rms") m["nodes"][i]["eps"] = 0.0;
        add(fmt::format("{}: accumulator {}", at, fn), m);
      }
      json dropped = base;  // readers take the in-loop tile instead
      for (auto& n : dropped["nodes"])
        if (n.contains("inputs"))
          for (auto& in : n["inputs"])
            if (in.get<size_t>() == i) in = node.inputs[0];
      add(fmt::format("{}: accumulator dropped", at), dropped);
    } else if (const auto* red = std::get_if<ir::ReduceOp>(&node.op)) {
      const ir::Dims& in = g.nodes()[size_t(node.inputs[0])].tile.dims;
      for (int d = 0; d < int(in.size()); ++d) {
        if (d == red->dim || in[size_t(d)] == 1) continue;
        json m = base;
        m["nodes"][i]["dim"] = d;
        add(fmt::format("{}: reduction dim {}", at, d), m);
      }
    }
    const bool swappable = std::holds_alternative<ir::MatmulOp>(node.op) ||
                           (std::holds_alternative<ir::BinaryOp>(node.op) &&
                            std::get<ir::BinaryOp>(node.op).fn != ir::BinaryFn::add &&
                            std::get<ir::BinaryOp>(node.op).fn != ir::BinaryFn::mul);
    if (swappable && node.inputs[0] != node.inputs[1]) {
      json m = base;
      std::swap(m["nodes"][i]["inputs"][0], m["nodes"][i]["inputs"][1]);
      add(fmt::format("{}: operands swapped", at), m);
    }
  }
  for (int64_t r : {range + 1, range - 1}) {
    if (r <= 1) continue;
    json m = base;
    m["forloop_range"] = r;
    for (auto& n : m["nodes"]) n.erase("shape");
    add(fmt::format("forloop_range {}", r), m);
  }
  for (Mutant& m : out)  // declared tile shapes would only restate the change
    for (auto& n : m.body["nodes"]) n.erase("shape");
  return out;
}

// The reference for rmsnorm_linear_block, whose norm weight arrives as a [K, 1] column.
ir::KernelGraph rmsnorm_linear_column_reference() {
  const ir::testing::RmsNormLinearShape s;
  ir::KernelGraph g;
  auto x = g.input("X", {s.m, s.k}, ir::DType::f32);
  auto gamma = g.input("G", {s.k, 1}, ir::DType::f32);
  auto w = g.input("W", {s.k, s.n}, ir::DType::f32);
  g.mark_output(g.matmul(g.rms_norm(x, {s.k}, g.reshape(gamma, {s.k}), 0.0), w), "out");
  return g;
}

std::vector<Source> sources() {
  using namespace ir::testing;
  const ir::DType f32 = ir::DType::f32;
  std::vector<Source> out;
  out.push_back({"rmsnorm_linear", rmsnorm_linear_column_reference(), rmsnorm_linear_block(f32)});
  out.push_back({"gated_mlp", gated_mlp_kernel(f32), gated_mlp_block(f32)});
  out.push_back({"attention_exp", attention_kernel(f32, false), attention_exp_block(f32)});
  out.push_back({"attention_softmax", attention_kernel(f32, true), attention_softmax_block(f32)});
  // Search outputs whose best µGraph is one fused node on the graph's own inputs.
  for (const char* name : {"gemm_layernorm", "lora", "gemm_softmax", "gqa", "ntrans"}) {
    const ir::KernelGraph graph = testing::small_target(name);
    SearchOptions o;
    o.threads = 2;
    o.budget_seconds = 120;
    const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
    for (const ir::Node& n : r.ranked.front().mugraph.nodes())
      if (const auto* f = std::get_if<ir::FusedOp>(&n.op);
          f && r.ranked.front().kernels == 1 && f->body->operands().size() == graph.inputs().size())
        out.push_back({std::string("search ") + name, graph, *f->body});
  }
  return out;
}

TEST(Mutation, EveryMutantIsRejected) {
  verify::FingerprintOptions options;
  options.seed = 11;
  size_t total = 0, by_validation = 0, by_fingerprints = 0;
  std::vector<std::string> accepted;
  for (const Source& src : sources()) {
    // The source itself is correct: the mutants differ from a program that passes.
    ASSERT_TRUE(verify::check_equivalent(src.reference, src.body, options).equivalent) << src.name;
    for (const Mutant& m : mutants_of(src.body)) {
      ++total;
      try {
        const ir::BlockGraph mutant = ir::block_graph_from_json(m.body);
        const verify::EquivalenceResult r =
            verify::check_equivalent(src.reference, mutant, options);
        if (r.equivalent)
          accepted.push_back(src.name + ": " + m.what);
        else
          ++by_fingerprints;
      } catch (const Error&) {
        ++by_validation;
      }
    }
  }
  std::cerr << total << " mutants: " << by_validation << " rejected as invalid, " << by_fingerprints
            << " by fingerprints, " << accepted.size() << " accepted\n";
  EXPECT_GE(total, 200u);
  EXPECT_TRUE(accepted.empty()) << "accepted mutants:\n"
                                << fmt::format("{}", fmt::join(accepted, "\n"));
}

}  // namespace
}  // namespace yirage::search
