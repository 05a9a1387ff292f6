// Grid axes over a reduced dim (src/search/split_reduced.cpp): a found block graph with a loop
// over a summed-over dim, as a kernel of partials and a finishing kernel. Each split is proved
// against the group's kernel graph, run by the reference executor and the cpu backend on fresh
// random inputs, and a wrong finish is rejected.
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "block_test_graphs.h"
#include "cuda/h200_description.h"
#include "ir/block_graph.h"
#include "search/internal.h"
#include "search/search.h"
#include "search/search_targets.h"
#include "verify/numerics.h"
#include "verify/verify.h"

namespace yirage::search {
namespace {

using ir::AccumFn;
using ir::BlockGraph;
using ir::kReplicate;

constexpr ir::AxisMap kAllAxes{kReplicate, kReplicate, kReplicate};
constexpr ir::AxisMap kColumns{1, kReplicate, kReplicate};

// rms_norm(X, G) · W as one block graph: blocks over W's columns, the loop walks K (the norm
// folded through the product, as the search finds it).
BlockGraph rmsnorm_linear_body(const ir::KernelGraph& target, int64_t n, int64_t kc) {
  const ir::TensorType x = target.type(target.inputs()[0]), w = target.type(target.inputs()[2]);
  const ir::TensorType g = target.type(target.inputs()[1]);
  BlockGraph b({{w.dims[1] / n, 1, 1}}, x.dims[1] / kc, {x, g, w});
  const int32_t xi = b.iterator(0, kAllAxes, 1);
  const int32_t gi = b.iterator(1, kAllAxes, 1);
  const int32_t wi = b.iterator(2, kColumns, 0);
  const int32_t xg = b.add(ir::BinaryOp{ir::BinaryFn::mul}, {xi, gi});
  const int32_t sum = b.accumulate(AccumFn::sum, b.add(ir::MatmulOp{}, {xg, wi}));
  const int32_t sq = b.add(ir::UnaryOp{ir::UnaryFn::square}, {xi});
  const int32_t rms =
      b.accumulate(AccumFn::rms, b.add(ir::ReduceOp{ir::ReduceFn::mean, 1}, {sq}), 1e-6);
  b.save(b.add(ir::BinaryOp{ir::BinaryFn::div}, {sum, rms}), kColumns);
  return b;
}

// The rmsnorm_linear target with G presented as a [1, K] row, as the body reads it.
ir::KernelGraph rmsnorm_linear_rows(int64_t m, int64_t k, int64_t n) {
  ir::KernelGraph g;
  auto x = g.input("X", {m, k}, ir::DType::f32);
  auto gain = g.input("G", {1, k}, ir::DType::f32);
  auto w = g.input("W", {k, n}, ir::DType::f32);
  auto normed = g.add_node(ir::RmsNormOp{.normalized_shape = {k}, .has_weight = true},
                           {x, g.reshape(gain, {k})}, "normed")
                    .at(0);
  g.mark_output(g.add_node(ir::MatmulOp{}, {normed, w}, "out").at(0), "out");
  return g;
}

// The types of `g`'s inputs, in order.
std::vector<ir::TensorType> operand_types(const ir::KernelGraph& g) {
  std::vector<ir::TensorType> types;
  for (const ir::TensorRef& in : g.inputs()) types.push_back(g.type(in));
  return types;
}

// Proves the split, and runs it on the reference executor and the cpu backend against the target.
void expect_split_holds(const ir::KernelGraph& target, const SplitBodies& split, uint64_t seed) {
  const ir::KernelGraph two = split_kernel_graph(target, split);
  const verify::EquivalenceResult proof = verify::check_equivalent(target, two);
  EXPECT_TRUE(proof.equivalent && proof.bound_met) << proof.summary();
  const int64_t length = verify::reduction_length(target);
  for (verify::InputDistribution d : verify::kAllDistributions) {
    const std::vector<ir::HostTensor> inputs = verify::make_inputs(target, d, seed);
    const std::vector<ir::HostTensor> want = verify::run_reference(target, inputs);
    const verify::Comparison ref =
        verify::compare(verify::run_reference(two, inputs), want, length, d);
    EXPECT_TRUE(ref.passed) << "reference, " << verify::distribution_name(d) << ": "
                            << ref.summary();
    const verify::Comparison cpu =
        verify::compare(backend::run_on(backend::get_backend("cpu"), two, inputs), want, length, d);
    EXPECT_TRUE(cpu.passed) << "cpu, " << verify::distribution_name(d) << ": " << cpu.summary();
  }
}

TEST(SplitReduced, RmsNormLinearSplitOverKIsProvedAndRuns) {
  const ir::KernelGraph target = rmsnorm_linear_rows(4, 256, 64);
  const BlockGraph body = rmsnorm_linear_body(target, 16, 16);
  for (int64_t s : {2, 16}) {
    std::string why;
    std::optional<SplitBodies> split = split_over_loop(body, s, why);
    ASSERT_TRUE(split) << why;
    EXPECT_EQ(split->parts->grid().blocks(), 4 * s);
    EXPECT_EQ(split->parts->forloop_range(), 16 / s);
    EXPECT_EQ(split->finish->forloop_range(), s);
    // The partials stack on the rows: [4 s, 64] products and [4 s, 4] means of X², one copy per
    // column strip.
    EXPECT_EQ(split->parts->output_types().at(0).dims, (ir::Dims{4 * s, 64}));
    EXPECT_EQ(split->parts->output_types().at(1).dims, (ir::Dims{4 * s, 4}));
    expect_split_holds(target, *split, 7 + uint64_t(s));
  }
}

// A finish finer than the partials' grid: the products are cut finer, and the means of X², one
// per column strip of the partials, are read whole and averaged over the strips' copies.
TEST(SplitReduced, AFinerFinishIsProvedAndRuns) {
  const ir::KernelGraph target = rmsnorm_linear_rows(4, 256, 64);
  const BlockGraph body = rmsnorm_linear_body(target, 16, 16);
  for (int64_t refine : {2, 4}) {
    std::string why;
    std::optional<SplitBodies> split = split_over_loop(body, 4, why, refine);
    ASSERT_TRUE(split) << why;
    EXPECT_EQ(split->finish->grid().blocks(), 4 * refine);
    expect_split_holds(target, *split, 23 + uint64_t(refine));
  }
  // Four 16-column strips cut 32 times finer would be half a column a block.
  std::string why;
  EXPECT_FALSE(split_over_loop(body, 4, why, 32));
  EXPECT_NE(why.find("finer"), std::string::npos) << why;
}

TEST(SplitReduced, AWrongFinishIsRejected) {
  const ir::KernelGraph target = rmsnorm_linear_rows(4, 128, 32);
  std::string why;
  std::optional<SplitBodies> split = split_over_loop(rmsnorm_linear_body(target, 16, 16), 4, why);
  ASSERT_TRUE(split) << why;
  // The finish's sum of the partial products made a mean: off by the split count.
  nlohmann::json doc = ir::to_json(*split->finish);
  bool mutated = false;
  for (nlohmann::json& node : doc["nodes"])
    if (!mutated && node["op"] == "accum" && node["fn"] == "sum") {
      node["fn"] = "mean";
      mutated = true;
    }
  ASSERT_TRUE(mutated) << doc.dump();
  split->finish = std::make_shared<const BlockGraph>(ir::block_graph_from_json(doc));
  const verify::EquivalenceResult proof =
      verify::check_equivalent(target, split_kernel_graph(target, *split));
  EXPECT_FALSE(proof.equivalent) << proof.summary();
}

// Key-split attention: the online softmax's rescaled sums over each split's keys, with the
// split's running max saved beside them, rescaled to the global max by the finish.
TEST(SplitReduced, AnOnlineSoftmaxSplitsOverTheKeys) {
  const ir::KernelGraph g =
      ir::testing::softmax_attention_graph(ir::DType::f32, {2, 16, 8}, {2, 8, 32}, {2, 32, 8});
  const std::vector<ir::TensorType> types = operand_types(g);
  const BlockGraph b =
      ir::testing::online_softmax_attention_block(types[0], types[1], types[2], 1, 4);
  for (int64_t splits : {2, 4}) {
    std::string why;
    std::optional<SplitBodies> split = split_over_loop(b, splits, why);
    ASSERT_TRUE(split) << why;
    // Partials, stacked on the query rows (the first dim no grid axis takes): the running
    // maxes [2, 16 s, 1], the weighted sums [2, 16 s, 8] and the row sums [2, 16 s, 1].
    ASSERT_EQ(split->parts->output_types().size(), 3u);
    EXPECT_EQ(split->parts->output_types()[0].dims, (ir::Dims{2, 16 * splits, 1}));
    EXPECT_EQ(split->parts->output_types()[1].dims, (ir::Dims{2, 16 * splits, 8}));
    expect_split_holds(g, *split, 31 + uint64_t(splits));
  }
  // A split whose running max is wrong (the mean of the chunk maxes) rescales each split's sums by
  // a different wrong factor: the proof and the float check reject it. Two splits, so that each
  // split's loop has two chunks and their mean is not their max.
  std::string why;
  std::optional<SplitBodies> split = split_over_loop(b, 2, why);
  ASSERT_TRUE(split) << why;
  nlohmann::json doc = ir::to_json(*split->parts);
  bool mutated = false;
  for (nlohmann::json& node : doc["nodes"])
    if (!mutated && node["op"] == "accum" && node["fn"] == "max") {
      node["fn"] = "mean";
      mutated = true;
    }
  ASSERT_TRUE(mutated) << doc.dump();
  split->parts = std::make_shared<const BlockGraph>(ir::block_graph_from_json(doc));
  const std::vector<ir::HostTensor> inputs =
      verify::make_inputs(g, verify::InputDistribution::uniform, 41);
  const verify::Comparison wrong =
      verify::compare(verify::run_reference(split_kernel_graph(g, *split), inputs),
                      verify::run_reference(g, inputs), verify::reduction_length(g));
  EXPECT_FALSE(wrong.passed) << wrong.summary();
  const verify::EquivalenceResult proof =
      verify::check_equivalent(g, split_kernel_graph(g, *split));
  EXPECT_FALSE(proof.equivalent) << proof.summary();
}

// Key-split attention whose finish reads each row's stacked partials at once, as [splits, d] views
// (flash-decoding's combine), in one iteration on a grid over heads and query rows of its own:
// proved, and run on both executors on every input distribution (the large ones overflow an
// unsafe combine).
TEST(SplitReduced, AOneViewFinishCombinesTheKeySplitsAtOnce) {
  const ir::KernelGraph g =
      ir::testing::softmax_attention_graph(ir::DType::f32, {2, 16, 8}, {2, 8, 64}, {2, 64, 8});
  const std::vector<ir::TensorType> types = operand_types(g);
  // Blocks over heads and 8 query rows; the loop walks the keys 8 at a time.
  const BlockGraph b =
      ir::testing::online_softmax_attention_block(types[0], types[1], types[2], 2, 8);
  for (auto [splits, axis, refine] :
       {std::tuple{2, -1, 1}, std::tuple{4, 1, 2}, std::tuple{8, 1, 8}}) {
    std::string why;
    std::optional<SplitBodies> split = split_one_view(b, splits, why, axis, refine);
    ASSERT_TRUE(split) << why;
    // The partials stack on the last dim (heads and rows carry grid axes): the finish reads the
    // weighted sums [2, 16, 8 s] as [2, 16, s, 8], in one iteration.
    EXPECT_EQ(split->finish->operands()[1].dims, (ir::Dims{2, 16, splits, 8}));
    EXPECT_EQ(split->finish->forloop_range(), 1);
    EXPECT_EQ(split->finish->grid().extent[1], 2 * refine);
    expect_split_holds(g, *split, 51 + uint64_t(splits));
  }
  // Rows split finer than a query row are not a grid.
  std::string why;
  EXPECT_FALSE(split_one_view(b, 2, why, 1, 16));
  EXPECT_FALSE(why.empty());
}

// What the block search finds for a group with a loop gets split forms, each proved against the
// group's kernel graph and run: the split is derived from the search's own bodies.
TEST(SplitReduced, TheSearchesBodiesGetProvedSplitForms) {
  for (const char* name : {"rmsnorm_linear", "gated_mlp", "gqa"}) {
    // gqa's exp-normalize read as a softmax, as superoptimize reads it: its body is an online
    // softmax, split over the keys.
    const ir::KernelGraph graph = with_softmax_ops(testing::small_target(name));
    uint64_t all = 0;
    for (size_t id = 0; id < graph.nodes().size(); ++id)
      if (!std::holds_alternative<ir::InputOp>(graph.nodes()[id].op)) all |= uint64_t(1) << id;
    std::string why;
    std::optional<Group> group = make_group(graph, all, true, why);
    ASSERT_TRUE(group) << why;
    const SearchSpace space = search_space(testing::cuda_like_device());
    Budget budget;
    budget.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    size_t proved = 0;
    // Every configuration, not only the load model's best: those keep the rows on a grid axis
    // at these small shapes, and a rank-2 partial of a two-axis grid has no dim left to stack on.
    for (const BlockConfig& config :
         block_configs(group->target, space, std::numeric_limits<size_t>::max())) {
      if (config.range < 2 || proved == 3) continue;
      for (const BlockCandidate& c : search_block_graphs(*group, config, space, budget)) {
        for (const BlockCandidate& sc : split_candidates(c, space)) {
          ASSERT_TRUE(sc.finish);
          EXPECT_GT(sc.cost, 0);
          expect_split_holds(group->target, {sc.body, sc.finish, sc.splits}, 11 + proved);
          if (++proved == 3) break;
        }
        if (proved == 3) break;
      }
    }
    EXPECT_GT(proved, 0u) << name;
  }
}

}  // namespace
}  // namespace yirage::search
