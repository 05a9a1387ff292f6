// Mutation test: broken variants of correct µGraphs must all be rejected, by validation (an
// error, never a crash) or by the fingerprint check; at least 200 must pass validation and reach
// the fingerprint check, so that it is the fingerprints, not the validator, that are tested.
//
// Mutants change one thing each: an imap or omap entry on a grid axis with more than one block
// (or two such axes swapped), an fmap of a loop with more than one iteration, an accumulator's
// function (or the accumulator dropped, its readers rewired to the in-loop tile), the operands of a
// non-commutative op swapped, a reduction's dim, the for-loop range plus or minus one, one operand
// of an op read from another node of the same tile type, an elementwise op's function, a scale
// (mul_scalar's factor), an rms accumulator's eps dropped or doubled, and an op bypassed (its
// readers take one of its operands). Bypassing the division of a softmax, or reading its
// denominator from another tile, is the "unsafe softmax" mutant: exp without the max subtraction is
// the same function as the safe softmax (it only overflows sooner), so the broken softmax worth
// generating is one whose normalisation is wrong. Changes that leave the program equal are not
// mutants and are not generated: an axis of one block, sum versus mean or max over one iteration, a
// loop of one iteration (range - 1 = 1 walks each dim at once). A generic change (a bypass, another
// operand, the max a softmax subtracts) can happen to give the same function: a mutant the
// fingerprints accept is counted as an equal program when the reference executor on random floats
// agrees with the source to rounding, and as a false accept, which fails the test, when it does
// not.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "block_json.h"
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

using AddMutant = std::function<void(std::string, json)>;

bool same_tile(const json& a, const json& b) {
  return a["shape"] == b["shape"] && a["dtype"] == b["dtype"];
}

bool is_saver(const json& node) {
  return node["op"] == "save";
}

// Mutants that keep every tile's type, so that most pass validation: another operand, another
// function, another scale or eps, an op bypassed.
void add_rewiring_mutants(const json& base, const AddMutant& add) {
  const json& nodes = base["nodes"];
  const std::vector<std::string> unary = {"exp",  "silu",   "gelu", "relu",
                                          "sqrt", "square", "neg",  "reciprocal"};
  const std::vector<std::string> binary = {"add", "sub", "mul", "div"};
  const std::vector<std::string> reductions = {"sum", "mean", "max"};
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& node = nodes[i];
    const std::string op = node["op"].get<std::string>();
    const std::string at = fmt::format("node {} ({})", i, op);
    if (!node.contains("inputs") || is_saver(node)) continue;
    for (size_t k = 0; k < node["inputs"].size(); ++k) {
      const size_t from = node["inputs"][k].get<size_t>();
      for (size_t j = 0; j < i; ++j) {
        if (j == from || is_saver(nodes[j]) || !same_tile(nodes[j], nodes[from])) continue;
        json m = base;
        m["nodes"][i]["inputs"][k] = j;
        add(fmt::format("{}: operand {} read from node {}", at, k, j), m);
      }
      if (same_tile(nodes[from], node)) {
        json m = base;  // readers of i take its operand k instead
        for (size_t r = i + 1; r < nodes.size(); ++r)
          if (nodes[r].contains("inputs"))
            for (auto& in : m["nodes"][r]["inputs"])
              if (in.get<size_t>() == i) in = from;
        add(fmt::format("{}: bypassed by operand {}", at, k), m);
      }
    }
    for (const std::vector<std::string>* fns : {&unary, &binary, &reductions}) {
      if (std::find(fns->begin(), fns->end(), op) == fns->end()) continue;
      for (const std::string& fn : *fns) {
        if (fn == op) continue;
        json m = base;
        m["nodes"][i]["op"] = fn;
        add(fmt::format("{}: {} instead", at, fn), m);
      }
    }
    if (op == "mul_scalar")
      for (double factor : {2.0, -1.0}) {
        json m = base;
        m["nodes"][i]["scalar"] = node["scalar"].get<double>() * factor;
        add(fmt::format("{}: scale times {}", at, factor), m);
      }
    if (op == "accum" && node["fn"] == "rms" && node.value("eps", 0.0) != 0.0) {
      for (double factor : {0.0, 2.0}) {
        json m = base;
        m["nodes"][i]["eps"] = node["eps"].get<double>() * factor;
        add(fmt::format("{}: eps {}", at, factor == 0 ? "dropped" : "doubled"), m);
      }
    }
  }
}

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
      for (int a = 0; a < ir::kGridAxes; ++a)
        for (int b = a + 1; b < ir::kGridAxes; ++b) {
          if (grid[size_t(a)] == 1 || grid[size_t(b)] == 1 ||
              it->imap[size_t(a)] == it->imap[size_t(b)])
            continue;
          json m = base;  // the tile keeps its type when the two axes have as many blocks
          std::swap(m["nodes"][i]["imap"][size_t(a)], m["nodes"][i]["imap"][size_t(b)]);
          add(fmt::format("{}: imap axes {} and {} swapped", at, a, b), m);
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
      for (int a = 0; a < ir::kGridAxes; ++a)
        for (int b = a + 1; b < ir::kGridAxes; ++b) {
          if (grid[size_t(a)] == 1 || grid[size_t(b)] == 1 ||
              save->omap[size_t(a)] == save->omap[size_t(b)])
            continue;
          json m = base;
          std::swap(m["nodes"][i]["omap"][size_t(a)], m["nodes"][i]["omap"][size_t(b)]);
          add(fmt::format("{}: omap axes {} and {} swapped", at, a, b), m);
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
  add_rewiring_mutants(base, add);
  for (int64_t r : {range + 1, range - 1}) {
    if (r <= 1) continue;
    json m = base;
    m["forloop_range"] = r;
    for (auto& n : m["nodes"]) n.erase("shape");
    add(fmt::format("forloop_range {}", r), m);
  }
  for (Mutant& m : out) {
    testing::drop_dead_block_nodes(m.body);
    for (auto& n : m.body["nodes"]) n.erase("shape");  // they would only restate the change
  }
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

// rmsnorm_linear with an eps and a scale after the quotient, for the mutants of those two, which
// no other source has. 0.25 and 0.125 are dyadic, so exact in every field, and large enough that
// dropping them shows in floats.
Source scaled_rmsnorm_linear() {
  const ir::testing::RmsNormLinearShape s;
  json body = ir::to_json(ir::testing::rmsnorm_linear_block(ir::DType::f32));
  json& nodes = body["nodes"];
  for (json& n : nodes)
    if (n["op"] == "accum" && n["fn"] == "rms") n["eps"] = 0.25;
  json& saver = nodes.back();
  const json scale = {{"op", "mul_scalar"},
                      {"inputs", saver["inputs"]},
                      {"scalar", 0.125},
                      {"dtype", saver["dtype"]},
                      {"shape", saver["shape"]}};
  saver["inputs"] = json::array({nodes.size() - 1});  // where the scale lands
  nodes.insert(nodes.end() - 1, scale);

  ir::KernelGraph g;
  auto x = g.input("X", {s.m, s.k}, ir::DType::f32);
  auto gamma = g.input("G", {s.k, 1}, ir::DType::f32);
  auto w = g.input("W", {s.k, s.n}, ir::DType::f32);
  auto normed = g.rms_norm(x, {s.k}, g.reshape(gamma, {s.k}), 0.25);
  g.mark_output(g.mul_scalar(g.matmul(normed, w), 0.125), "out");
  return {"scaled_rmsnorm_linear", g, ir::block_graph_from_json(body)};
}

// The source's outputs on one random draw of floats, to tell a change that leaves the function
// as it was (not a mutant) from one that does not.
class FloatProbe {
 public:
  explicit FloatProbe(const ir::KernelGraph& reference) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (const ir::TensorRef& in : reference.inputs()) {
      ir::HostTensor t(reference.type(in));
      for (int64_t i = 0; i < t.size(); ++i) t.set(i, uniform(rng));
      inputs_.push_back(std::move(t));
    }
    expected_ = verify::run_reference(reference, inputs_);
  }

  bool same_function(const ir::BlockGraph& mutant) const {
    const std::vector<ir::HostTensor> got = verify::run_block_graph(mutant, inputs_);
    if (got.size() != expected_.size()) return false;
    for (size_t o = 0; o < expected_.size(); ++o) {
      if (got[o].type != expected_[o].type) return false;
      for (int64_t i = 0; i < expected_[o].size(); ++i) {
        const double e = expected_[o].get(i), a = got[o].get(i);
        if (!(std::fabs(a - e) <= 1e-4 * (1 + std::fabs(e)))) return false;  // NaN: different
      }
    }
    return true;
  }

 private:
  std::vector<ir::HostTensor> inputs_, expected_;
};

std::vector<Source> sources() {
  using namespace ir::testing;
  const ir::DType f32 = ir::DType::f32;
  std::vector<Source> out;
  out.push_back({"rmsnorm_linear", rmsnorm_linear_column_reference(), rmsnorm_linear_block(f32)});
  out.push_back(scaled_rmsnorm_linear());
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
  size_t total = 0, invalid = 0, equal = 0, rejected = 0;
  std::vector<std::string> accepted;
  for (const Source& src : sources()) {
    // The source itself is correct: the mutants differ from a program that passes.
    ASSERT_TRUE(verify::check_equivalent(src.reference, src.body, options).equivalent) << src.name;
    const FloatProbe probe(src.reference);
    ASSERT_TRUE(probe.same_function(src.body)) << src.name;
    for (const Mutant& m : mutants_of(src.body)) {
      ++total;
      try {
        const ir::BlockGraph mutant = ir::block_graph_from_json(m.body);
        const verify::EquivalenceResult r =
            verify::check_equivalent(src.reference, mutant, options);
        if (!r.equivalent) {
          ++rejected;
        } else if (probe.same_function(mutant)) {
          ++equal;  // accepted rightly: the change left the function as it was
        } else {
          accepted.push_back(src.name + ": " + m.what);
        }
      } catch (const Error&) {
        ++invalid;
      }
    }
  }
  const size_t fingerprinted = rejected + equal + accepted.size();
  std::cerr << total << " mutants: " << invalid << " rejected as invalid, " << fingerprinted
            << " reached the fingerprint check: " << rejected << " rejected there, " << equal
            << " accepted as equal programs (not mutants after all), " << accepted.size()
            << " accepted\n";
  EXPECT_GE(rejected + accepted.size(), 200u);  // true mutants that reached the fingerprints
  EXPECT_GT(invalid, 0u);                       // the validator's side is exercised too
  EXPECT_TRUE(accepted.empty()) << "accepted mutants:\n"
                                << fmt::format("{}", fmt::join(accepted, "\n"));
}

}  // namespace
}  // namespace yirage::search
