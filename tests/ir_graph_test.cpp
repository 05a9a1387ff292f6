// Kernel-graph construction: inferred types, canonical attributes, and the one-line errors an
// invalid program gets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "support/error.h"

namespace yirage::ir {
namespace {

using ::testing::HasSubstr;

TEST(KernelGraph, InfersMatmulWithBroadcastBatch) {
  KernelGraph g;
  auto a = g.input("a", {2, 1, 5, 3}, DType::f16);
  auto b = g.input("b", {4, 3, 7}, DType::f16);
  auto c = g.matmul(a, b);
  EXPECT_EQ(g.type(c), (TensorType{DType::f16, {2, 4, 5, 7}}));
}

TEST(KernelGraph, InfersBroadcastBinary) {
  KernelGraph g;
  auto a = g.input("a", {4, 1, 3}, DType::f32);
  auto b = g.input("b", {5, 1}, DType::f32);
  EXPECT_EQ(g.type(g.add(a, b)).dims, (Dims{4, 5, 3}));
  auto s = g.input("s", {1}, DType::f32);
  EXPECT_EQ(g.type(g.pow(a, s)).dims, (Dims{4, 1, 3}));
}

TEST(KernelGraph, ReductionKeepsOrDropsDimAndStoresPositiveAxis) {
  KernelGraph g;
  auto x = g.input("x", {2, 3, 4}, DType::bf16);
  auto kept = g.reduce(ReduceFn::sum, x, -1);
  auto dropped = g.reduce(ReduceFn::max, x, 1, false);
  EXPECT_EQ(g.type(kept).dims, (Dims{2, 3, 1}));
  EXPECT_EQ(g.type(dropped).dims, (Dims{2, 4}));
  EXPECT_EQ(std::get<ReduceOp>(g.node(kept.node).op).dim, 2);
}

TEST(KernelGraph, SplitHasOneOutputPerSize) {
  KernelGraph g;
  auto x = g.input("x", {2, 10}, DType::f32);
  auto parts = g.split(x, -1, {3, 7});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(g.type(parts[1]).dims, (Dims{2, 7}));
  EXPECT_EQ(parts[1].port, 1);
  EXPECT_EQ(g.type(g.concat({parts[1], parts[0]}, 1)).dims, (Dims{2, 10}));
}

TEST(KernelGraph, ReshapeResolvesMinusOne) {
  KernelGraph g;
  auto x = g.input("x", {2, 3, 4}, DType::f32);
  auto y = g.reshape(x, {-1, 4});
  EXPECT_EQ(g.type(y).dims, (Dims{6, 4}));
  EXPECT_EQ(std::get<ReshapeOp>(g.node(y.node).op).shape, (Dims{6, 4}));
}

TEST(KernelGraph, TransposeIsAPermute) {
  KernelGraph g;
  auto x = g.input("x", {2, 3, 4}, DType::f32);
  auto y = g.transpose(x, 0, -1);
  EXPECT_EQ(g.type(y).dims, (Dims{4, 3, 2}));
  EXPECT_EQ(std::get<PermuteOp>(g.node(y.node).op).perm, (std::vector<int>{2, 1, 0}));
}

TEST(KernelGraph, EmbeddingAndRopeTypes) {
  KernelGraph g;
  auto table = g.input("table", {100, 64}, DType::bf16);
  auto ids = g.input("ids", {2, 5}, DType::i32);
  EXPECT_EQ(g.type(g.embedding(table, ids)), (TensorType{DType::bf16, {2, 5, 64}}));
  auto q = g.input("q", {5, 4, 64}, DType::f32);
  auto pos = g.input("pos", {5}, DType::i32);
  EXPECT_EQ(g.type(g.rope(q, pos)).dims, (Dims{5, 4, 64}));
}

TEST(KernelGraph, GeneratedNamesNeverCollideWithGivenOnes) {
  KernelGraph g;
  auto x = g.input("t1", {2}, DType::f32);
  auto y = g.exp(x);
  EXPECT_NE(g.node(y.node).name, "t1");
  g.mark_output(y);
  EXPECT_EQ(g.outputs()[0].name, g.node(y.node).name);
}

TEST(KernelGraph, InputsAreListedInInsertionOrder) {
  KernelGraph g;
  auto b = g.input("b", {2}, DType::f32);
  auto a = g.input("a", {2}, DType::f32);
  g.mark_output(g.add(a, b));
  EXPECT_EQ(g.inputs(), (std::vector<TensorRef>{b, a}));
}

// Each invalid program fails with one line naming the op, its operand types and the rule.
struct InvalidCase {
  const char* what;
  void (*build)(KernelGraph&);
  std::vector<const char*> expected;
};

const InvalidCase kInvalid[] = {
    {"matmul inner dims",
     [](KernelGraph& g) {
       g.matmul(g.input("a", {2, 3}, DType::f32), g.input("b", {4, 5}, DType::f32));
     },
     {"matmul(f32[2, 3], f32[4, 5])", "inner dims differ (3 vs 4)"}},
    {"matmul batch dims",
     [](KernelGraph& g) {
       g.matmul(g.input("a", {2, 2, 3}, DType::f32), g.input("b", {3, 3, 5}, DType::f32));
     },
     {"batch dims [2] and [3] do not broadcast"}},
    {"matmul rank 1",
     [](KernelGraph& g) {
       g.matmul(g.input("a", {3}, DType::f32), g.input("b", {3, 5}, DType::f32));
     },
     {"at least 2 dims"}},
    {"binary broadcast",
     [](KernelGraph& g) {
       g.add(g.input("a", {2, 3}, DType::f32), g.input("b", {4}, DType::f32));
     },
     {"add(f32[2, 3], f32[4])", "do not broadcast"}},
    {"dtype mismatch",
     [](KernelGraph& g) { g.mul(g.input("a", {2}, DType::f32), g.input("b", {2}, DType::f16)); },
     {"mul(f32[2], f16[2])", "different dtypes (f32 and f16)"}},
    {"arithmetic on quantized storage",
     [](KernelGraph& g) { g.exp(g.input("q", {2}, DType::i8)); },
     {"exp(i8[2])", "storage types for quantized weights"}},
    {"reduction dim out of range",
     [](KernelGraph& g) {
       g.reduce(ReduceFn::sum, g.input("x", {2, 3}, DType::f32), 2);
     },
     {"sum(f32[2, 3])", "dim 2 is out of range for rank 2"}},
    {"rms_norm shape",
     [](KernelGraph& g) {
       g.rms_norm(g.input("x", {2, 8}, DType::f32), {4});
     },
     {"rms_norm(f32[2, 8])", "normalized_shape [4] does not match"}},
    {"rms_norm weight shape",
     [](KernelGraph& g) {
       g.rms_norm(g.input("x", {2, 8}, DType::f32), {8}, g.input("w", {4}, DType::f32));
     },
     {"operand 1 must have shape normalized_shape [8]"}},
    {"layer_norm negative eps",
     [](KernelGraph& g) {
       g.layer_norm(g.input("x", {2, 8}, DType::f32), {8}, {}, {}, -1.0);
     },
     {"layer_norm", "eps must be finite and >= 0"}},
    {"softmax dim",
     [](KernelGraph& g) {
       g.softmax(g.input("x", {2, 8}, DType::f32), -3);
     },
     {"softmax(f32[2, 8])", "dim -3 is out of range"}},
    {"concat mismatch",
     [](KernelGraph& g) {
       g.concat({g.input("a", {2, 3}, DType::f32), g.input("b", {4, 5}, DType::f32)}, 1);
     },
     {"concat(f32[2, 3], f32[4, 5])", "differs in dim 0"}},
    {"concat of one",
     [](KernelGraph& g) {
       g.concat({g.input("a", {2, 3}, DType::f32)}, 1);
     },
     {"takes 2 to"}},
    {"split sizes",
     [](KernelGraph& g) {
       g.split(g.input("x", {2, 10}, DType::f32), 1, {3, 3});
     },
     {"sizes [3, 3] add up to 6, but dim 1 has extent 10"}},
    {"reshape count",
     [](KernelGraph& g) {
       g.reshape(g.input("x", {2, 3}, DType::f32), {4, 2});
     },
     {"reshape(f32[2, 3])", "has 8 elements, the input 6"}},
    {"reshape two unknowns",
     [](KernelGraph& g) {
       g.reshape(g.input("x", {2, 3}, DType::f32), {-1, -1});
     },
     {"may hold one -1"}},
    {"reshape rank 5",
     [](KernelGraph& g) {
       g.reshape(g.input("x", {32}, DType::f32), {2, 2, 2, 2, 2});
     },
     {"at most 4 dims"}},
    {"permute not a permutation",
     [](KernelGraph& g) {
       g.permute(g.input("x", {2, 3}, DType::f32), {0, 0});
     },
     {"perm [0, 0] is not a permutation of the 2 dims"}},
    {"embedding ids dtype",
     [](KernelGraph& g) {
       g.embedding(g.input("t", {10, 4}, DType::f32), g.input("ids", {3}, DType::f32));
     },
     {"embedding(f32[10, 4], f32[3])", "must have dtype i32"}},
    {"rope odd head dim",
     [](KernelGraph& g) {
       g.rope(g.input("x", {5, 2, 7}, DType::f32), g.input("p", {5}, DType::i32));
     },
     {"head_dim 7 must be even"}},
    {"rope positions length",
     [](KernelGraph& g) {
       g.rope(g.input("x", {5, 2, 8}, DType::f32), g.input("p", {4}, DType::i32));
     },
     {"positions (operand 1) must be i32[5]"}},
    {"input zero dim",
     [](KernelGraph& g) {
       g.input("x", {2, 0}, DType::f32);
     },
     {"input 'x'", "shape [2, 0] has a dim below 1"}},
    {"input rank 5",
     [](KernelGraph& g) {
       g.input("x", {1, 1, 1, 1, 1}, DType::f32);
     },
     {"input 'x'", "1 to 4 dims"}},
    {"duplicate name",
     [](KernelGraph& g) {
       g.input("x", {2}, DType::f32);
       g.input("x", {2}, DType::f32);
     },
     {"input 'x': a node with this name already exists"}},
    {"dangling operand",
     [](KernelGraph& g) {
       g.exp(TensorRef{7, 0});
     },
     {"exp: operand 0 refers to node 7, but the graph has 0 nodes"}},
    {"bad port",
     [](KernelGraph& g) {
       g.exp(TensorRef{g.input("x", {2}, DType::f32).node, 1});
     },
     {"refers to output 1 of node 'x', which has 1 output"}},
    {"input too large",
     [](KernelGraph& g) {
       g.input("x", {1 << 20, 1 << 20, 1 << 20}, DType::f32);
     },
     {"input 'x'", "more than 2^40 elements"}},
    {"broadcast result too large",
     [](KernelGraph& g) {
       g.add(g.input("a", {1 << 30, 1}, DType::f32), g.input("b", {1, 1 << 30}, DType::f32));
     },
     {"add result [1073741824, 1073741824] has more than 2^40 elements"}},
    {"input through add_node",
     [](KernelGraph& g) { g.add_node(InputOp{}, {}); },
     {"created with KernelGraph::input"}},
};

class InvalidGraph : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidGraph, FailsWithOneLineNamingOpAndRule) {
  KernelGraph g;
  try {
    GetParam().build(g);
    FAIL() << GetParam().what << ": no error";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const char* part : GetParam().expected) EXPECT_THAT(message, HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, InvalidGraph, ::testing::ValuesIn(kInvalid));

TEST(KernelGraph, ErrorsNameTheNode) {
  KernelGraph g;
  auto a = g.input("a", {2, 3}, DType::f32);
  try {
    g.add_node(MatmulOp{}, {a, a}, "proj");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("node 'proj': matmul(f32[2, 3], f32[2, 3])"));
  }
}

TEST(DType, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);             // rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie goes to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie goes to even (up)
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);             // tie to even: zero
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  // tie goes to even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every finite half survives a round trip
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << h;
  }
}

}  // namespace
}  // namespace yirage::ir
