// Structural hash: equal for every build of one program, different when the program changes.
#include <regex>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "ir_test_graphs.h"

namespace yirage::ir {
namespace {

// The knobs of one small program; each non-default setting changes what it computes.
struct Program {
  DType dtype = DType::f32;
  int64_t batch = 2;
  UnaryFn fn = UnaryFn::mul_scalar;
  double scalar = 0.5;
  bool swap_sub = false;       // y - a instead of a - y
  bool square_wiring = false;  // b * b instead of b * y
  double theta = 10000.0;
  RopeStyle style = RopeStyle::interleaved;
  std::vector<int> perm{0, 2, 1, 3};
  double eps = 1e-6;
  Dims sizes{4, 4};
  int split_port = 0;
  int softmax_dim = 1;
  int reduce_dim = -1;
  bool keepdim = true;
  bool swap_outputs = false;
  bool unused_input = false;
  std::string prefix = "";  // names are not part of the program
};

KernelGraph build(const Program& p) {
  KernelGraph g;
  auto name = [&](std::string_view n) { return p.prefix + std::string(n); };
  // [batch, seq, heads, head_dim] with seq == heads == head_dim, so that the permutations
  // below keep the shape and only the attribute differs.
  auto x = g.input(name("x"), {p.batch, 8, 8, 8}, p.dtype);
  auto y = g.input(name("y"), {p.batch, 8, 8, 8}, p.dtype);
  auto pos = g.input(name("pos"), {8}, DType::i32);
  if (p.unused_input) g.input(name("unused"), {3}, DType::f32);
  auto a = g.add_node(UnaryOp{p.fn, p.scalar}, {x}, name("a"))[0];
  auto b = p.swap_sub ? g.sub(y, a) : g.sub(a, y);
  auto c = p.square_wiring ? g.mul(b, b) : g.mul(b, y);
  auto r = g.rope(c, pos, p.theta, p.style);
  auto permuted = g.permute(r, p.perm);
  auto n = g.rms_norm(permuted, {8}, {}, p.eps);
  auto parts = g.split(n, 3, p.sizes);
  auto soft = g.softmax(parts[size_t(p.split_port)], p.softmax_dim);
  auto s = g.reduce(ReduceFn::sum, soft, p.reduce_dim, p.keepdim);
  std::vector<TensorRef> outs{s, parts[1]};
  if (p.swap_outputs) std::swap(outs[0], outs[1]);
  g.mark_output(outs[0], name("out0"));
  g.mark_output(outs[1], name("out1"));
  return g;
}

TEST(IrHash, IgnoresNames) {
  Program renamed;
  renamed.prefix = "other_";
  EXPECT_EQ(structural_hash(build(renamed)), structural_hash(build({})));
}

// The same program built inputs-last, in another operand-independent order, with other names.
TEST(IrHash, IgnoresInsertionOrder) {
  KernelGraph first;
  {
    auto a = first.input("a", {4, 8}, DType::f32);
    auto w = first.input("w", {8, 16}, DType::f32);
    auto bias = first.input("bias", {16}, DType::f32);
    auto h = first.add(first.matmul(first.silu(a), w), bias);
    auto m = first.reduce(ReduceFn::max, a, 0);
    first.mark_output(h, "hidden");
    first.mark_output(m, "peak");
  }
  KernelGraph second;
  {
    auto bias = second.input("B", {16}, DType::f32);
    auto a = second.input("A", {4, 8}, DType::f32);
    auto m = second.reduce(ReduceFn::max, a, 0);
    auto act = second.silu(a);
    auto w = second.input("W", {8, 16}, DType::f32);
    auto h = second.add(second.matmul(act, w), bias);
    second.mark_output(h, "h");
    second.mark_output(m, "m");
  }
  EXPECT_EQ(structural_hash(first), structural_hash(second));
  EXPECT_EQ(structural_hash_hex(first), structural_hash_hex(second));

  // The canonical order binds inputs of one build to the other: a, w, bias <-> A, W, B.
  auto names = [](const KernelGraph& g) {
    std::vector<std::string> out;
    for (TensorRef t : canonical_input_order(g)) out.push_back(g.node(t.node).name);
    return out;
  };
  EXPECT_EQ(names(first), (std::vector<std::string>{"a", "w", "bias"}));
  EXPECT_EQ(names(second), (std::vector<std::string>{"A", "W", "B"}));
}

TEST(IrHash, SurvivesJsonRoundTrip) {
  KernelGraph g = testing::every_op_graph();
  EXPECT_EQ(structural_hash(parse_kernel_graph(to_json(g).dump())), structural_hash(g));
}

TEST(IrHash, HexIsSixteenLowercaseDigits) {
  KernelGraph g = build({});
  std::string hex = structural_hash_hex(g);
  EXPECT_TRUE(std::regex_match(hex, std::regex("[0-9a-f]{16}"))) << hex;
  EXPECT_EQ(std::stoull(hex, nullptr, 16), structural_hash(g));
}

TEST(IrHash, ChangesWithTheProgram) {
  const uint64_t base = structural_hash(build({}));
  struct Change {
    std::string what;
    Program program;
  };
  std::vector<Change> changes;
  auto change = [&](std::string what, auto edit) {
    Program p;
    edit(p);
    changes.push_back({std::move(what), p});
  };
  change("op", [](Program& p) { p.fn = UnaryFn::exp; });
  change("another op", [](Program& p) { p.fn = UnaryFn::relu; });
  change("scalar", [](Program& p) { p.scalar = 0.25; });
  change("eps", [](Program& p) { p.eps = 1e-5; });
  change("theta", [](Program& p) { p.theta = 500000.0; });
  change("style", [](Program& p) { p.style = RopeStyle::neox; });
  change("perm", [](Program& p) { p.perm = {0, 1, 3, 2}; });
  change("sizes", [](Program& p) { p.sizes = {2, 6}; });
  change("softmax dim", [](Program& p) { p.softmax_dim = 2; });
  change("reduce dim", [](Program& p) { p.reduce_dim = 1; });
  change("keepdim", [](Program& p) { p.keepdim = false; });
  change("shape", [](Program& p) { p.batch = 3; });
  change("dtype", [](Program& p) { p.dtype = DType::bf16; });
  change("swapped operands", [](Program& p) { p.swap_sub = true; });
  change("wiring", [](Program& p) { p.square_wiring = true; });
  change("split port", [](Program& p) { p.split_port = 1; });
  change("output order", [](Program& p) { p.swap_outputs = true; });
  change("unused input", [](Program& p) { p.unused_input = true; });

  std::set<uint64_t> seen{base};
  for (const Change& c : changes) {
    uint64_t h = structural_hash(build(c.program));
    EXPECT_NE(h, base) << c.what;
    EXPECT_TRUE(seen.insert(h).second) << c.what << " collides with another change";
  }
}

// The library flag changes the hash only when set, so that hashes of graphs from before it stay.
TEST(IrHash, LibraryMatmulFlagCountsOnlyWhenSet) {
  auto graph = [](bool library) {
    KernelGraph g;
    TensorRef x = g.input("x", {2, 3}, DType::f32), w = g.input("w", {3, 4}, DType::f32);
    g.mark_output(g.add_node(MatmulOp{.library = library}, {x, w})[0], "y");
    return g;
  };
  KernelGraph plain;
  plain.mark_output(
      plain.matmul(plain.input("x", {2, 3}, DType::f32), plain.input("w", {3, 4}, DType::f32)),
      "y");
  EXPECT_EQ(structural_hash(graph(false)), structural_hash(plain));
  EXPECT_NE(structural_hash(graph(true)), structural_hash(plain));
  EXPECT_EQ(structural_hash(parse_kernel_graph(to_json(graph(true)).dump())),
            structural_hash(graph(true)));
}

// Schedule choices are kept by the hash (the tuner caches the variant that won) and dropped by
// without_schedule_choices, which the proofs compare by.
TEST(IrHash, WithoutScheduleChoicesIsTheSameProgram) {
  KernelGraph g;
  TensorRef x = g.input("x", {2, 3}, DType::f32), w = g.input("w", {3, 4}, DType::f32);
  TensorRef q = g.input("q", {4, 34}, DType::u8);
  TensorRef y = g.add_node(MatmulOp{.library = true}, {x, w})[0];
  TensorRef a = g.input("a", {2, 32}, DType::f32);
  g.mark_output(y, "y");
  g.mark_output(g.add_node(ir::QuantMatmulOp{ir::QuantFormat::q8_0, false}, {a, q})[0], "z");
  const KernelGraph plain = without_schedule_choices(g);
  EXPECT_NE(structural_hash(plain), structural_hash(g));
  EXPECT_FALSE(std::get<MatmulOp>(plain.node(y.node).op).library);
  for (const ir::Node& n : plain.nodes())
    if (const auto* qm = std::get_if<ir::QuantMatmulOp>(&n.op)) {
      EXPECT_TRUE(qm->prefetch);
      EXPECT_EQ(qm->format, ir::QuantFormat::q8_0);  // what it computes stays
    }
  EXPECT_EQ(plain.inputs().size(), g.inputs().size());
  EXPECT_EQ(structural_hash(without_schedule_choices(plain)), structural_hash(plain));
}

TEST(IrHash, TellsInputsApartByPosition) {
  auto build_sub = [](bool swap_inputs) {
    KernelGraph g;
    auto x = g.input("x", {4}, DType::f32);
    auto y = g.input("y", {4}, DType::f32);
    g.mark_output(swap_inputs ? g.mul(y, x) : g.mul(x, y));
    return g;
  };
  // Both read "first reached input times second reached input": the same program.
  EXPECT_EQ(structural_hash(build_sub(false)), structural_hash(build_sub(true)));

  KernelGraph same_input;
  auto x = same_input.input("x", {4}, DType::f32);
  same_input.input("y", {4}, DType::f32);
  same_input.mark_output(same_input.mul(x, x));
  EXPECT_NE(structural_hash(same_input), structural_hash(build_sub(false)));
}

TEST(IrHash, UnusedInputsCountAsAMultiset) {
  auto build_with_unused = [](bool unused_first, std::vector<DType> unused) {
    KernelGraph g;
    auto add_unused = [&] {
      for (size_t i = 0; i < unused.size(); ++i) g.input(fmt::format("u{}", i), {2}, unused[i]);
    };
    if (unused_first) add_unused();
    auto x = g.input("x", {2}, DType::f32);
    if (!unused_first) add_unused();
    g.mark_output(g.exp(x));
    return g;
  };
  uint64_t base = structural_hash(build_with_unused(false, {DType::f16, DType::i32}));
  EXPECT_EQ(structural_hash(build_with_unused(true, {DType::i32, DType::f16})), base);
  EXPECT_NE(structural_hash(build_with_unused(false, {DType::f16})), base);
  EXPECT_NE(structural_hash(build_with_unused(false, {DType::f16, DType::i32, DType::i32})), base);

  // Reachable inputs come first, then unused ones in insertion order.
  KernelGraph g = build_with_unused(true, {DType::i32, DType::f16});
  std::vector<TensorRef> order = canonical_input_order(g);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(g.node(order[0].node).name, "x");
  EXPECT_EQ(g.node(order[1].node).name, "u0");
  EXPECT_EQ(g.node(order[2].node).name, "u1");
}

TEST(IrHash, IgnoresNodesNoOutputReads) {
  KernelGraph g = build({});
  uint64_t before = structural_hash(g);
  g.exp(TensorRef{0, 0});
  EXPECT_EQ(structural_hash(g), before);
}

}  // namespace
}  // namespace yirage::ir
