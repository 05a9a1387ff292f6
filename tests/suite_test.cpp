// The public workload suite: names, shapes, batch scaling, dtypes, and that two of the graphs
// compute their programs (checked against hand-written loops on the reference executor).
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "suite/suite.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::suite {
namespace {

using ir::DType;
using test_util::error_of;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct Expected {
  std::string name;
  std::vector<std::string> inputs;
  ir::Dims out_bs1, out_bs2;
};

const std::vector<Expected>& expected() {
  static const std::vector<Expected> table = {
      {"rmsnorm_linear", {"X", "G", "W"}, {2, 6144}, {4, 6144}},
      {"gated_mlp", {"X", "W1", "W2"}, {8, 4096}, {16, 4096}},
      {"gqa", {"Q", "K", "V"}, {2, 256, 64}, {4, 256, 64}},
      {"lora", {"X", "W", "A", "B"}, {16, 4096}, {16, 4096}},
      {"ntrans", {"H", "X", "alpha"}, {8, 4096}, {16, 4096}},
      {"gemm_softmax", {"X", "W"}, {8, 32000}, {8, 32000}},
      {"gemm_layernorm", {"X", "W"}, {16, 4096}, {16, 4096}},
      {"llama_mlp_block", {"X", "G", "Wgu", "Wd"}, {1, 4096}, {2, 4096}},
  };
  return table;
}

std::vector<std::string> input_names(const ir::KernelGraph& g) {
  std::vector<std::string> names;
  for (ir::TensorRef input : g.inputs()) names.push_back(g.node(input.node).name);
  return names;
}

TEST(Suite, ListsTheEightWorkloadsInDesignOrder) {
  std::vector<std::string> names;
  for (const WorkloadInfo& w : workloads()) {
    names.push_back(w.name);
    EXPECT_FALSE(w.program.empty());
    EXPECT_EQ(w.program.find('\n'), std::string::npos);
  }
  EXPECT_THAT(names, ElementsAre("rmsnorm_linear", "gated_mlp", "gqa", "lora", "ntrans",
                                 "gemm_softmax", "gemm_layernorm", "llama_mlp_block"));
}

TEST(Suite, BuildsEveryWorkloadWithItsInputsAndOneOutputNamedOut) {
  for (const Expected& e : expected()) {
    SCOPED_TRACE(e.name);
    ir::KernelGraph g = build_workload(e.name);
    EXPECT_THAT(input_names(g), ElementsAreArray(e.inputs));
    ASSERT_EQ(g.outputs().size(), 1u);
    EXPECT_EQ(g.outputs()[0].name, "out");
    EXPECT_EQ(g.node(g.outputs()[0].tensor.node).name, "out");
    EXPECT_EQ(g.type(g.outputs()[0].tensor), (ir::TensorType{DType::f32, e.out_bs1}));
  }
}

TEST(Suite, BatchScaleGrowsOnlyBatchedWorkloads) {
  for (size_t i = 0; i < workloads().size(); ++i) {
    const Expected& e = expected()[i];
    SCOPED_TRACE(e.name);
    ir::KernelGraph g = build_workload(e.name, 2);
    EXPECT_EQ(g.type(g.outputs()[0].tensor).dims, e.out_bs2);
    EXPECT_EQ(workloads()[i].has_batch, e.out_bs1 != e.out_bs2);
  }
}

TEST(Suite, EveryInputTakesTheRequestedDtype) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    ir::KernelGraph g = build_workload("llama_mlp_block", 1, dtype);
    for (ir::TensorRef input : g.inputs()) EXPECT_EQ(g.type(input).dtype, dtype);
    EXPECT_EQ(g.type(g.outputs()[0].tensor).dtype, dtype);
  }
}

TEST(Suite, RejectsBadRequests) {
  EXPECT_EQ(error_of([] { build_workload("mlp"); }),
            "unknown workload 'mlp'; known workloads: rmsnorm_linear, gated_mlp, gqa, lora, "
            "ntrans, gemm_softmax, gemm_layernorm, llama_mlp_block");
  EXPECT_EQ(error_of([] { build_workload("gqa", 0); }),
            "workload 'gqa': bs must be at least 1, got 0");
  EXPECT_THAT(error_of([] { build_workload("gqa", 1, DType::i32); }), HasSubstr("got i32"));
}

double rms_scale(const std::vector<double>& row) {
  double sum_squares = 0;
  for (double v : row) sum_squares += v * v;
  return 1.0 / std::sqrt(sum_squares / double(row.size()) + 1e-6);
}

TEST(Suite, NtransComputesItsProgram) {
  ir::KernelGraph g = build_workload("ntrans");
  std::vector<ir::HostTensor> in = test_util::random_inputs(g, 3);
  ir::HostTensor out = verify::run_reference(g, in).at(0);
  const ir::HostTensor &h = in[0], &x = in[1], &alpha = in[2];
  const int64_t width = 4096;
  for (int64_t row : {0, 7}) {
    std::vector<double> hs(width), residual(width);
    for (int64_t j = 0; j < width; ++j) hs[size_t(j)] = h.get(row * width + j);
    double h_scale = rms_scale(hs);
    for (int64_t j = 0; j < width; ++j) {
      int64_t i = row * width + j;
      residual[size_t(j)] = x.get(i) + alpha.get(i) * (hs[size_t(j)] * h_scale + x.get(i));
    }
    double scale = rms_scale(residual);
    for (int64_t j = 0; j < width; j += 511)
      EXPECT_NEAR(out.get(row * width + j), residual[size_t(j)] * scale, 1e-4) << row << "," << j;
  }
}

TEST(Suite, LoraComputesItsProgram) {
  ir::KernelGraph g = build_workload("lora");
  std::vector<ir::HostTensor> in = test_util::random_inputs(g, 3);
  ir::HostTensor out = verify::run_reference(g, in).at(0);
  const ir::HostTensor &x = in[0], &w = in[1], &a = in[2], &b = in[3];
  for (int64_t i : {0, 15}) {
    for (int64_t j : {0, 1234, 4095}) {
      double expected = 0;
      for (int64_t k = 0; k < 256; ++k)
        expected += double(x.get(i * 256 + k)) * w.get(k * 4096 + j);
      for (int64_t r = 0; r < 16; ++r) {
        double down = 0;
        for (int64_t k = 0; k < 256; ++k) down += double(x.get(i * 256 + k)) * a.get(k * 16 + r);
        expected += down * b.get(r * 4096 + j);
      }
      EXPECT_NEAR(out.get(i * 4096 + j), expected, 1e-3) << i << "," << j;
    }
  }
}

TEST(Suite, LlamaBlockSplitsGateAndUpAndAddsTheResidual) {
  ir::KernelGraph g = build_workload("llama_mlp_block");
  const ir::Node& split = g.node(g.find("split"));
  ASSERT_EQ(split.outputs.size(), 2u);
  EXPECT_EQ(split.outputs[0].dims, (ir::Dims{1, 14336}));
  const ir::Node& gate = g.node(g.find("gate"));
  EXPECT_EQ(ir::op_name(gate.op), "silu");
  EXPECT_EQ(gate.inputs.at(0), (ir::TensorRef{g.find("split"), 0}));
  const ir::Node& hidden = g.node(g.find("hidden"));
  EXPECT_EQ(hidden.inputs.at(1), (ir::TensorRef{g.find("split"), 1}));
  const ir::Node& out = g.node(g.find("out"));
  EXPECT_EQ(ir::op_name(out.op), "add");
  EXPECT_EQ(out.inputs.at(1), (ir::TensorRef{g.find("X"), 0}));
}

}  // namespace
}  // namespace yirage::suite
