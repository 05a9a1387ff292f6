// Library matmuls on the cpu backend (ops.h MatmulOp::library): OpenBLAS's results against the
// reference executor, the device description and cache key naming the library, a clear error for
// a dtype it lacks, and the tuner measuring library variants of its candidates.
#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "cpu_test_util.h"
#include "test_util.h"
#include "tune/tune.h"

namespace yirage::cpu_test {
namespace {

using ir::DType;
using ir::KernelGraph;
using ir::TensorRef;

// The library's name when the backend offers it, else "" (the tests below then skip).
std::string offered_library() {
  const nlohmann::json caps = cpu_backend().device().capabilities;
  const nlohmann::json& lib = caps.at("library_matmul");
  return lib.contains("name") ? lib["name"].get<std::string>() : std::string();
}

// Why the backend offers none, for a skipped test's message.
std::string why_no_library() {
  return cpu_backend().device().capabilities["library_matmul"].value("unavailable", "");
}

TensorRef library_matmul(KernelGraph& g, TensorRef a, TensorRef b, std::string name) {
  return g.add_node(ir::MatmulOp{.library = true}, {a, b}, std::move(name))[0];
}

TEST(LibraryMatmul, TheDeviceAndTheCacheKeyNameTheLibrary) {
  if (offered_library().empty()) GTEST_SKIP() << why_no_library();
  const nlohmann::json lib = cpu_backend().device().capabilities["library_matmul"];
  EXPECT_TRUE(offered_library().starts_with("OpenBLAS ")) << lib.dump();
  EXPECT_EQ(lib["dtypes"], nlohmann::json::array({"f32"}));
  EXPECT_NE(cpu_backend().codegen_settings().find("blas=" + offered_library()), std::string::npos)
      << cpu_backend().codegen_settings();
}

// Odd shapes, a rank-3 operand against a matrix, batched operands with broadcast batch dims and
// single rows (GEMVs), next to a generated matmul of the same operands.
TEST(LibraryMatmul, MatchesTheReferenceIncludingBroadcastBatches) {
  if (offered_library().empty()) GTEST_SKIP() << why_no_library();
  KernelGraph g;
  TensorRef x = g.input("X", {7, 40}, DType::f32), w = g.input("W", {40, 45}, DType::f32);
  TensorRef a = g.input("A", {3, 5, 37}, DType::f32), b = g.input("B", {37, 9}, DType::f32);
  TensorRef bq = g.input("BQ", {2, 1, 6, 8}, DType::f32), bk = g.input("BK", {3, 8, 5}, DType::f32);
  g.mark_output(library_matmul(g, x, w, "plain"), "plain");
  g.mark_output(g.matmul(x, w), "generated");
  g.mark_output(library_matmul(g, a, b, "rank3"), "rank3");
  g.mark_output(library_matmul(g, bq, bk, "batched"), "batched");
  // One row: a GEMV, also batched.
  g.mark_output(library_matmul(g, g.input("X1", {1, 40}, DType::f32), w, "row"), "row");
  g.mark_output(library_matmul(g, g.input("BR", {2, 1, 1, 8}, DType::f32), bk, "rows"), "rows");
  // An intermediate in the workspace, read by the next op.
  g.mark_output(g.exp(library_matmul(g, g.mul_scalar(x, 0.1), w, "inner")), "chain");
  check_against_reference(g, 21, "library matmuls");
}

TEST(LibraryMatmul, ADtypeTheLibraryLacksIsAClearError) {
  KernelGraph g;
  TensorRef x = g.input("x", {4, 8}, DType::f16), w = g.input("w", {8, 4}, DType::f16);
  g.mark_output(library_matmul(g, x, w, "half"), "y");
  const std::string error = test_util::error_of([&] { cpu_backend().compile(g); });
  if (offered_library().empty())
    EXPECT_NE(error.find("node 'half' is a library matmul, but no BLAS"), std::string::npos)
        << error;
  else
    EXPECT_EQ(error,
              "cpu backend: node 'half' (matmul): a library matmul computes in f32 only "
              "(cblas_sgemm), this one has an operand of f16[4, 8]");
}

// The tuner adds "+ OpenBLAS" variants of the candidates with kernel-level matmuls (the unfused
// graph here; the fused µGraph has none), checks and times them like the others, and a cache hit
// gives back the winner with its library marks.
TEST(LibraryMatmul, TheTunerMeasuresLibraryVariants) {
  if (offered_library().empty()) GTEST_SKIP() << why_no_library();
  tune::OptimizeOptions o;
  o.cache_path = fresh_cache_db("library");
  o.profile.min_seconds = 0.01;
  o.profile.min_repetitions = 3;
  o.candidates = [](const KernelGraph&, const backend::DeviceDescription&) {
    return std::vector<tune::Candidate>{
        {"fused", ir::testing::rmsnorm_linear_ugraph(DType::f32), std::nullopt}};
  };
  const KernelGraph g = ir::testing::rmsnorm_linear_kernel(DType::f32);
  const tune::OptimizeResult r = tune::optimize(g, cpu_backend(), o);
  ASSERT_EQ(r.entry.candidates.size(), 3u);
  const tune::CandidateRecord& variant = r.entry.candidates[2];
  EXPECT_EQ(variant.label, "unfused + " + offered_library());
  EXPECT_EQ(variant.status, "ok") << variant.message;
  EXPECT_GT(variant.seconds, 0);
  EXPECT_NE(variant.graph_json.find("\"library\":true"), std::string::npos) << variant.graph_json;

  std::optional<KernelGraph> winner = tune::cached_winner(g, cpu_backend(), o.cache_path);
  ASSERT_TRUE(winner);
  EXPECT_EQ(ir::structural_hash(*winner), ir::structural_hash(r.chosen));
  check_against_reference(*winner, 5, "cached winner");
}

}  // namespace
}  // namespace yirage::cpu_test
