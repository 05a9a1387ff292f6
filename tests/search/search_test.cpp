// The search driver's contract: determinism, budgets, checkpoints, clear messages, counting.
#include <atomic>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "search/search.h"
#include "search_targets.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::search {
namespace {

SearchOptions quick_options(int threads = 2) {
  SearchOptions o;
  o.budget_seconds = 120;
  o.threads = threads;
  o.seed = 3;
  return o;
}

std::string best_json(const SearchResult& r) {
  return ir::to_json(r.ranked.front().mugraph).dump();
}

TEST(Search, SameSeedSameResultWhateverTheThreads) {
  const ir::KernelGraph graph = testing::small_target("gqa");
  const SearchResult a = superoptimize(graph, testing::cpu_like_device(), quick_options(1));
  const SearchResult b = superoptimize(graph, testing::cpu_like_device(), quick_options(2));
  ASSERT_FALSE(a.stats.budget_exhausted);
  EXPECT_EQ(best_json(a), best_json(b));
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i)
    EXPECT_EQ(ir::to_json(a.ranked[i].mugraph).dump(), ir::to_json(b.ranked[i].mugraph).dump());
  EXPECT_EQ(a.stats.candidates, b.stats.candidates);
}

TEST(Search, StateBudgetStopsTheSearchAndKeepsAValidAnswer) {
  const ir::KernelGraph graph = testing::small_target("rmsnorm_linear");
  SearchOptions o = quick_options();
  o.max_states = 40;
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_TRUE(r.stats.budget_exhausted);
  EXPECT_LE(r.stats.states, 40u + 2u);  // each thread may finish the state it was adding
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
  EXPECT_TRUE(r.float_check.passed);
  bool said = false;
  for (const std::string& n : r.notes) said |= n.find("budget exhausted") != std::string::npos;
  EXPECT_TRUE(said);
}

// The enumeration counts what it holds; a bound it reaches stops it as a budget would, with the
// answer valid and the reason in the notes.
TEST(Search, MemoryBoundStopsTheSearchAndKeepsAValidAnswer) {
  const ir::KernelGraph graph = testing::small_target("rmsnorm_linear");
  const SearchResult full = superoptimize(graph, testing::cpu_like_device(), quick_options());
  EXPECT_FALSE(full.stats.memory_bound_hit);
  ASSERT_GT(full.stats.memory_held_bytes, 4096u);
  SearchOptions o = quick_options();
  o.max_memory_bytes = full.stats.memory_held_bytes / 4;
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_TRUE(r.stats.memory_bound_hit);
  EXPECT_FALSE(r.stats.budget_exhausted);
  EXPECT_LT(r.stats.states, full.stats.states);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
  EXPECT_TRUE(r.float_check.passed);
  bool said = false;
  for (const std::string& n : r.notes) said |= n.find("memory bound reached") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Search, ZeroSecondsReturnsTheInputGraph) {
  const ir::KernelGraph graph = testing::small_target("gated_mlp");
  SearchOptions o = quick_options();
  o.budget_seconds = 0;
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_TRUE(r.stats.budget_exhausted);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.back().kernels, count_kernels(graph));
}

TEST(Search, UnsupportedOpEndsWithAClearMessage) {
  ir::KernelGraph g;
  auto x = g.input("x", {8, 16}, ir::DType::f32);
  auto w = g.input("w", {8, 16}, ir::DType::f32);
  auto xt = g.transpose(x, 0, 1);
  g.mark_output(g.matmul(xt, w), "out");
  const SearchResult r = superoptimize(g, testing::cpu_like_device(), quick_options());
  // The permute stays a kernel of its own in every candidate: the input graph, and the matmul
  // as a generated kernel (lone_op_searched).
  ASSERT_FALSE(r.ranked.empty());
  for (const Candidate& c : r.ranked) EXPECT_EQ(c.kernels, 2);
  bool named = false;
  for (const std::string& n : r.notes) named |= n.find("permute") != std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_TRUE(r.float_check.passed);
}

TEST(Search, NothingToFuseSaysSo) {
  ir::KernelGraph g;
  auto x = g.input("x", {4, 4}, ir::DType::f32);
  g.mark_output(g.exp(x), "out");
  const SearchResult r = superoptimize(g, testing::cpu_like_device(), quick_options());
  ASSERT_EQ(r.ranked.size(), 1u);
  bool said = false;
  for (const std::string& n : r.notes) said |= n.find("nothing to fuse") != std::string::npos;
  EXPECT_TRUE(said);
}

// A library matmul is a call of the backend's BLAS: the search keeps it a kernel of its own and
// says so, and fuses what follows it only among itself.
TEST(Search, ALibraryMatmulIsNeverFused) {
  ir::KernelGraph g;
  auto x = g.input("x", {8, 16}, ir::DType::f32);
  auto w = g.input("w", {16, 32}, ir::DType::f32);
  auto y = g.add_node(ir::MatmulOp{.library = true}, {x, w}, "blas")[0];
  g.mark_output(g.relu(y), "out");
  const SearchResult r = superoptimize(g, testing::cpu_like_device(), quick_options());
  for (const Candidate& c : r.ranked) {
    EXPECT_EQ(c.kernels, 2);
    bool kept = false;
    for (const ir::Node& n : c.mugraph.nodes()) kept |= ir::is_library_matmul(n.op);
    EXPECT_TRUE(kept) << ir::to_json(c.mugraph).dump();
  }
  bool said = false;
  for (const std::string& n : r.notes)
    said |= n.find("library matmul ('blas') cannot run inside a fused kernel") != std::string::npos;
  EXPECT_TRUE(said) << ::testing::PrintToString(r.notes);
}

// Tiles divide dims exactly, so a prime reduction dim on a device that allows one block of small
// tiles leaves no configuration: the search says which ops stay apart and why.
TEST(Search, GroupWithoutAnyBlockConfigurationSaysWhy) {
  ir::KernelGraph g;
  auto x = g.input("x", {3, 1021}, ir::DType::f32);
  auto w = g.input("w", {1021, 509}, ir::DType::f32);
  g.mark_output(g.relu(g.matmul(x, w)), "out");
  backend::DeviceDescription tiny = testing::cpu_like_device();
  tiny.capabilities["search"]["max_grid_blocks"] = 1;
  tiny.capabilities["search"]["max_tile_bytes_in_loop"] = 1024;
  tiny.capabilities["search"]["max_tile_bytes_total"] = 4096;
  const SearchResult r = superoptimize(g, tiny, quick_options());
  ASSERT_EQ(r.ranked.size(), 1u);
  EXPECT_EQ(r.ranked.front().kernels, 2);
  bool said = false;
  for (const std::string& n : r.notes)
    said |= n.find("no grid and for-loop") != std::string::npos &&
            n.find("x f32[3, 1021]") != std::string::npos;
  EXPECT_TRUE(said) << ::testing::PrintToString(r.notes);
}

// A rank-1 operand enters a fused group through a reshape; its name once collided with the
// builder's default "t<n>" names of the graph's own nodes.
TEST(Search, RankOneOperandOfAFusedGroupKeepsNamesApart) {
  ir::KernelGraph g;
  auto x = g.input("x", {2, 3}, ir::DType::f32);
  auto y = g.input("y", {3}, ir::DType::f32);
  g.mark_output(g.mul(g.exp(x), y));
  const SearchResult r = superoptimize(g, testing::cpu_like_device(), quick_options());
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.front().kernels, 1);  // fused, so the reshape was made
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
  EXPECT_TRUE(r.float_check.passed) << r.float_check.summary;
}

TEST(Search, DescriptionWithoutSearchSpaceIsAnError) {
  backend::DeviceDescription d;
  d.name = "bare";
  d.capabilities = {{"cores", 2}};
  try {
    superoptimize(testing::small_target("gated_mlp"), d, quick_options());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capabilities.search"), std::string::npos) << e.what();
  }
  d.capabilities = testing::cpu_like_device().capabilities;
  d.capabilities["search"]["max_grid_blocks"] = 0;
  EXPECT_THROW(search_space(d), Error);
}

TEST(Search, StreamedWeightsAreReadFromTheDescription) {
  backend::DeviceDescription d = testing::cpu_like_device();
  EXPECT_EQ(search_space(d).streamed.max_rows, 0);  // absent: no weight streams
  d.capabilities["search"]["streamed_weights"] = {{"max_rows", 16},
                                                  {"k_multiple", 128},
                                                  {"column_widths", {32, 64}},
                                                  {"max_staged_bytes", 4096},
                                                  {"max_blocks", 8}};
  const SearchSpace s = search_space(d);
  EXPECT_EQ(s.streamed.max_rows, 16);
  EXPECT_EQ(s.streamed.column_widths, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(s.limits().streamed.max_staged_bytes, 4096);
  d.capabilities["search"]["streamed_weights"]["max_rows"] = -1;
  EXPECT_THAT(test_util::error_of([&] { search_space(d); }),
              ::testing::EndsWith(
                  "capabilities.search.streamed_weights.max_rows must be a positive integer"));
  d.capabilities["search"]["streamed_weights"]["max_rows"] = 16;
  d.capabilities["search"]["streamed_weights"]["column_widths"] = {32, "wide"};
  EXPECT_THAT(test_util::error_of([&] { search_space(d); }),
              ::testing::EndsWith("streamed_weights.column_widths must be an array of positive "
                                  "integers"));
}

TEST(Search, PipelineStagesAndRegisterTilesAreReadFromTheDescription) {
  backend::DeviceDescription d = testing::cpu_like_device();
  EXPECT_EQ(search_space(d).pipeline_stages, 1);  // absent: tiles loaded where they are used
  EXPECT_FALSE(search_space(d).in_registers.single_use_elementwise);
  d.capabilities["search"].erase("max_tile_bytes_in_loop");  // optional: the total alone
  d.capabilities["search"]["pipeline_stages"] = 3;
  d.capabilities["search"]["in_registers"] = {"summed_into_accumulator"};
  const SearchSpace s = search_space(d);
  EXPECT_EQ(s.max_tile_bytes_in_loop, 0);
  EXPECT_EQ(s.limits().pipeline_stages, 3);
  EXPECT_TRUE(s.limits().in_registers.summed_into_accumulator);
  EXPECT_FALSE(s.limits().in_registers.single_use_elementwise);
  d.capabilities["search"]["in_registers"] = {"summed_into_accumulator", "everything"};
  EXPECT_THAT(test_util::error_of([&] { search_space(d); }),
              ::testing::EndsWith("capabilities.search.in_registers: unknown rule everything "
                                  "(single_use_elementwise, summed_into_accumulator)"));
  d.capabilities["search"]["in_registers"] = {};
  d.capabilities["search"]["pipeline_stages"] = 0;
  EXPECT_THAT(
      test_util::error_of([&] { search_space(d); }),
      ::testing::EndsWith("capabilities.search.pipeline_stages must be a positive integer"));
}

// The backend's own check of each finished body (SearchOptions::reject_body, which the tuner
// fills from Backend::reject_body): a body it rejects is never proposed, and the search says how
// many it dropped and why the first was.
TEST(Search, BodiesTheBackendRejectsAreDropped) {
  const ir::KernelGraph graph = testing::small_target("rmsnorm_linear");
  SearchOptions o = quick_options();
  const SearchResult admitted = superoptimize(graph, testing::cpu_like_device(), o);
  ASSERT_EQ(admitted.ranked.front().kernels, 1);
  EXPECT_EQ(admitted.stats.backend_rejected, 0u);
  std::atomic<int> asked{0};
  o.reject_body = [&](const ir::BlockGraph&) {
    ++asked;
    return std::string("its tiles need more than the test allows");
  };
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_GT(asked.load(), 0);
  EXPECT_EQ(r.stats.backend_rejected, uint64_t(asked.load()));
  for (const Candidate& c : r.ranked)
    for (const ir::Node& node : c.mugraph.nodes())
      EXPECT_FALSE(std::holds_alternative<ir::FusedOp>(node.op));
  EXPECT_THAT(r.notes, ::testing::Contains(::testing::HasSubstr(
                           "the backend rejected " + std::to_string(asked.load()) +
                           " bodies that the description's limits admit (the first: its tiles "
                           "need more than the test allows)")));
}

TEST(Search, HostCpuDescriptionHasASearchSpace) {
  const std::vector<backend::BackendInfo> all = backend::describe_backends();
  bool found = false;
  for (const auto& b : all)
    if (b.name == "cpu") {
      found = true;
      const SearchSpace s = search_space(b.device);
      EXPECT_GT(s.max_tile_bytes_in_loop, 0);
      EXPECT_GE(s.parallel_units, 1);
    }
  EXPECT_TRUE(found);
}

TEST(Search, CheckpointResumesToTheSameResult) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "yirage_search_checkpoint_test.json").string();
  std::filesystem::remove(path);
  const ir::KernelGraph graph = testing::small_target("lora");
  SearchOptions o = quick_options();
  o.checkpoint_path = path;
  const SearchResult first = superoptimize(graph, testing::cpu_like_device(), o);
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(first.stats.resumed);
  const SearchResult second = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_TRUE(second.stats.resumed);
  EXPECT_EQ(best_json(first), best_json(second));
  // A checkpoint of another graph is refused, not silently used.
  EXPECT_THROW(superoptimize(testing::small_target("gqa"), testing::cpu_like_device(), o), Error);
  std::filesystem::remove(path);
}

TEST(Search, CancelHookStopsTheSearchAndKeepsAValidAnswer) {
  const ir::KernelGraph graph = testing::small_target("gqa");
  SearchOptions o = quick_options();
  constexpr int kStopAt = 3;
  int polls = 0;  // the hook is called one thread at a time
  o.should_stop = [&] { return ++polls == kStopAt; };
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_EQ(polls, kStopAt);  // not asked again once it said stop
  EXPECT_TRUE(r.stats.cancelled);
  EXPECT_FALSE(r.stats.budget_exhausted);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
  EXPECT_TRUE(r.ranked.front().proof.bound_met);
  EXPECT_TRUE(r.float_check.passed) << r.float_check.summary;
  bool said = false;
  for (const std::string& n : r.notes)
    said |= n.find("cancelled by the caller") != std::string::npos;
  EXPECT_TRUE(said);
}

// On one thread the polls come in a fixed order, the last of them before a proof; stopping there
// keeps what was proved before it.
TEST(Search, CancelWhileProvingKeepsWhatWasProved) {
  const ir::KernelGraph graph = testing::small_target("gated_mlp");
  SearchOptions o = quick_options(1);
  int polls = 0;
  o.should_stop = [&] {
    ++polls;
    return false;
  };
  const SearchResult full = superoptimize(graph, testing::cpu_like_device(), o);
  ASSERT_FALSE(full.stats.cancelled);
  ASSERT_GE(full.ranked.size(), 3u);  // two fused µGraphs and the input graph
  const int total = polls;
  polls = 0;
  o.should_stop = [&] { return ++polls == total; };
  const SearchResult r = superoptimize(graph, testing::cpu_like_device(), o);
  EXPECT_TRUE(r.stats.cancelled);
  EXPECT_EQ(r.stats.candidates, full.stats.candidates);  // the enumeration had finished
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_LT(r.ranked.size(), full.ranked.size());
  EXPECT_TRUE(r.ranked.front().proof.equivalent);
  EXPECT_TRUE(r.float_check.passed) << r.float_check.summary;
  bool said = false;
  for (const std::string& n : r.notes) said |= n.find("while proving") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Search, CountKernels) {
  EXPECT_EQ(count_kernels(testing::small_target("gqa")), 5);
  // The hand-built µGraph: one fused node; the reshape of the norm weight is free.
  EXPECT_EQ(count_kernels(ir::testing::rmsnorm_linear_ugraph(ir::DType::f32)), 1);
}

TEST(Search, BestOfEachTargetRunsLiterallyAndRoundTripsAsJson) {
  const ir::KernelGraph graph = testing::small_target("rmsnorm_linear");
  const SearchResult r = superoptimize(graph, testing::cuda_like_device(), quick_options());
  const ir::KernelGraph& best = r.ranked.front().mugraph;
  ASSERT_EQ(r.ranked.front().kernels, 1);
  const ir::KernelGraph back = ir::from_json(ir::to_json(best));
  EXPECT_EQ(ir::to_json(back).dump(), ir::to_json(best).dump());
  // The fused kernel computes rms_norm with the suite's eps through an rms accumulator.
  bool rms_with_eps = false;
  for (const ir::Node& n : best.nodes())
    if (const auto* f = std::get_if<ir::FusedOp>(&n.op))
      for (const ir::BlockNode& b : f->body->nodes())
        if (const auto* acc = std::get_if<ir::AccumulatorOp>(&b.op))
          rms_with_eps |= acc->fn == ir::AccumFn::rms && acc->eps == 1e-6;
  EXPECT_TRUE(rms_with_eps) << ir::to_json(best).dump(1);
}

}  // namespace
}  // namespace yirage::search
