// Every lowered program against the reference executor: all kernel-level ops in each float
// dtype, the hand-built fused kernels, and the suite's workloads at small shapes.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "cpu_test_util.h"
#include "test_util.h"

namespace yirage::cpu_test {
namespace {

using ir::DType;
using ir::KernelGraph;
using ir::TensorRef;

class CpuLowering : public ::testing::TestWithParam<DType> {};

// One graph holding every kernel-level op, each result an output, so that one compile covers
// them. Shapes are odd where they can be, so vector tails run too.
KernelGraph all_ops_graph(DType t) {
  KernelGraph g;
  TensorRef a = g.input("A", {3, 5, 37}, t);
  TensorRef b = g.input("B", {5, 37}, t);
  TensorRef col = g.input("C", {3, 5, 1}, t);
  TensorRef pa = g.input("PA", {3, 5, 37}, t);  // positive
  TensorRef pb = g.input("PB", {37}, t);        // positive
  TensorRef x = g.input("X", {7, 40}, t);
  TensorRef w = g.input("W", {40, 45}, t);
  TensorRef big = g.input("Y", {33, 64}, t);  // enough rows for the packed GEMM
  TensorRef wide = g.input("Z", {64, 70}, t);
  // 14 rows, columns split over the threads: the packed GEMM's short micro-kernel.
  TensorRef rows14 = g.input("Y14", {14, 64}, t);
  TensorRef wider = g.input("Z14", {64, 1030}, t);
  // 3 rows against a tall weight: the threads split K and sum their partial products.
  TensorRef rows3 = g.input("Y3", {3, 300}, t);
  TensorRef tall = g.input("Z3", {300, 50}, t);
  // 6 rows: C in registers, two vectors of columns plus a scalar tail.
  TensorRef rows6 = g.input("Y6", {6, 300}, t);
  TensorRef tall70 = g.input("Z6", {300, 70}, t);
  TensorRef cols3 = g.input("C3", {300, 3}, t);   // few columns: gemm_cols
  TensorRef bq = g.input("BQ", {2, 1, 6, 8}, t);  // batched matmul with broadcast batch dims
  TensorRef bk = g.input("BK", {3, 8, 5}, t);
  TensorRef table = g.input("T", {11, 6}, t);
  TensorRef ids = g.input("ids", {2, 3}, DType::i32);
  TensorRef rx = g.input("R", {2, 4, 3, 8}, t);
  TensorRef pos = g.input("pos", {4}, DType::i32);
  TensorRef gain = g.input("G", {37}, t);

  for (ir::UnaryFn fn : {ir::UnaryFn::exp, ir::UnaryFn::silu, ir::UnaryFn::gelu, ir::UnaryFn::relu,
                         ir::UnaryFn::square, ir::UnaryFn::neg})
    g.mark_output(g.unary(fn, a), std::string(ir::unary_name(fn)));
  for (ir::UnaryFn fn : {ir::UnaryFn::sqrt, ir::UnaryFn::rsqrt, ir::UnaryFn::reciprocal})
    g.mark_output(g.unary(fn, pa), std::string(ir::unary_name(fn)));
  g.mark_output(g.mul_scalar(a, 0.37), "mul_scalar");
  for (ir::BinaryFn fn :
       {ir::BinaryFn::add, ir::BinaryFn::sub, ir::BinaryFn::mul, ir::BinaryFn::div})
    g.mark_output(g.binary(fn, a, b), std::string(ir::binary_name(fn)));
  g.mark_output(g.add(col, a), "add_column");
  g.mark_output(g.pow(pa, pb), "pow");
  g.mark_output(g.reduce(ir::ReduceFn::sum, a, -1), "sum_last");
  g.mark_output(g.reduce(ir::ReduceFn::mean, a, 1, false), "mean_mid");
  g.mark_output(g.reduce(ir::ReduceFn::max, a, 0), "max_first");
  g.mark_output(g.rms_norm(a, {37}, gain), "rms_norm");
  g.mark_output(g.rms_norm(a, {5, 37}), "rms_norm_2d");
  g.mark_output(g.layer_norm(a, {37}, gain, pb), "layer_norm");
  g.mark_output(g.layer_norm(a, {37}), "layer_norm_plain");
  g.mark_output(g.softmax(a, -1), "softmax_last");
  g.mark_output(g.softmax(a, 1), "softmax_mid");
  g.mark_output(g.matmul(x, w), "matmul_rows");
  g.mark_output(g.matmul(big, wide), "matmul_packed");
  g.mark_output(g.matmul(rows14, wider), "matmul_packed_short");
  g.mark_output(g.matmul(rows3, tall), "matmul_split_k");
  g.mark_output(g.matmul(rows6, tall70), "matmul_rows_in_registers");
  g.mark_output(g.matmul(g.transpose(tall70, 0, 1), cols3), "matmul_few_columns");
  g.mark_output(g.matmul(bq, bk), "matmul_batched");
  g.mark_output(g.concat({a, pa, col}, 2), "concat");
  std::vector<TensorRef> parts = g.split(a, 2, {10, 27});
  g.mark_output(parts[0], "split0");
  g.mark_output(parts[1], "split1");
  g.mark_output(g.reshape(a, {15, 37}), "reshape");
  g.mark_output(g.permute(a, {2, 0, 1}), "permute");
  g.mark_output(g.transpose(rx, 1, 2), "transpose");
  g.mark_output(g.embedding(table, ids), "embedding");
  g.mark_output(g.rope(rx, pos), "rope_interleaved");
  g.mark_output(g.rope(rx, pos, 500.0, ir::RopeStyle::neox), "rope_neox");
  g.mark_output(a, "input_passthrough");
  g.mark_output(g.exp(g.matmul(x, w)), "chain");
  return g;
}

TEST_P(CpuLowering, EveryKernelOpMatchesTheReference) {
  check_against_reference(all_ops_graph(GetParam()), 1, "all ops", 4);
}

// The fused kernels of block_test_graphs.h, each as a node of a µGraph.
KernelGraph fused_graph(const ir::BlockGraph& body) {
  KernelGraph g;
  std::vector<TensorRef> operands;
  for (size_t i = 0; i < body.operands().size(); ++i)
    operands.push_back(
        g.input("in" + std::to_string(i), body.operands()[i].dims, body.operands()[i].dtype));
  auto shared = std::make_shared<const ir::BlockGraph>(body);
  std::vector<TensorRef> outs = g.add_node(ir::FusedOp{shared}, operands, "fused");
  for (size_t i = 0; i < outs.size(); ++i) g.mark_output(outs[i], "out" + std::to_string(i));
  return g;
}

TEST_P(CpuLowering, FusedKernelsMatchTheLiteralExecutor) {
  const DType t = GetParam();
  using namespace ir::testing;
  check_against_reference(rmsnorm_linear_ugraph(t), 2, "rmsnorm_linear µGraph");
  check_against_reference(fused_graph(rmsnorm_linear_block(t, {.m = 40, .k = 64, .n = 48})), 3,
                          "rmsnorm_linear, packed GEMM rows");
  check_against_reference(fused_graph(gated_mlp_block(t)), 4, "gated_mlp");
  check_against_reference(fused_graph(attention_exp_block(t)), 5, "attention exp");
  check_against_reference(fused_graph(attention_softmax_block(t)), 6, "attention softmax");
  KernelGraph split = fused_graph(split_k_block(t));
  split.mark_output(split.reduce(ir::ReduceFn::sum, split.outputs()[0].tensor, 0, false), "sum");
  check_against_reference(split, 7, "split-K with a kernel-level sum");
}

// Block ops beyond the shared fused kernels: reduce_to_width, a mean and a max accumulator, a
// tile rms_norm and layer_norm, a concat, and a post-loop elementwise op.
TEST_P(CpuLowering, RemainingBlockOpsMatchTheLiteralExecutor) {
  const DType t = GetParam();
  ir::BlockGraph g({{2, 1, 1}}, 4, {{t, {6, 32}}, {t, {32, 16}}});
  int32_t x = g.iterator(0, {ir::kReplicate, ir::kReplicate, ir::kReplicate}, 1);  // [6, 8]
  int32_t w = g.iterator(1, {1, ir::kReplicate, ir::kReplicate}, 0);               // [8, 8]
  int32_t xw = g.add(ir::MatmulOp{}, {x, w});                                      // [6, 8]
  int32_t widths = g.add(ir::ReduceToWidthOp{1, 2}, {x});                          // [6, 2]
  int32_t normed = g.add(ir::RmsNormOp{.normalized_shape = {8}, .eps = 1e-5}, {xw});
  int32_t ln = g.add(ir::LayerNormOp{.normalized_shape = {8}}, {xw});
  int32_t both = g.add(ir::ConcatOp{1}, {normed, ln});  // [6, 16]
  int32_t mean = g.accumulate(ir::AccumFn::mean, both);
  int32_t mx = g.accumulate(ir::AccumFn::max, widths);
  int32_t sq = g.accumulate(ir::AccumFn::rms, g.add(ir::UnaryOp{ir::UnaryFn::square}, {x}), 1e-3);
  g.save(g.add(ir::UnaryOp{ir::UnaryFn::neg}, {mean}), {1, ir::kReplicate, ir::kReplicate});
  g.save(
      g.add(ir::BinaryOp{ir::BinaryFn::mul}, {mx, g.add(ir::ReduceOp{ir::ReduceFn::sum, 1}, {sq})}),
      {1, ir::kReplicate, ir::kReplicate});
  check_against_reference(fused_graph(g), 8, "other block ops");
}

TEST_P(CpuLowering, SuiteWorkloadsAtSmallShapesMatchTheReference) {
  for (const std::string& name : kWorkloads)
    check_against_reference(small_workload(name, GetParam()), 9, name, 1,
                            {{"Q", 0.25f}, {"K", 0.25f}});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuLowering,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(ir::dtype_name(info.param)); });

TEST(CpuBackend, IsAvailableWithACompiler) {
  backend::Availability a = cpu_backend().availability();
  EXPECT_TRUE(a.available) << a.reason;
}

TEST(CpuBackend, AnEmbeddingIdOutOfRangeIsAnErrorNamingTheNode) {
  KernelGraph g;
  g.mark_output(g.add_node(ir::EmbeddingOp{},
                           {g.input("T", {4, 2}, DType::f32), g.input("ids", {3}, DType::i32)},
                           "lookup")[0]);
  std::vector<ir::HostTensor> inputs = inputs_for(g, 1, 4);
  inputs[1].set_i32(2, 9);
  std::string error = test_util::error_of([&] { backend::run_on(cpu_backend(), g, inputs); });
  EXPECT_NE(error.find("embedding 'lookup'"), std::string::npos) << error;
  EXPECT_NE(error.find("= 9"), std::string::npos) << error;
}

TEST(CpuBackend, ALaunchWithWrongBuffersIsAnError) {
  KernelGraph g;
  g.mark_output(g.exp(g.input("x", {4}, DType::f32)));
  std::unique_ptr<backend::Module> module = cpu_backend().compile(g);
  std::unique_ptr<backend::Buffer> small = cpu_backend().allocate(8);
  std::unique_ptr<backend::Buffer> right = cpu_backend().allocate(16);
  backend::Buffer* in[] = {small.get()};
  backend::Buffer* out[] = {right.get()};
  std::string error = test_util::error_of([&] { module->launch(in, out); });
  EXPECT_NE(error.find("input 'x' needs 16 bytes"), std::string::npos) << error;
}

}  // namespace
}  // namespace yirage::cpu_test
