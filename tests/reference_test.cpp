// Hand-computed cases for the reference executor, one or more per op, plus its rounding rule and
// its errors. The NumPy comparison on random inputs lives in tests/python/test_reference_numpy.py.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

using ir::DType;
using ir::HostTensor;
using ir::KernelGraph;
using ir::TensorRef;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

HostTensor tensor(DType dtype, ir::Dims dims, const std::vector<float>& values) {
  HostTensor t({dtype, std::move(dims)});
  EXPECT_EQ(t.size(), int64_t(values.size())) << "test data does not fill the tensor";
  for (size_t i = 0; i < values.size(); ++i) t.set(int64_t(i), values[i]);
  return t;
}

HostTensor ids(ir::Dims dims, const std::vector<int32_t>& values) {
  HostTensor t({DType::i32, std::move(dims)});
  for (size_t i = 0; i < values.size(); ++i) t.set_i32(int64_t(i), values[i]);
  return t;
}

// Runs a graph with exactly one marked output and returns it, checking its type on the way.
std::vector<float> run_one(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                           const ir::Dims& expected_dims) {
  std::vector<HostTensor> outs = run_reference(g, inputs);
  EXPECT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].type, g.type(g.outputs()[0].tensor));
  EXPECT_EQ(outs[0].type.dims, expected_dims);
  return outs[0].to_floats();
}

std::string error_of(const KernelGraph& g, const std::vector<HostTensor>& inputs) {
  return test_util::error_of([&] { run_reference(g, inputs); });
}

constexpr float kTol = 1e-6f;

TEST(Reference, Matmul2x2) {
  KernelGraph g;
  auto a = g.input("a", {2, 2}, DType::f32);
  auto b = g.input("b", {2, 2}, DType::f32);
  g.mark_output(g.matmul(a, b));
  auto out = run_one(
      g, {tensor(DType::f32, {2, 2}, {1, 2, 3, 4}), tensor(DType::f32, {2, 2}, {5, 6, 7, 8})},
      {2, 2});
  EXPECT_THAT(out, ElementsAre(19, 22, 43, 50));
}

TEST(Reference, MatmulBroadcastsBatchDims) {
  // a holds two 1x2 matrices; b is one 2x1 matrix shared by both.
  KernelGraph g;
  auto a = g.input("a", {2, 1, 2}, DType::f32);
  auto b = g.input("b", {2, 1}, DType::f32);
  g.mark_output(g.matmul(a, b));
  auto out = run_one(
      g, {tensor(DType::f32, {2, 1, 2}, {1, 2, 3, 4}), tensor(DType::f32, {2, 1}, {10, 100})},
      {2, 1, 1});
  EXPECT_THAT(out, ElementsAre(210, 430));

  // Size-1 batch dims on both sides: [2, 1] x [1, 3] batches -> [2, 3].
  KernelGraph h;
  auto c = h.input("c", {2, 1, 1, 1}, DType::f32);
  auto d = h.input("d", {1, 3, 1, 1}, DType::f32);
  h.mark_output(h.matmul(c, d));
  out = run_one(
      h, {tensor(DType::f32, {2, 1, 1, 1}, {2, 3}), tensor(DType::f32, {1, 3, 1, 1}, {1, 10, 100})},
      {2, 3, 1, 1});
  EXPECT_THAT(out, ElementsAre(2, 20, 200, 3, 30, 300));
}

TEST(Reference, UnaryFunctions) {
  struct Case {
    ir::UnaryFn fn;
    float x;
    double expected;
    double scalar = 0.0;
  };
  const Case cases[] = {
      {ir::UnaryFn::exp, 1.0f, std::numbers::e},
      {ir::UnaryFn::silu, 1.0f, 1.0 / (1.0 + std::exp(-1.0))},
      {ir::UnaryFn::gelu, 1.0f, 0.8413447460685429},
      {ir::UnaryFn::gelu, -1.0f, -0.15865525393145707},
      {ir::UnaryFn::relu, -2.0f, 0.0},
      {ir::UnaryFn::relu, 2.0f, 2.0},
      {ir::UnaryFn::sqrt, 4.0f, 2.0},
      {ir::UnaryFn::rsqrt, 4.0f, 0.5},
      {ir::UnaryFn::square, -3.0f, 9.0},
      {ir::UnaryFn::neg, 1.5f, -1.5},
      {ir::UnaryFn::reciprocal, 4.0f, 0.25},
      {ir::UnaryFn::mul_scalar, 3.0f, 7.5, 2.5},
  };
  for (const Case& c : cases) {
    KernelGraph g;
    g.mark_output(g.unary(c.fn, g.input("x", {1}, DType::f32), c.scalar));
    auto out = run_one(g, {tensor(DType::f32, {1}, {c.x})}, {1});
    EXPECT_FLOAT_EQ(out[0], float(c.expected)) << ir::unary_name(c.fn) << "(" << c.x << ")";
  }
}

TEST(Reference, BinaryBroadcasts) {
  const std::vector<float> a = {1, 2};     // [2, 1]
  const std::vector<float> b = {2, 3, 4};  // [3]
  struct Case {
    ir::BinaryFn fn;
    std::vector<float> expected;
  };
  const Case cases[] = {
      {ir::BinaryFn::add, {3, 4, 5, 4, 5, 6}},
      {ir::BinaryFn::sub, {-1, -2, -3, 0, -1, -2}},
      {ir::BinaryFn::mul, {2, 3, 4, 4, 6, 8}},
      {ir::BinaryFn::div, {0.5f, 1.0f / 3, 0.25f, 1, 2.0f / 3, 0.5f}},
      {ir::BinaryFn::pow, {1, 1, 1, 4, 8, 16}},
  };
  for (const Case& c : cases) {
    KernelGraph g;
    auto x = g.input("a", {2, 1}, DType::f32);
    auto y = g.input("b", {3}, DType::f32);
    g.mark_output(g.binary(c.fn, x, y));
    auto out = run_one(g, {tensor(DType::f32, {2, 1}, a), tensor(DType::f32, {3}, b)}, {2, 3});
    EXPECT_THAT(out, Pointwise(FloatNear(kTol), c.expected)) << ir::binary_name(c.fn);
  }
}

TEST(Reference, ReduceOverEachDim) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [2, 3]
  auto reduce = [&](ir::ReduceFn fn, int dim, bool keepdim, const ir::Dims& dims) {
    KernelGraph g;
    g.mark_output(g.reduce(fn, g.input("x", {2, 3}, DType::f32), dim, keepdim));
    return run_one(g, {tensor(DType::f32, {2, 3}, x)}, dims);
  };
  EXPECT_THAT(reduce(ir::ReduceFn::sum, 1, false, {2}), ElementsAre(6, 15));
  EXPECT_THAT(reduce(ir::ReduceFn::mean, -1, true, {2, 1}), ElementsAre(2, 5));
  EXPECT_THAT(reduce(ir::ReduceFn::max, 1, false, {2}), ElementsAre(3, 6));
  EXPECT_THAT(reduce(ir::ReduceFn::sum, 0, true, {1, 3}), ElementsAre(5, 7, 9));
  EXPECT_THAT(reduce(ir::ReduceFn::max, 0, false, {3}), ElementsAre(4, 5, 6));
}

TEST(Reference, RmsNormOfThreeFour) {
  // mean(x^2) = (9 + 16) / 2 = 12.5, so y = x / sqrt(12.5).
  const double rms = std::sqrt(12.5);
  KernelGraph g;
  auto x = g.input("x", {1, 2}, DType::f32);
  auto w = g.input("w", {2}, DType::f32);
  g.mark_output(g.rms_norm(x, {2}, std::nullopt, 0.0), "plain");
  g.mark_output(g.rms_norm(x, {2}, w, 0.0), "weighted");
  auto outs =
      run_reference(g, {tensor(DType::f32, {1, 2}, {3, 4}), tensor(DType::f32, {2}, {2, 0.5f})});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_THAT(outs[0].to_floats(), Pointwise(FloatNear(kTol), {float(3 / rms), float(4 / rms)}));
  EXPECT_THAT(outs[1].to_floats(),
              Pointwise(FloatNear(kTol), {float(2 * 3 / rms), float(0.5 * 4 / rms)}));
}

TEST(Reference, RmsNormEpsAndMultiDimGroups) {
  // normalized_shape [2, 2] groups all four trailing elements of each row.
  KernelGraph g;
  g.mark_output(g.rms_norm(g.input("x", {2, 2, 2}, DType::f32), {2, 2}, std::nullopt, 1.0));
  auto out = run_one(g, {tensor(DType::f32, {2, 2, 2}, {1, 1, 1, 1, 2, 2, 2, 2})}, {2, 2, 2});
  const float first = float(1 / std::sqrt(1.0 + 1.0)), second = float(2 / std::sqrt(4.0 + 1.0));
  EXPECT_THAT(out, Pointwise(FloatNear(kTol),
                             {first, first, first, first, second, second, second, second}));
}

TEST(Reference, LayerNormWithAndWithoutParams) {
  // mean 2.5, population variance 1.25.
  const double sd = std::sqrt(1.25);
  const std::vector<double> z = {-1.5 / sd, -0.5 / sd, 0.5 / sd, 1.5 / sd};
  KernelGraph g;
  auto x = g.input("x", {1, 4}, DType::f32);
  auto w = g.input("w", {4}, DType::f32);
  auto b = g.input("b", {4}, DType::f32);
  g.mark_output(g.layer_norm(x, {4}, std::nullopt, std::nullopt, 0.0), "plain");
  g.mark_output(g.layer_norm(x, {4}, w, b, 0.0), "affine");
  g.mark_output(g.layer_norm(x, {4}, std::nullopt, b, 0.0), "bias_only");
  auto outs = run_reference(
      g, {tensor(DType::f32, {1, 4}, {1, 2, 3, 4}), tensor(DType::f32, {4}, {1, 2, 3, 4}),
          tensor(DType::f32, {4}, {10, 20, 30, 40})});
  ASSERT_EQ(outs.size(), 3u);
  std::vector<float> plain, affine, bias_only;
  for (size_t i = 0; i < 4; ++i) {
    plain.push_back(float(z[i]));
    affine.push_back(float(z[i] * double(i + 1) + 10.0 * double(i + 1)));
    bias_only.push_back(float(z[i] + 10.0 * double(i + 1)));
  }
  EXPECT_THAT(outs[0].to_floats(), Pointwise(FloatNear(kTol), plain));
  EXPECT_THAT(outs[1].to_floats(), Pointwise(FloatNear(1e-5f), affine));
  EXPECT_THAT(outs[2].to_floats(), Pointwise(FloatNear(1e-5f), bias_only));
}

TEST(Reference, SoftmaxKnownValuesAndStability) {
  const std::vector<float> expected = {0.09003057317f, 0.24472847105f, 0.66524095577f};
  for (float shift : {0.0f, 1000.0f}) {  // exp(1000) overflows unless the max is subtracted
    KernelGraph g;
    g.mark_output(g.softmax(g.input("x", {3}, DType::f32), 0));
    auto out = run_one(g, {tensor(DType::f32, {3}, {1 + shift, 2 + shift, 3 + shift})}, {3});
    EXPECT_THAT(out, Pointwise(FloatNear(kTol), expected)) << "shift " << shift;
  }
  // Over dim 0 of a [2, 2]: each column sums to 1.
  KernelGraph g;
  g.mark_output(g.softmax(g.input("x", {2, 2}, DType::f32), 0));
  auto out = run_one(g, {tensor(DType::f32, {2, 2}, {0, 5, 0, 5})}, {2, 2});
  EXPECT_THAT(out, Pointwise(FloatNear(kTol), {0.5f, 0.5f, 0.5f, 0.5f}));
}

TEST(Reference, ConcatSplitPermuteReshape) {
  KernelGraph g;
  auto a = g.input("a", {2, 1}, DType::f32);
  auto b = g.input("b", {2, 2}, DType::f32);
  auto cat = g.concat({a, b}, 1);  // [[1, 3, 4], [2, 5, 6]]
  g.mark_output(cat, "cat");
  auto parts = g.split(cat, 1, {2, 1});
  g.mark_output(parts[0], "left");
  g.mark_output(parts[1], "right");
  g.mark_output(g.permute(cat, {1, 0}), "transposed");
  g.mark_output(g.reshape(cat, {3, 2}), "reshaped");
  g.mark_output(g.concat({parts[1], parts[0]}, -1), "rotated");
  auto outs = run_reference(
      g, {tensor(DType::f32, {2, 1}, {1, 2}), tensor(DType::f32, {2, 2}, {3, 4, 5, 6})});
  ASSERT_EQ(outs.size(), 6u);
  EXPECT_THAT(outs[0].to_floats(), ElementsAre(1, 3, 4, 2, 5, 6));
  EXPECT_THAT(outs[1].to_floats(), ElementsAre(1, 3, 2, 5));
  EXPECT_THAT(outs[2].to_floats(), ElementsAre(4, 6));
  EXPECT_THAT(outs[3].to_floats(), ElementsAre(1, 2, 3, 5, 4, 6));
  EXPECT_EQ(outs[4].type.dims, (ir::Dims{3, 2}));
  EXPECT_THAT(outs[4].to_floats(), ElementsAre(1, 3, 4, 2, 5, 6));
  EXPECT_THAT(outs[5].to_floats(), ElementsAre(4, 1, 3, 6, 2, 5));
}

TEST(Reference, SplitThenConcatIsIdentityIn4D) {
  KernelGraph g;
  auto x = g.input("x", {2, 3, 4, 5}, DType::bf16);
  auto parts = g.split(x, 2, {1, 2, 1});
  auto back = g.concat(parts, 2);
  // Two permutes that undo each other.
  g.mark_output(g.permute(g.permute(back, {3, 1, 0, 2}), {2, 1, 3, 0}));
  HostTensor in({DType::bf16, {2, 3, 4, 5}});
  for (int64_t i = 0; i < in.size(); ++i) in.set(i, float(i) * 0.25f);
  auto out = run_one(g, {in}, {2, 3, 4, 5});
  EXPECT_THAT(out, ElementsAreArray(in.to_floats()));
}

TEST(Reference, EmbeddingLooksUpRows) {
  KernelGraph g;
  auto table = g.input("table", {3, 2}, DType::f16);
  auto tokens = g.input("tokens", {2, 2}, DType::i32);
  g.mark_output(g.embedding(table, tokens));
  auto out =
      run_one(g, {tensor(DType::f16, {3, 2}, {0, 1, 10, 11, 20, 21}), ids({2, 2}, {2, 0, 1, 2})},
              {2, 2, 2});
  EXPECT_THAT(out, ElementsAre(20, 21, 0, 1, 10, 11, 20, 21));
}

// With theta = (2/pi)^2 and head_dim 4, pair 1 turns by pos * theta^(-1/2) = pos * pi/2 and
// pair 0 by pos radians.
TEST(Reference, RopeRotatesByNinetyDegrees) {
  const double theta = (2 / std::numbers::pi) * (2 / std::numbers::pi);
  const float c1 = float(std::cos(1.0)), s1 = float(std::sin(1.0));
  const std::vector<float> head = {1, 2, 3, 4};
  struct Case {
    ir::RopeStyle style;
    std::vector<float> at_pos_1;
  };
  const Case cases[] = {
      // pairs (0, 1) by 1 rad and (2, 3) by 90 degrees: (a, b) -> (-b, a)
      {ir::RopeStyle::interleaved, {1 * c1 - 2 * s1, 1 * s1 + 2 * c1, -4, 3}},
      // pairs (0, 2) by 1 rad and (1, 3) by 90 degrees
      {ir::RopeStyle::neox, {1 * c1 - 3 * s1, -4, 1 * s1 + 3 * c1, 2}},
  };
  for (const Case& c : cases) {
    KernelGraph g;
    auto x = g.input("x", {1, 2, 1, 4}, DType::f32);  // batch 1, seq 2, heads 1, head_dim 4
    auto pos = g.input("pos", {2}, DType::i32);
    g.mark_output(g.rope(x, pos, theta, c.style));
    std::vector<float> both = head;
    both.insert(both.end(), head.begin(), head.end());
    auto out = run_one(g, {tensor(DType::f32, {1, 2, 1, 4}, both), ids({2}, {0, 1})}, {1, 2, 1, 4});
    std::vector<float> expected = head;  // position 0 leaves the head alone
    expected.insert(expected.end(), c.at_pos_1.begin(), c.at_pos_1.end());
    EXPECT_THAT(out, Pointwise(FloatNear(kTol), expected)) << ir::rope_style_name(c.style);
  }
}

TEST(Reference, NodesRunInOrderThroughAChain) {
  // sum(exp(x) * w) over the last dim, then sqrt.
  KernelGraph g;
  auto x = g.input("x", {2, 2}, DType::f32);
  auto w = g.input("w", {2}, DType::f32);
  g.mark_output(g.sqrt(g.reduce(ir::ReduceFn::sum, g.mul(g.exp(x), w), -1, false)));
  auto out =
      run_one(g, {tensor(DType::f32, {2, 2}, {0, 0, 1, 0}), tensor(DType::f32, {2}, {3, 1})}, {2});
  EXPECT_THAT(out, Pointwise(FloatNear(kTol), {2.0f, float(std::sqrt(3 * std::numbers::e + 1))}));
}

// ---- rounding -------------------------------------------------------------------------------

// A dot product accumulated in double and rounded once at the end. `values` are exact in `dtype`.
float dot_with_ones(DType dtype, const std::vector<float>& values) {
  const int64_t k = int64_t(values.size());
  KernelGraph g;
  auto a = g.input("a", {1, k}, dtype);
  auto b = g.input("b", {k, 1}, dtype);
  g.mark_output(g.matmul(a, b));
  std::vector<float> ones(values.size(), 1.0f);
  return run_one(g, {tensor(dtype, {1, k}, values), tensor(dtype, {k, 1}, ones)}, {1, 1})[0];
}

TEST(Reference, HalfPrecisionAccumulatesWideAndRoundsOnce) {
  // Accumulating in f16 would round 2048 + 1 back to 2048 at every step.
  EXPECT_EQ(dot_with_ones(DType::f16, {2048, 1, 1}), 2050.0f);
  // bf16 holds 8 significant bits: 256 + 1 ties back to 256 at every step.
  EXPECT_EQ(dot_with_ones(DType::bf16, {256, 1, 1}), 258.0f);
}

TEST(Reference, RoundsOnceNotThroughFloat) {
  // 1 + 2^-11 + 2^-24 lies just above the midpoint of 1 and the next f16, 1 + 2^-10, so it rounds
  // up. Narrowing to float first would tie it onto the midpoint, which then rounds to even, 1.
  EXPECT_EQ(dot_with_ones(DType::f16, {1, 0x1p-11f, 0x1p-24f}), 1 + 0x1p-10f);
  // The same for bf16, whose step at 1 is 2^-7.
  EXPECT_EQ(dot_with_ones(DType::bf16, {1, 0x1p-8f, 0x1p-24f}), 1 + 0x1p-7f);
  // And below the midpoint it rounds down.
  EXPECT_EQ(dot_with_ones(DType::f16, {1, 0x1p-12f}), 1.0f);
}

TEST(Reference, HalfPrecisionElementwiseRoundsTheResult) {
  // exp(1) = 2.71828...; its f16 neighbours are 2.716796875 and 2.71875, its bf16 neighbours
  // 2.703125 and 2.71875.
  for (DType dtype : {DType::f16, DType::bf16}) {
    KernelGraph g;
    g.mark_output(g.exp(g.input("x", {1}, dtype)));
    EXPECT_EQ(run_one(g, {tensor(dtype, {1}, {1})}, {1})[0], 2.71875f) << ir::dtype_name(dtype);
  }
}

// ---- errors ---------------------------------------------------------------------------------

TEST(ReferenceErrors, EmbeddingIdOutOfRange) {
  KernelGraph g;
  auto table = g.input("table", {3, 2}, DType::f32);
  auto tokens = g.input("tokens", {2, 2}, DType::i32);
  g.add_node(ir::EmbeddingOp{}, {table, tokens}, "tok_embed");
  g.mark_output({2, 0});
  const HostTensor t = tensor(DType::f32, {3, 2}, {0, 1, 2, 3, 4, 5});
  std::string message = error_of(g, {t, ids({2, 2}, {0, 1, 3, 2})});
  EXPECT_THAT(message, HasSubstr("embedding 'tok_embed'"));
  EXPECT_THAT(message, HasSubstr("ids[1, 0] = 3"));
  EXPECT_THAT(message, HasSubstr("[0, 3)"));
  message = error_of(g, {t, ids({2, 2}, {0, -1, 0, 0})});
  EXPECT_THAT(message, HasSubstr("ids[0, 1] = -1"));
}

TEST(ReferenceErrors, RopeNegativePosition) {
  KernelGraph g;
  auto x = g.input("x", {2, 1, 2}, DType::f32);
  auto pos = g.input("pos", {2}, DType::i32);
  g.add_node(ir::RopeOp{}, {x, pos}, "q_rope");
  g.mark_output({2, 0});
  std::string message = error_of(g, {HostTensor({DType::f32, {2, 1, 2}}), ids({2}, {0, -5})});
  EXPECT_THAT(message, HasSubstr("rope 'q_rope'"));
  EXPECT_THAT(message, HasSubstr("positions[1] = -5"));
}

TEST(ReferenceErrors, WrongInputs) {
  KernelGraph g;
  auto x = g.input("x", {2, 4096}, DType::f32);
  auto w = g.input("w", {4096}, DType::f32);
  g.mark_output(g.mul(x, w));
  const HostTensor good_x({DType::f32, {2, 4096}}), good_w({DType::f32, {4096}});
  EXPECT_EQ(error_of(g, {HostTensor({DType::f16, {2, 4096}}), good_w}),
            "input 'x': expected f32[2, 4096], got f16[2, 4096]");
  EXPECT_EQ(error_of(g, {good_x, HostTensor({DType::f32, {4095}})}),
            "input 'w': expected f32[4096], got f32[4095]");
  EXPECT_EQ(error_of(g, {good_x}), "expected 2 inputs (x, w), got 1");
  EXPECT_EQ(error_of(g, {good_x, good_w, good_w}), "expected 2 inputs (x, w), got 3");
  HostTensor truncated = good_w;
  truncated.bytes.resize(8);
  EXPECT_EQ(error_of(g, {good_x, truncated}),
            "input 'w': holds 8 bytes, but f32[4096] takes 16384");
  EXPECT_NO_THROW(check_inputs(g, {good_x, good_w}));
}

}  // namespace
}  // namespace yirage::verify
