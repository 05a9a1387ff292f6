// The library steps of a lowered program (codegen.h's LibraryGemm): which kernel-level matmuls
// become cuBLAS calls, which adds fold into them, and which products share one call. Lowering
// only: these run in CI with no GPU; cuda_gpu_test.cpp runs the same steps on one.
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "backend/cuda/codegen.h"
#include "block_test_graphs.h"
#include "suite/suite.h"

namespace yirage::backend::cuda {
namespace {

// With library_matmul, a kernel-level matmul becomes one cuBLAS step (no source) when each
// operand is either one matrix per product or one shared by all, and a generated kernel otherwise.
TEST(CudaCompile, LibraryMatmulSteps) {
  const CodegenOptions with_library{.library_matmul = true};
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    const ir::KernelGraph g = ir::testing::matmul_layouts_graph(t);
    const Program p = lower(g, with_library);
    ASSERT_EQ(p.kernels.size(), 4u);
    auto expect_gemm = [&](const KernelLaunch& step, int64_t batches, int64_t sa, int64_t sb) {
      ASSERT_TRUE(step.gemm) << step.what;
      EXPECT_TRUE(step.source.empty());
      EXPECT_EQ(step.args.size(), 3u);
      const LibraryGemm& m = *step.gemm;
      EXPECT_EQ(std::tuple(m.m, m.n, m.k, m.batches, m.stride_a, m.stride_b, m.stride_c, m.dtype),
                std::tuple(int64_t{17}, int64_t{24}, int64_t{40}, batches, sa, sb, int64_t{408}, t))
          << step.what;
    };
    expect_gemm(p.kernels[0], 6, 680, 960);
    expect_gemm(p.kernels[1], 6, 680, 0);
    expect_gemm(p.kernels[2], 6, 0, 960);
    EXPECT_FALSE(p.kernels[3].gemm) << "[2,1] x [3] batches need per-operand batch indexing";
    EXPECT_FALSE(p.kernels[3].source.empty());
    for (const KernelLaunch& step : lower(g).kernels) EXPECT_FALSE(step.gemm) << step.what;
  }
}

// An add whose operand is a library product read by nothing else folds into the call
// (C = A · B + D), wherever its other operand has the product's type and exists before it; a
// broadcast operand, a product also marked as an output, or an operand computed after the
// product keeps the add's kernel.
TEST(CudaCompile, LibraryProductsFoldTheirAdds) {
  const CodegenOptions with_library{.library_matmul = true};
  auto graph = [](int variant) {
    ir::KernelGraph g;
    auto x = g.input("X", {8, 64}, ir::DType::f16);
    auto w = g.input("W", {64, 32}, ir::DType::f16);
    auto r = g.input("R", {8, 32}, ir::DType::f16);
    auto bias = g.input("bias", {32}, ir::DType::f16);
    auto product = g.matmul(x, w);
    if (variant == 0) g.mark_output(g.add(product, r), "out");
    if (variant == 1) g.mark_output(g.add(r, product), "out");
    if (variant == 2) g.mark_output(g.add(product, bias), "out");
    if (variant == 3) {
      g.mark_output(g.add(product, r), "out");
      g.mark_output(product, "product");
    }
    if (variant == 4) g.mark_output(g.add(product, g.exp(r)), "out");
    return g;
  };
  for (int variant : {0, 1}) {
    const ir::KernelGraph g = graph(variant);
    const Program p = lower(g, with_library);
    ASSERT_EQ(p.kernels.size(), 1u) << "variant " << variant;
    const KernelLaunch& call = p.kernels[0];
    ASSERT_TRUE(call.gemm);
    EXPECT_TRUE(call.gemm->adds);
    ASSERT_EQ(call.args.size(), 4u);
    EXPECT_EQ(call.args[3], 2) << "D is R's slot";
    EXPECT_EQ(p.slots[size_t(call.args[2])].kind, SlotKind::output) << "the sum is the output";
    EXPECT_NE(call.what.find("adding"), std::string::npos) << call.what;
    for (const Slot& slot : p.slots)
      EXPECT_NE(slot.kind, SlotKind::scratch) << "the folded product keeps no buffer of its own";
  }
  for (int variant : {2, 3, 4}) {
    const Program p = lower(graph(variant), with_library);
    for (const KernelLaunch& step : p.kernels)
      EXPECT_FALSE(step.gemm && step.gemm->adds) << "variant " << variant;
    EXPECT_GE(p.kernels.size(), 2u) << "variant " << variant;
  }
  const Program kept = lower(graph(0), {.library_matmul = true, .fold_adds = false});
  EXPECT_EQ(kept.kernels.size(), 2u) << "fold_adds off keeps the add's kernel";
  // The Llama MLP's residual: its plain graph's last add folds into the down projection.
  const Program llama =
      lower(suite::build_workload("llama_mlp_block", 8, ir::DType::f16), with_library);
  int adding = 0;
  for (const KernelLaunch& step : llama.kernels) adding += step.gemm && step.gemm->adds;
  EXPECT_EQ(adding, 1);
  EXPECT_TRUE(llama.kernels.back().gemm && llama.kernels.back().gemm->adds);
  // Every scratch slot left is one some step uses, numbered in order.
  const Program unfolded = lower(suite::build_workload("llama_mlp_block", 8, ir::DType::f16),
                                 {.library_matmul = true, .fold_adds = false});
  auto scratch_slots = [](const Program& p) {
    std::vector<int> numbers;
    for (const Slot& slot : p.slots)
      if (slot.kind == SlotKind::scratch) numbers.push_back(slot.index);
    return numbers;
  };
  const std::vector<int> folded_scratch = scratch_slots(llama);
  EXPECT_EQ(folded_scratch.size() + 1, scratch_slots(unfolded).size());
  for (size_t i = 0; i < folded_scratch.size(); ++i) EXPECT_EQ(folded_scratch[i], int(i));
  std::set<int> referenced;
  for (const KernelLaunch& step : llama.kernels)
    referenced.insert(step.args.begin(), step.args.end());
  for (const Slot& slot : llama.slots)
    if (slot.kind == SlotKind::view) referenced.insert(slot.index);
  for (size_t i = 0; i < llama.slots.size(); ++i) {
    if (llama.slots[i].kind != SlotKind::scratch) continue;
    EXPECT_TRUE(referenced.contains(int(i))) << "scratch slot " << i << " is used";
  }
}

// Library products of the same sizes that read the same A run as one call over arrays of
// pointers (LibraryGemm::group), where each later product's B exists when the first call runs:
// the gated MLP's gate and up, or three products of one X. A product whose B is computed after
// the first product, of other sizes, of another A, or one that folds an add keeps its own call,
// and a grouped product folds no add.
TEST(CudaCompile, LibraryProductsSharingAGroup) {
  const CodegenOptions with_library{.library_matmul = true};
  const Program gated = lower(suite::build_workload("gated_mlp", 8, ir::DType::f16), with_library);
  int calls = 0;
  for (const KernelLaunch& step : gated.kernels) {
    if (!step.gemm) continue;
    ++calls;
    EXPECT_EQ(step.gemm->group, 2) << step.what;
    ASSERT_EQ(step.args.size(), 5u) << "A, B_0, C_0, B_1, C_1";
    EXPECT_EQ(step.args[0], 0) << "X's slot";
    EXPECT_EQ(std::set<int>({step.args[1], step.args[3]}), std::set<int>({1, 2})) << "W1, W2";
    EXPECT_NE(step.args[2], step.args[4]);
    EXPECT_NE(step.what.find("sharing A"), std::string::npos) << step.what;
  }
  EXPECT_EQ(calls, 1);
  const Program apart = lower(suite::build_workload("gated_mlp", 8, ir::DType::f16),
                              {.library_matmul = true, .group_products = false});
  int single = 0;
  for (const KernelLaunch& step : apart.kernels) {
    if (!step.gemm) continue;
    ++single;
    EXPECT_EQ(step.gemm->group, 1) << step.what;
  }
  EXPECT_EQ(single, 2) << "group_products off keeps two calls";

  ir::KernelGraph g;
  auto x = g.input("X", {8, 64}, ir::DType::f16);
  auto y = g.input("Y", {8, 64}, ir::DType::f16);
  auto z = g.input("Z", {8, 64}, ir::DType::f16);
  auto w1 = g.input("W1", {64, 32}, ir::DType::f16);
  auto w2 = g.input("W2", {64, 32}, ir::DType::f16);
  auto wide = g.input("Wide", {64, 48}, ir::DType::f16);
  auto r = g.input("R", {8, 32}, ir::DType::f16);
  auto early = g.exp(w2);                              // exists before the first product
  auto first = g.matmul(x, w1);                        // the first call
  auto late = g.exp(w1);                               // computed after it
  g.mark_output(g.matmul(x, early), "early_b");        // joins the first call
  g.mark_output(g.matmul(x, late), "late_b");          // a call of its own
  g.mark_output(g.matmul(x, wide), "wider");           // a call of its own
  g.mark_output(g.matmul(y, w1), "other_a");           // a call of its own
  g.mark_output(g.matmul(x, w2), "third");             // joins the first call
  g.mark_output(g.add(first, r), "first_plus_r");      // stays a kernel: its product is grouped
  g.mark_output(g.add(g.matmul(z, w2), r), "folded");  // folds its add
  g.mark_output(g.matmul(z, w1), "after_folded");      // so this one keeps a call of its own
  const Program p = lower(g, with_library);
  std::vector<std::pair<int64_t, bool>> steps;  // (group, adds) of each library call
  int add_kernels = 0;
  for (const KernelLaunch& step : p.kernels) {
    if (step.gemm) steps.emplace_back(step.gemm->group, step.gemm->adds);
    add_kernels += !step.gemm && step.what.find("(add)") != std::string::npos;
  }
  EXPECT_EQ(steps, (std::vector<std::pair<int64_t, bool>>{
                       {3, false}, {1, false}, {1, false}, {1, false}, {1, true}, {1, false}}));
  EXPECT_EQ(add_kernels, 1) << "the add of a grouped product stays a kernel";
}

}  // namespace
}  // namespace yirage::backend::cuda
