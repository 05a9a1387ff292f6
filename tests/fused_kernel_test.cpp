// µGraphs: kernel graphs whose nodes include fused kernels, through the builder's checks, the
// reference executor, JSON, the structural hash and DOT. tests/data/ugraph_rmsnorm_linear.json
// is the file form of testing::rmsnorm_linear_ugraph; tests/python/test_ugraph.py runs it
// through `yirage run` against NumPy.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "ir/ir.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::ir {
namespace {

using nlohmann::json;
using test_util::error_of;
using test_util::random_inputs;
using testing::expect_close;
using ::testing::HasSubstr;
using testing::kAllReplicated;
using ::testing::Not;

const std::filesystem::path kUGraphFile =
    std::filesystem::path(YIRAGE_SOURCE_DIR) / "tests" / "data" / "ugraph_rmsnorm_linear.json";

std::shared_ptr<const BlockGraph> shared(BlockGraph body) {
  return std::make_shared<const BlockGraph>(std::move(body));
}

// Split-K matmul and softmax attention as fused kernels, with kernel-level ops around them.
KernelGraph two_kernel_ugraph(DType dtype) {
  KernelGraph g;
  auto x = g.input("X", {testing::kSplitM, testing::kSplitK}, dtype);
  auto w = g.input("W", {testing::kSplitK, testing::kSplitN}, dtype);
  auto q = g.input("Q", {testing::kHeads, testing::kQueries, testing::kHeadDim}, dtype);
  auto k = g.input("K", {testing::kHeads, testing::kHeadDim, testing::kKeys}, dtype);
  auto v = g.input("V", {testing::kHeads, testing::kKeys, testing::kHeadDim}, dtype);
  auto rows = g.reshape(x, {1, testing::kSplitM, testing::kSplitK});
  auto partials = g.add_node(FusedOp{shared(testing::split_k_block(dtype))}, {rows, w})[0];
  g.mark_output(g.reduce(ReduceFn::sum, partials, 0, false), "xw");
  g.mark_output(g.add_node(FusedOp{shared(testing::attention_softmax_block(dtype))}, {q, k, v})[0],
                "attention");
  return g;
}

TEST(FusedKernel, RunsInTheReferenceExecutor) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph fused = testing::rmsnorm_linear_ugraph(dtype);
    EXPECT_EQ(fused.type(fused.outputs()[0].tensor), (TensorType{dtype, {4, 24}}));
    std::vector<HostTensor> inputs = random_inputs(fused, 11);
    expect_close(verify::run_reference(fused, inputs)[0],
                 verify::run_reference(testing::rmsnorm_linear_kernel(dtype), inputs)[0]);
  }
}

TEST(FusedKernel, SeveralFusedKernelsAmongKernelOps) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    KernelGraph g = two_kernel_ugraph(dtype);
    std::vector<HostTensor> inputs = random_inputs(g, 12);
    std::vector<HostTensor> outs = verify::run_reference(g, inputs);
    KernelGraph matmul;
    auto x = matmul.input("X", inputs[0].type.dims, dtype);
    auto w = matmul.input("W", inputs[1].type.dims, dtype);
    matmul.mark_output(matmul.matmul(x, w));
    expect_close(outs[0], verify::run_reference(matmul, {inputs[0], inputs[1]})[0]);
    expect_close(outs[1], verify::run_reference(testing::attention_kernel(dtype, true),
                                                {inputs[2], inputs[3], inputs[4]})[0]);
  }
}

TEST(FusedKernel, JsonRoundTripKeepsProgramAndHash) {
  KernelGraph g = two_kernel_ugraph(DType::bf16);
  json doc = to_json(g);
  KernelGraph back = from_json(doc);
  EXPECT_EQ(to_json(back), doc);
  EXPECT_EQ(structural_hash(back), structural_hash(g));
  std::vector<HostTensor> inputs = random_inputs(g, 13);
  std::vector<HostTensor> a = verify::run_reference(g, inputs);
  std::vector<HostTensor> b = verify::run_reference(back, inputs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].bytes, b[i].bytes) << i;

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("yirage-ugraph-{}.json", ::getpid());
  save_kernel_graph(g, file.string());
  KernelGraph loaded = load_kernel_graph(file.string());
  std::filesystem::remove(file);
  EXPECT_EQ(to_json(loaded), doc);
}

TEST(FusedKernel, CheckedInExampleMatchesTheBuilder) {
  KernelGraph file = load_kernel_graph(kUGraphFile.string());
  EXPECT_EQ(to_json(file), to_json(testing::rmsnorm_linear_ugraph(DType::f32)))
      << "regenerate " << kUGraphFile << " with save_kernel_graph";
}

// gated_mlp's body with the two projections built in the other order: the same program.
BlockGraph gated_mlp_block_reordered(DType dtype) {
  BlockGraph g({{2, 2, 1}}, 4, {{dtype, {8, 32}}, {dtype, {32, 16}}, {dtype, {32, 16}}});
  int32_t w2 = g.iterator(2, {1, kReplicate, kReplicate}, 0);
  int32_t x = g.iterator(0, {kReplicate, 0, kReplicate}, 1);
  int32_t up = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w2}));
  int32_t w1 = g.iterator(1, {1, kReplicate, kReplicate}, 0);
  int32_t gate = g.accumulate(AccumFn::sum, g.add(MatmulOp{}, {x, w1}));
  int32_t out = g.add(BinaryOp{BinaryFn::mul}, {g.add(UnaryOp{UnaryFn::silu}, {gate}), up});
  g.save(out, {1, 0, kReplicate});
  return g;
}

uint64_t hash_of_fused(std::shared_ptr<const BlockGraph> body) {
  KernelGraph g;
  std::vector<TensorRef> operands;
  for (size_t i = 0; i < body->operands().size(); ++i)
    operands.push_back(
        g.input(fmt::format("in{}", i), body->operands()[i].dims, body->operands()[i].dtype));
  for (TensorRef out : g.add_node(FusedOp{std::move(body)}, operands)) g.mark_output(out);
  return structural_hash(g);
}

TEST(FusedKernel, HashCoversTheBody) {
  const uint64_t base = hash_of_fused(shared(testing::gated_mlp_block(DType::f32)));
  EXPECT_EQ(hash_of_fused(shared(gated_mlp_block_reordered(DType::f32))), base);

  const uint64_t rms = hash_of_fused(shared(testing::rmsnorm_linear_block(DType::f32)));
  EXPECT_NE(hash_of_fused(shared(testing::rmsnorm_linear_block(DType::f32, {.blocks = 1}))), rms)
      << "the grid";
  EXPECT_NE(hash_of_fused(shared(testing::rmsnorm_linear_block(DType::f32, {.range = 2}))), rms)
      << "the loop range";
  EXPECT_NE(hash_of_fused(shared(testing::attention_exp_block(DType::f32))),
            hash_of_fused(shared(testing::attention_softmax_block(DType::f32))))
      << "the ops";

  // Equal but for one attribute of one block op.
  auto variant = [](AccumFn fn, AxisMap x_imap) {
    BlockGraph g({{1, 1, 1}}, 4, {{DType::f32, {4, 32}}, {DType::f32, {32, 24}}});
    int32_t x = g.iterator(0, x_imap, 1);
    int32_t w = g.iterator(1, kAllReplicated, 0);
    g.save(g.accumulate(fn, g.add(MatmulOp{}, {x, w})), kAllReplicated);
    return hash_of_fused(shared(std::move(g)));
  };
  const uint64_t sum = variant(AccumFn::sum, kAllReplicated);
  EXPECT_EQ(variant(AccumFn::sum, kAllReplicated), sum);
  EXPECT_NE(variant(AccumFn::mean, kAllReplicated), sum) << "the accumulator";
  EXPECT_NE(variant(AccumFn::sum, {0, kReplicate, kReplicate}), sum) << "the imap";
}

TEST(FusedKernel, BuilderErrors) {
  KernelGraph g;
  auto x = g.input("X", {4, 32}, DType::f32);
  auto gamma = g.input("G", {32}, DType::f32);
  auto w = g.input("W", {32, 24}, DType::f32);
  auto body = shared(testing::rmsnorm_linear_block(DType::f32));
  EXPECT_EQ(error_of([&] {
              g.add_node(FusedOp{body}, {x, gamma, w}, "f");
            }),
            "node 'f': fused(f32[4, 32], f32[32], f32[32, 24]): operand 1 is f32[32], but the body "
            "takes f32[32, 1]");
  EXPECT_EQ(error_of([&] {
              g.add_node(FusedOp{body}, {x, w}, "f");
            }),
            "node 'f': fused(f32[4, 32], f32[32, 24]): takes 3 operands, got 2");
  EXPECT_EQ(error_of([&] { g.add_node(FusedOp{}, {x}, "f"); }),
            "node 'f': fused(f32[4, 32]): the fused kernel has no body");

  BlockGraph no_saver({{1, 1, 1}}, 1, {{DType::f32, {4, 32}}});
  no_saver.accumulate(AccumFn::sum, no_saver.iterator(0, kAllReplicated, kReplicate));
  EXPECT_EQ(error_of([&] { g.add_node(FusedOp{shared(std::move(no_saver))}, {x}, "f"); }),
            "node 'f': fused(f32[4, 32]): invalid body: block graph: no saver; a fused kernel "
            "writes at least one output");
}

TEST(FusedKernel, JsonErrorsNameTheNestedPath) {
  json doc = to_json(testing::rmsnorm_linear_ugraph(DType::f32));
  ASSERT_EQ(doc["nodes"][4]["op"], "fused");
  json bad_omap = doc;
  bad_omap["nodes"][4]["body"]["nodes"][10]["omap"] = {1, -1};
  EXPECT_EQ(error_of([&] { from_json(bad_omap); }),
            "$.nodes[4].body.nodes[10].omap: expected 3 entries, one per grid axis (x, y, z), "
            "got 2");
  json bad_results = doc;
  bad_results["nodes"][4]["outputs"].push_back(bad_results["nodes"][4]["outputs"][0]);
  EXPECT_EQ(error_of([&] { from_json(bad_results); }),
            "$.nodes[4].outputs: declares 2 results, but the fused produces 1");
  json no_body = doc;
  no_body["nodes"][4].erase("body");
  EXPECT_EQ(error_of([&] { from_json(no_body); }), "$.nodes[4]: missing field \"body\"");
  json wrong_operand = doc;
  wrong_operand["nodes"][4]["inputs"][1] = "G";
  EXPECT_EQ(error_of([&] { from_json(wrong_operand); }),
            "$.nodes[4]: node 'fused_rmsnorm_linear': fused(f32[4, 32], f32[32], f32[32, 24]): "
            "operand 1 is f32[32], but the body takes f32[32, 1]");
}

TEST(FusedKernel, DotDrawsTheBodyAsACluster) {
  const std::string dot = to_dot(testing::rmsnorm_linear_ugraph(DType::f32));
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_n4_block {"));
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_n4_loop {"));
  EXPECT_THAT(dot, HasSubstr(R"(label="fused_rmsnorm_linear\nfused\nf32[4, 24]\ngrid [3, 1, 1])"));
  // Operands flow into the iterators that load them; the result leaves from the saver.
  EXPECT_THAT(dot, HasSubstr("n0 -> n4_b0;"));
  EXPECT_THAT(dot, HasSubstr("n3 -> n4_b1;"));
  EXPECT_THAT(dot, HasSubstr("n2 -> n4_b2;"));
  EXPECT_THAT(dot, HasSubstr("n4_b10 -> out0;"));
  EXPECT_THAT(dot, Not(HasSubstr("n4 [")));
}

}  // namespace
}  // namespace yirage::ir
