// The triton backend's ahead-of-time path: generated kernels compiled by triton.compile to cubins
// (no GPU needed, so this runs in CI: Triton brings its own ptxas), then, where a GPU exists,
// loaded and launched through the CUDA driver against the reference executor. The GPU test skips
// only where the driver finds no CUDA device; with a device, a missing triton fails it.
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cuda/driver.h"
#include "backend/triton/aot.h"
#include "backend/triton/codegen.h"
#include "ir/serialize.h"
#include "suite/suite.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

namespace fs = std::filesystem;

// Points the cubin cache at a fresh folder for the life of the test, so that it compiles.
class FreshCache {
 public:
  FreshCache() {
    folder_ =
        fs::temp_directory_path() / fmt::format("yirage-triton-test-{}", std::random_device{}());
    const char* old = std::getenv("XDG_CACHE_HOME");
    if (old) old_ = old;
    setenv("XDG_CACHE_HOME", folder_.c_str(), 1);
  }
  ~FreshCache() {
    if (old_.empty())
      unsetenv("XDG_CACHE_HOME");
    else
      setenv("XDG_CACHE_HOME", old_.c_str(), 1);
    std::error_code ignored;
    fs::remove_all(folder_, ignored);
  }
  fs::path entries() const { return folder_ / "yirage" / "triton"; }

 private:
  fs::path folder_;
  std::string old_;
};

size_t count_files(const fs::path& folder, const std::string& extension) {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(folder))
    n += entry.path().extension() == extension;
  return n;
}

TEST(TritonAot, CompilesGeneratedKernelsToCubins) {
  std::string why;
  ASSERT_FALSE(triton::triton_version(&why).empty())
      << why << " (scripts/install-deps.sh installs it)";
  FreshCache cache;
  // Every kernel of the suite, and of two µGraphs the search returned (tests/triton/data): what
  // Triton's GPU compiler accepts is narrower than what its interpreter runs.
  std::vector<ir::KernelGraph> graphs;
  for (const char* name : {"gqa_mugraph", "lora_mugraph"})
    graphs.push_back(ir::load_kernel_graph(
        fmt::format("{}/tests/triton/data/{}.json", YIRAGE_SOURCE_DIR, name)));
  for (const suite::WorkloadInfo& w : suite::workloads())
    graphs.push_back(suite::build_workload(w.name));
  for (const ir::KernelGraph& g : graphs) {
    const triton::Program program = triton::lower(g);
    const std::vector<triton::CompiledKernel> compiled = triton::compile_kernels(program, 90);
    ASSERT_EQ(compiled.size(), program.kernels.size());
    for (size_t i = 0; i < compiled.size(); ++i) {
      const triton::CompiledKernel& k = compiled[i];
      ASSERT_GE(k.cubin.size(), 4u);
      EXPECT_EQ(std::string(k.cubin.data(), 4),
                "\x7f"
                "ELF")
          << program.kernels[i].what;
      EXPECT_EQ(k.function, program.kernels[i].name);
      EXPECT_EQ(k.threads, 32 * program.kernels[i].num_warps);
    }
  }
  // Every distinct kernel is in the cache, and a second compile reads it back alike.
  const size_t entries = count_files(cache.entries(), ".cubin");
  EXPECT_GE(entries, 2u);
  const triton::Program program = triton::lower(graphs.back());
  const std::vector<triton::CompiledKernel> again = triton::compile_kernels(program, 90);
  EXPECT_EQ(count_files(cache.entries(), ".cubin"), entries);
  EXPECT_EQ(again.front().function, program.kernels.front().name);
}

TEST(TritonAot, KernelThatDoesNotCompileNamesItself) {
  std::string why;
  ASSERT_FALSE(triton::triton_version(&why).empty()) << why;
  FreshCache cache;
  triton::Program program;
  program.slots.push_back(
      {.kind = triton::SlotKind::input, .index = 0, .bytes = 16, .type = {ir::DType::f32, {4}}});
  triton::TritonKernel broken;
  broken.name = "yr_broken";
  broken.what = "node 'broken' (test)";
  broken.args = {0};
  broken.source =
      "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef yr_broken(p0):\n"
      "    tl.store(p0 + tl.arange(0, 3), 1.0)\n";  // a range that is no power of two
  program.kernels.push_back(broken);
  const std::string error = test_util::error_of([&] { triton::compile_kernels(program, 90); });
  EXPECT_NE(error.find("node 'broken' (test)"), std::string::npos) << error;
  EXPECT_NE(error.find("does not compile"), std::string::npos) << error;
  EXPECT_NE(error.find("power of 2"), std::string::npos) << error;  // Triton's own reason
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

// Whether the CUDA driver finds a device; the one reason the GPU test may skip.
bool gpu_present() {
  const cuda::Driver& d = cuda::driver();
  int count = 0;
  return d.loaded && d.api.init(0) == 0 && d.api.device_get_count(&count) == 0 && count > 0;
}

TEST(TritonGpu, SuiteRunsFromCubinsAsTheReferenceDoes) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device on this machine";
  Backend& triton = get_backend("triton");  // with a GPU, an unavailable triton is a failure
  for (const suite::WorkloadInfo& w : suite::workloads()) {
    const ir::KernelGraph graph = suite::build_workload(w.name);
    const std::vector<ir::HostTensor> inputs =
        suite::random_inputs(w, graph, std::random_device{}());
    const std::vector<ir::HostTensor> expected = verify::run_reference(graph, inputs);
    const std::vector<ir::HostTensor> actual = run_on(triton, graph, inputs);
    ASSERT_EQ(actual.size(), expected.size()) << w.name;
    for (size_t o = 0; o < expected.size(); ++o) {
      double error = 0, largest = 1e-30;
      for (int64_t i = 0; i < expected[o].size(); ++i) {
        largest = std::max(largest, std::abs(double(expected[o].get(i))));
        error = std::max(error, std::abs(double(actual[o].get(i)) - expected[o].get(i)));
      }
      EXPECT_LE(error / largest, 2e-5) << w.name << " output " << o;  // NaN fails too
    }
  }
}

}  // namespace
}  // namespace yirage::backend
