// The opencl backend against the reference executor: outputs poisoned before each run (run_on),
// fresh random inputs, relative L2 error within the output dtype's tolerance
// (cuda_test_support.h's expect_matches, shared by the device backends' tests).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "cuda/cuda_test_support.h"
#include "search/search.h"
#include "search/search_targets.h"
#include "suite/suite.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

Backend* opencl_or_skip() {
  for (const BackendInfo& info : describe_backends()) {
    if (info.name != "opencl") continue;
    if (info.availability.available) return &get_backend("opencl");
    const char* require = std::getenv("YIRAGE_REQUIRE_OPENCL");
    if (require && std::string(require) == "1")
      ADD_FAILURE() << "opencl is required here but unavailable: " << info.availability.reason;
    return nullptr;
  }
  ADD_FAILURE() << "no backend named opencl is registered";
  return nullptr;
}

#define OPENCL_OR_SKIP(var)                     \
  Backend* var = opencl_or_skip();              \
  if (!var) GTEST_SKIP() << "no OpenCL device"; \
  static_assert(true)

TEST(OpenclBackend, DescribesItsDevice) {
  OPENCL_OR_SKIP(cl);
  const DeviceDescription d = cl->device();
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(d.fingerprint.size(), 16u);
  for (const char* key : {"platform", "driver_version", "opencl_c_version", "local_memory_bytes",
                          "max_work_group_size", "search"})
    EXPECT_TRUE(d.capabilities.contains(key)) << key;
  EXPECT_GT(d.capabilities["search"]["max_tile_bytes_total"].get<int64_t>(), 0);
}

// Each device of every platform is a backend instance of its own; one past the last is an error.
TEST(OpenclBackend, EnumeratesTheDevicesOfEveryPlatform) {
  OPENCL_OR_SKIP(cl);
  const int count = cl->device_count();
  ASSERT_GE(count, 1);
  int listed = 0;
  for (const BackendInfo& info : describe_backends())
    if (info.name == device_name("opencl", info.device_index)) {
      EXPECT_EQ(find_backend(info.name).options().device, info.device_index) << info.name;
      ++listed;
    }
  EXPECT_EQ(listed, count);
  const std::string past = device_name("opencl", count);
  try {
    get_backend(past);
    ADD_FAILURE() << past << " was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("this machine has {} opencl device", count)),
              std::string::npos)
        << e.what();
  }
}

// The suite's llama_mlp_block at small shapes, built as src/suite builds it: the search targets
// (search_targets.h) hold the other seven workloads.
ir::KernelGraph small_llama_mlp_block(ir::DType t) {
  constexpr int64_t hidden = 64, inter = 96;
  ir::KernelGraph g;
  auto x = g.input("X", {2, hidden}, t);
  auto gain = g.input("G", {hidden}, t);
  auto w_gate_up = g.input("Wgu", {hidden, 2 * inter}, t);
  auto w_down = g.input("Wd", {inter, hidden}, t);
  auto normed = g.add_node(ir::RmsNormOp{.normalized_shape = {hidden}, .has_weight = true},
                           {x, gain}, "normed")
                    .at(0);
  auto gate_up = g.add_node(ir::MatmulOp{}, {normed, w_gate_up}, "gate_up").at(0);
  auto parts = g.add_node(ir::SplitOp{.dim = -1, .sizes = {inter, inter}}, {gate_up}, "split");
  auto gate = g.add_node(ir::UnaryOp{ir::UnaryFn::silu}, {parts.at(0)}, "gate").at(0);
  auto hidden_act =
      g.add_node(ir::BinaryOp{ir::BinaryFn::mul}, {gate, parts.at(1)}, "hidden").at(0);
  auto down = g.add_node(ir::MatmulOp{}, {hidden_act, w_down}, "down").at(0);
  g.mark_output(g.add_node(ir::BinaryOp{ir::BinaryFn::add}, {down, x}, "out").at(0), "out");
  return g;
}

// Every workload of the suite, at small shapes (PoCL is slow; the full shapes run in the
// benchmark, scripts/suite_table.py --backends cpu,opencl).
constexpr const char* kWorkloads[] = {"rmsnorm_linear", "gated_mlp",      "gqa",
                                      "lora",           "ntrans",         "gemm_softmax",
                                      "gemm_layernorm", "llama_mlp_block"};

ir::KernelGraph small_workload(const std::string& name, ir::DType t) {
  return name == "llama_mlp_block" ? small_llama_mlp_block(t)
                                   : search::testing::small_target(name, t);
}

TEST(OpenclBackend, SuiteWorkloadsMatchReference) {
  OPENCL_OR_SKIP(cl);
  ASSERT_EQ(std::size(kWorkloads), suite::workloads().size());
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (const char* name : kWorkloads)
      cuda_testing::expect_matches(small_workload(name, t), *cl, cuda_testing::fresh_seed(),
                                   fmt::format("{} {}", name, ir::dtype_name(t)));
}

// Concat, split, permute and a reshape marked as an output: the copies and index maps.
TEST(OpenclBackend, DataMovementMatchesReference) {
  OPENCL_OR_SKIP(cl);
  ir::KernelGraph g;
  auto x = g.input("x", {2, 3, 4}, ir::DType::f32);
  auto y = g.input("y", {2, 5, 4}, ir::DType::f32);
  auto c = g.add_node(ir::ConcatOp{1}, {x, y}, "cat").at(0);
  auto parts = g.add_node(ir::SplitOp{2, {1, 3}}, {c}, "split");
  auto p = g.add_node(ir::PermuteOp{{2, 0, 1}}, {parts.at(1)}, "perm").at(0);
  g.mark_output(p, "perm");
  g.mark_output(parts.at(0), "first");
  g.mark_output(g.add_node(ir::ReshapeOp{{6, 4}}, {x}, "flat").at(0), "flat");
  g.mark_output(g.add_node(ir::ReduceOp{ir::ReduceFn::max, 1, false}, {c}, "max").at(0), "max");
  cuda_testing::expect_matches(g, *cl, cuda_testing::fresh_seed(), "data movement");
}

// `yirage backends` lists opencl with its device where a platform exists, and with the reason
// where none does (ocl-icd reads its vendor list from $OCL_ICD_VENDORS when set).
TEST(OpenclBackend, BackendsCommandShowsTheDeviceOrWhyNot) {
  OPENCL_OR_SKIP(cl);
  auto run = [](const std::string& env) {
    std::string out;
    FILE* pipe = popen((env + " " YIRAGE_BINARY " backends 2>&1").c_str(), "r");
    char buffer[4096];
    while (pipe && fgets(buffer, sizeof(buffer), pipe)) out += buffer;
    if (pipe) pclose(pipe);
    return out;
  };
  const std::string present = run("");
  EXPECT_NE(present.find("opencl     yes       " + cl->device().name), std::string::npos)
      << present;
  const std::string absent = run("OCL_ICD_VENDORS=/nonexistent");
  EXPECT_NE(absent.find("opencl     no        no OpenCL device"), std::string::npos) << absent;
  EXPECT_NE(absent.find("reason: the OpenCL ICD loader found no platform"), std::string::npos)
      << absent;
}

// An op the backend does not lower is a one-line error naming the node, never a fallback.
TEST(OpenclBackend, UnsupportedOpIsAnErrorNamingTheNode) {
  OPENCL_OR_SKIP(cl);
  ir::KernelGraph g;
  auto table = g.input("table", {8, 4}, ir::DType::f32);
  auto ids = g.input("ids", {3}, ir::DType::i32);
  g.mark_output(g.add_node(ir::EmbeddingOp{}, {table, ids}, "lookup").at(0), "out");
  try {
    cl->compile(g);
    FAIL() << "compiled an embedding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'lookup' (embedding)"), std::string::npos)
        << e.what();
  }
}

// The search's µGraphs for each workload at small shapes, searched under this device's own
// description, all run and match the reference: f32 for every workload, f16 and bf16 for two.
class SearchedOnOpencl : public ::testing::TestWithParam<std::tuple<const char*, ir::DType>> {};

TEST_P(SearchedOnOpencl, RankedMuGraphsMatchReference) {
  OPENCL_OR_SKIP(cl);
  const auto [target, dtype] = GetParam();
  search::SearchOptions options;
  options.budget_seconds = 20;
  options.threads = 2;
  options.seed = 7;
  const search::SearchResult r =
      search::superoptimize(small_workload(target, dtype), cl->device(), options);
  ASSERT_FALSE(r.ranked.empty()) << target;
  int fused = 0;
  for (const search::Candidate& c : r.ranked)
    for (const ir::Node& n : c.mugraph.nodes()) fused += std::holds_alternative<ir::FusedOp>(n.op);
  EXPECT_GT(fused, 0) << target << ": the search returned no fused kernel to run";
  for (size_t i = 0; i < r.ranked.size(); ++i)
    cuda_testing::expect_matches(
        r.ranked[i].mugraph, *cl, cuda_testing::fresh_seed(),
        fmt::format("{} candidate {} ({} kernels)", target, i, r.ranked[i].kernels));
}

INSTANTIATE_TEST_SUITE_P(Targets, SearchedOnOpencl,
                         ::testing::Combine(::testing::ValuesIn(kWorkloads),
                                            ::testing::Values(ir::DType::f32)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param),
                                              ir::dtype_name(std::get<1>(info.param)));
                         });
INSTANTIATE_TEST_SUITE_P(SixteenBit, SearchedOnOpencl,
                         ::testing::Combine(::testing::Values("gqa", "rmsnorm_linear"),
                                            ::testing::Values(ir::DType::f16, ir::DType::bf16)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param),
                                              ir::dtype_name(std::get<1>(info.param)));
                         });

// The suite's workloads at their real shapes (bs 1, f32), as `yirage suite run` builds them, and
// the µGraphs the search returns for them under this device's description: the tilings, grids
// and reduction lengths of full shapes, which the small targets above never reach. Inputs in
// each workload's own ranges (docs/suite.md). About two minutes on PoCL in the release build;
// under the sanitizers, whose instrumented search and reference executor take several times
// that, the small shapes above cover the same code.
class FullShapeOnOpencl : public ::testing::TestWithParam<const char*> {};

TEST_P(FullShapeOnOpencl, WorkloadAndItsMuGraphsMatchReference) {
#ifdef YIRAGE_SANITIZED
  GTEST_SKIP() << "full shapes run in the release build; the small shapes run here";
#endif
  OPENCL_OR_SKIP(cl);
  const std::string name = GetParam();
  const suite::WorkloadInfo* info = nullptr;
  for (const suite::WorkloadInfo& w : suite::workloads())
    if (w.name == name) info = &w;
  ASSERT_NE(info, nullptr) << name;
  const std::map<std::string, float> ranges(info->input_scales.begin(), info->input_scales.end());
  const ir::KernelGraph graph = suite::build_workload(name);
  cuda_testing::expect_matches(graph, *cl, cuda_testing::fresh_seed(), name + " unfused", ranges);
  search::SearchOptions options;
  options.budget_seconds = 5;
  options.threads = 2;
  options.seed = 7;
  const search::SearchResult r = search::superoptimize(graph, cl->device(), options);
  ASSERT_FALSE(r.ranked.empty()) << name;
  for (size_t i = 0; i < r.ranked.size(); ++i)
    cuda_testing::expect_matches(
        r.ranked[i].mugraph, *cl, cuda_testing::fresh_seed(),
        fmt::format("{} candidate {} ({} kernels)", name, i, r.ranked[i].kernels), ranges);
}

INSTANTIATE_TEST_SUITE_P(Suite, FullShapeOnOpencl, ::testing::ValuesIn(kWorkloads),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace yirage::backend
