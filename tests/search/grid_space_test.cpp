// The block-level space's grid extents and loop ranges (dims.cpp), and what it holds of the
// hand-built H200 µGraphs of tests/cuda/suite_mugraphs.h: rmsnorm_linear at the suite's real
// shape (bs 1, f16) under the H200's description, built as yirage_cuda_bench --compile-only
// builds it (132 multiprocessors, 232448 bytes of shared memory a block). CPU only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda.h"
#include "cuda/h200_description.h"
#include "cuda/suite_mugraphs.h"
#include "search/internal.h"
#include "search/search.h"
#include "suite/suite.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::search {
namespace {

using ir::kReplicate;
using test_util::error_of;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using yirage::testing::h200_description;

// The hand-built tiling `name` of rmsnorm_linear bs1.
ir::KernelGraph hand_built(const std::string& name) {
  for (cuda_suite::Variant& v : cuda_suite::rmsnorm_linear(1))
    if (v.name == name) return std::move(v.graph);
  fail("no hand-built rmsnorm_linear variant '{}'", name);
}

const ir::BlockGraph& fused_body(const ir::KernelGraph& g) {
  for (const ir::Node& node : g.nodes())
    if (const auto* f = std::get_if<ir::FusedOp>(&node.op)) return *f->body;
  fail("no fused node");
}

// The block ops of a body by name, sorted: what it computes, whatever the order they were added.
std::vector<std::string> op_names(const ir::BlockGraph& body) {
  std::vector<std::string> names;
  for (const ir::BlockNode& node : body.nodes()) {
    std::string name = ir::block_op_label(node.op);
    if (const auto* u = std::get_if<ir::UnaryOp>(&node.op))
      name += fmt::format(" {}", ir::unary_name(u->fn));
    if (const auto* b = std::get_if<ir::BinaryOp>(&node.op))
      name += fmt::format(" {}", ir::binary_name(b->fn));
    if (const auto* r = std::get_if<ir::ReduceOp>(&node.op))
      name += fmt::format(" {}", ir::reduce_name(r->fn));
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t op_nodes_mask(const ir::KernelGraph& g) {
  uint64_t mask = 0;
  for (size_t id = 0; id < g.nodes().size(); ++id)
    if (!std::holds_alternative<ir::InputOp>(g.nodes()[id].op)) mask |= uint64_t(1) << id;
  return mask;
}

TEST(GridExtents, PowersOfTwoStayAndAnOddFactorSplitsIntoAlignedTiles) {
  // 6144 = 2^11 · 3: the powers of two, and the extents with power-of-two tiles of 16 or more.
  const std::vector<int64_t> e = split_extents(6144, 132 * 64, 132);
  for (int64_t d : {1, 2, 4, 64, 128, 2048}) EXPECT_THAT(e, Contains(d));
  for (int64_t d : {3, 6, 48, 96, 192, 384}) EXPECT_THAT(e, Contains(d));
  for (int64_t d : e) EXPECT_EQ(6144 % d, 0) << d;
  // No tile narrower than the granule unless its extent is a power of two (as before).
  for (int64_t d : e) EXPECT_TRUE((d & (d - 1)) == 0 || 6144 / d % 16 == 0) << d;
  // A power-of-two extent gives the powers of two only, as before.
  EXPECT_THAT(split_extents(64, 1 << 20, 132), ElementsAre(1, 2, 4, 8, 16, 32, 64));
}

TEST(GridExtents, TheLimitHolds) {
  for (int64_t d : split_extents(6144, 100, 132)) EXPECT_LE(d, 100);
  EXPECT_THAT(split_extents(6144, 100, 132), Contains(96));
}

TEST(GridExtents, TheWaveFitFillsTheDevicesUnits) {
  // 1680 = 2^4 · 105 on 35 units: only the wave fit gives 35 blocks (tiles of 48), a full wave.
  EXPECT_THAT(split_extents(1680, 1 << 20, 35), Contains(35));
  EXPECT_THAT(split_extents(1680, 1 << 20, 0), ::testing::Not(Contains(35)));
}

TEST(GridExtents, OddAndPrimeExtentsStayFew) {
  // A prime: the whole dim or one element a block; the loop gets the same two.
  EXPECT_THAT(split_extents(4001, 1 << 20, 132), ElementsAre(1, 4001));
  EXPECT_THAT(split_extents(4001, 4001, 0), ElementsAre(1, 4001));
  // Many divisors (3·5·7·11·13), few options: 1, the dim, the wave fit.
  EXPECT_LE(split_extents(15015, 1 << 20, 132).size(), 3u);
  // K = 4000 = 2^5 · 125: loop tiles of 16 and 32 elements besides the powers of two.
  EXPECT_THAT(split_extents(4000, 4000, 0), ElementsAre(1, 2, 4, 8, 16, 32, 125, 250));
  // Bounded by about 2·log2(extent) + 1 whatever the factors.
  for (int64_t e : {6144, 14336, 32000, 4000, 1680, 65536, 1 << 20})
    EXPECT_LE(double(split_extents(e, int64_t(1) << 40, 132).size()), 2 * std::log2(double(e)) + 2)
        << e;
}

TEST(GridExtents, AnOddShapedGraphSearchesAndProves) {
  // Prime and odd dims everywhere: the space stays small and the search still fuses.
  ir::KernelGraph g;
  auto x = g.input("X", {3, 97}, ir::DType::f32);
  auto gain = g.input("G", {97}, ir::DType::f32);
  auto w = g.input("W", {97, 51}, ir::DType::f32);
  auto normed =
      g.add_node(ir::RmsNormOp{.normalized_shape = {97}, .has_weight = true}, {x, gain}, "normed");
  g.mark_output(g.add_node(ir::MatmulOp{}, {normed.at(0), w}, "out").at(0), "out");
  SearchOptions o;
  o.budget_seconds = 120;
  o.threads = 2;
  const SearchResult r = superoptimize(g, h200_description(), o);
  EXPECT_FALSE(r.stats.budget_exhausted);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.front().kernels, 1);
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
}

// n64_k4096, the fastest hand-built rmsnorm_linear bs1 on the H200 (15.8 µs, bench/results/
// h200_suite.md), is a grid of 96 blocks (6144 columns in tiles of 64) and a for-loop of one
// iteration over the whole of K. Every block reads W's [4096, 64] f16 tile, 512 KiB, which its
// one-row product streams (capabilities.search.streamed_weights) instead of holding; its other
// in-loop tiles, each over the whole of K, take 90632 bytes, which the H200's limits admit now
// that they count what the lowering keeps in shared memory (one buffer for a loop of one
// iteration; X ⊙ G computed where the product reads it). The space holds its schedule (below): a
// loop of one iteration is a choice of its own, apart from the no-loop one, since only a product
// in a loop streams its weight.
TEST(HandBuiltWinner, RmsnormLinearN64K4096StreamsItsWeightAndFitsTheLimits) {
  const ir::KernelGraph winner = hand_built("n64_k4096");
  const ir::BlockGraph& body = fused_body(winner);
  EXPECT_EQ(body.grid(), (ir::GridDims{{96, 1, 1}}));
  EXPECT_EQ(body.forloop_range(), 1);
  const SearchSpace space = search_space(h200_description());
  EXPECT_EQ(body.in_loop_bytes() - body.in_loop_bytes(space.streamed), 4096 * 64 * 2);
  EXPECT_EQ(body.in_loop_bytes(space.streamed), 90632);
  EXPECT_EQ(error_of([&] { body.validate(space.limits()); }), "(no error)");
  // Without the streams, W's tile alone is over the block's shared memory.
  SearchSpace held = space;
  held.streamed = {};
  EXPECT_THAT(error_of([&] { body.validate(held.limits()); }),
              HasSubstr("more than the limit of 232448"));
}

// What the space does hold of it: the same grid (96 blocks along W's columns, X and G replicated
// and walked along K, W split on its columns and walked along K, the output saved by columns) at
// every loop from 1 iteration (n64_k4096, W streamed) up; without streamed weights, from 8, the
// shortest whose tiles a block holds. At 8 iterations it is hand-built n64_k512 (17.4 µs on the
// H200).
// Enumerating that configuration gives, among its candidates, a one-kernel µGraph proved equal to
// the suite's graph and to n64_k512, with the same grid, loop, iterators, saver and block ops
// (the cheapest candidate differs only in squaring X as mul(X, X)). It is not equal by
// structural hash, for two reasons of presentation, not of the computation: the search hands
// the fused kernel G as the graph's [4096] operand where n64_k512 reshapes it to a [1, 4096] row
// at the kernel level (a reshape node, and G's tiles [512] against [1, 512]); and the search's
// mean names its dim from the right (-1) where n64_k512 names it from the left (1).
TEST(HandBuiltWinner, TheSpaceHoldsRmsnormLinearsN64GridAtTheShortestLoopThatFits) {
  const ir::KernelGraph graph = suite::build_workload("rmsnorm_linear", 1, ir::DType::f16);
  const SearchSpace space = search_space(h200_description());
  std::string why;
  const std::optional<Group> group = make_group(graph, op_nodes_mask(graph), false, why);
  ASSERT_TRUE(group) << why;
  const std::vector<BlockConfig> all =
      block_configs(group->target, space, std::numeric_limits<size_t>::max());
  const ir::AxisMap replicated{kReplicate, kReplicate, kReplicate},
      on_x1{1, kReplicate, kReplicate};
  auto n64_ranges = [&](const std::vector<BlockConfig>& configs) {
    std::vector<int64_t> ranges;
    for (const BlockConfig& c : configs) {
      if (c.grid != ir::GridDims{{96, 1, 1}} || c.iterators.size() != 3) continue;
      const bool maps = c.iterators[0].imap == replicated && c.iterators[0].fmap == 1 &&
                        c.iterators[1].imap == replicated && c.iterators[1].fmap == 0 &&
                        c.iterators[2].imap == on_x1 && c.iterators[2].fmap == 0 &&
                        c.omaps == std::vector<ir::AxisMap>{on_x1};
      if (maps) ranges.push_back(c.range);
    }
    std::sort(ranges.begin(), ranges.end());
    return ranges;
  };
  EXPECT_THAT(n64_ranges(all),
              ElementsAre(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096));
  SearchSpace held = space;
  held.streamed = {};
  EXPECT_THAT(n64_ranges(block_configs(group->target, held, std::numeric_limits<size_t>::max())),
              ElementsAre(8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096));
  const auto n64 = std::find_if(all.begin(), all.end(), [&](const BlockConfig& c) {
    return c.grid == ir::GridDims{{96, 1, 1}} && c.range == 8 && c.iterators.size() == 3 &&
           c.iterators[2].imap == on_x1;
  });
  ASSERT_NE(n64, all.end());

  Budget budget;
  budget.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  const std::vector<BlockCandidate> found = search_block_graphs(*group, *n64, space, budget);
  const ir::KernelGraph k512 = hand_built("n64_k512");
  const ir::BlockGraph& want = fused_body(k512);
  // The cheapest of them squares X as mul(X, X); the one with n64_k512's ops is among them too.
  const auto same_ops = std::find_if(found.begin(), found.end(), [&](const BlockCandidate& c) {
    return op_names(*c.body) == op_names(want);
  });
  ASSERT_NE(same_ops, found.end()) << found.size() << " candidates, none with n64_k512's ops";
  const ir::BlockGraph& got = *same_ops->body;
  EXPECT_EQ(got.grid(), want.grid());
  EXPECT_EQ(got.forloop_range(), want.forloop_range());

  const ir::KernelGraph mugraph = build_mugraph(graph, {&*group}, {same_ops->body});
  EXPECT_EQ(count_kernels(mugraph), 1);
  verify::FingerprintOptions fp;
  fp.seed = 7;
  const verify::EquivalenceResult proof = verify::check_equivalent(graph, mugraph, fp);
  EXPECT_TRUE(proof.equivalent && proof.bound_met) << proof.summary();
  const verify::EquivalenceResult same = verify::check_equivalent(k512, mugraph, fp);
  EXPECT_TRUE(same.equivalent && same.bound_met) << same.summary();
  EXPECT_NE(ir::structural_hash(mugraph), ir::structural_hash(k512))
      << "now equal by structural hash: say so above";
}

// The whole search of `workload` at bs 1 in f16, its real shape, under the H200 description.
SearchResult search_on_the_h200(const std::string& workload, double budget_seconds) {
  SearchOptions o;
  o.budget_seconds = budget_seconds;
  o.threads = 2;
  o.fingerprint.seed = 7;
  return superoptimize(suite::build_workload(workload, 1, ir::DType::f16), h200_description(), o);
}

// The whole search at the real shape under the H200 description: one fused kernel, proved. Its
// grid is what the load model ranks best (dims.cpp), not necessarily n64's: at 8 iterations 96
// blocks leave 36 of the 132 multiprocessors idle, and the H200 agrees that a full wave is
// faster there (n48_k512, 128 blocks: 16.7 µs against n64_k512's 17.4).
TEST(HandBuiltWinner, TheSearchFusesRmsnormLinearIntoOneKernelOnTheH200) {
  const SearchResult r = search_on_the_h200("rmsnorm_linear", 300);
  EXPECT_FALSE(r.stats.budget_exhausted);
  const auto fused = std::find_if(r.ranked.begin(), r.ranked.end(),
                                  [](const Candidate& c) { return c.kernels == 1; });
  ASSERT_NE(fused, r.ranked.end());
  EXPECT_TRUE(fused->proof.equivalent && fused->proof.bound_met);
  EXPECT_TRUE(fused->float_check.passed) << fused->float_check.summary;
  const ir::BlockGraph& body = fused_body(fused->mugraph);
  ::testing::Test::RecordProperty(
      "chosen",
      fmt::format("grid [{}] range {}", fmt::join(body.grid().extent, ", "), body.forloop_range()));
}

// What the streamed weights change in what the search proposes, not only in what its space
// holds: gated_mlp at bs1 under the H200 description ranks first one kernel whose gate and up
// products both stream their weights (grid 128, 4 iterations of 1024: hand-built n32_k1024, 23.8
// µs on the H200), whose two [1024, 32] f16 weight tiles, 128 KiB, a block could not hold.
TEST(StreamedWeights, TheSearchRanksFirstAGatedMlpThatStreamsBothWeights) {
  const SearchResult r = search_on_the_h200("gated_mlp", 120);
  ASSERT_FALSE(r.ranked.empty());
  const Candidate& best = r.ranked.front();
  ASSERT_EQ(best.kernels, 1);
  EXPECT_TRUE(best.proof.equivalent && best.proof.bound_met);
  EXPECT_TRUE(best.float_check.passed) << best.float_check.summary;
  const ir::BlockGraph& body = fused_body(best.mugraph);
  const SearchSpace space = search_space(h200_description());
  int streamed = 0;
  for (int32_t id = 0; id < int32_t(body.nodes().size()); ++id)
    streamed += body.streams(id, space.streamed) ? 1 : 0;
  EXPECT_EQ(streamed, 2);
  EXPECT_EQ(body.grid(), (ir::GridDims{{128, 1, 1}}));
  EXPECT_EQ(body.forloop_range(), 4);
}

}  // namespace
}  // namespace yirage::search
