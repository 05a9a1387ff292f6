// The JIT: the object cache, compiler failures kept as messages, the timeout.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/codegen.h"
#include "backend/cpu/jit.h"
#include "cpu_test_util.h"
#include "ir/serialize.h"
#include "test_util.h"

namespace yirage::cpu_test {
namespace {

namespace cpu = backend::cpu;
namespace fs = std::filesystem;

cpu::Toolchain toolchain() {
  private_cache_dir();
  return cpu::make_toolchain(cpu_backend().device());
}

TEST(CpuJit, ASecondCompileOfTheSameSourceIsACacheHit) {
  const std::string source = "extern \"C\" int yr_jit_test_answer() { return 42; }\n";
  cpu::CompiledObject first = cpu::compile_and_load(source, toolchain(), 120);
  cpu::CompiledObject second = cpu::compile_and_load(source, toolchain(), 120);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(first.object->path(), second.object->path());
  auto answer = reinterpret_cast<int (*)()>(second.object->symbol("yr_jit_test_answer"));
  EXPECT_EQ(answer(), 42);
  EXPECT_EQ(first.object->path().parent_path(), private_cache_dir() / "kernels");
}

TEST(CpuJit, ACompileErrorKeepsTheCompilersMessage) {
  const std::string error = test_util::error_of(
      [] { cpu::compile_and_load("int broken( { return yr_no_such_name; }\n", toolchain(), 120); });
  EXPECT_NE(error.find("the compiler rejected the generated source"), std::string::npos) << error;
  EXPECT_NE(error.find("error"), std::string::npos) << error;
  EXPECT_NE(error.find(".log"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << "errors are one line";
}

TEST(CpuJit, ACompileThatRunsPastTheTimeoutIsKilled) {
  // Constant evaluation of an exponential recursion keeps any compiler busy far longer.
  const std::string slow = R"(
constexpr long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
static_assert(fib(60) > 0);
)";
  cpu::Toolchain tc = toolchain();
  const std::string error = test_util::error_of([&] { cpu::compile_and_load(slow, tc, 0.2); });
  EXPECT_NE(error.find("timed out after"), std::string::npos) << error;
}

std::set<fs::path> cached_objects() {
  std::set<fs::path> objects;
  for (const fs::directory_entry& f : fs::directory_iterator(private_cache_dir() / "kernels"))
    if (f.path().extension() == ".so") objects.insert(f.path());
  return objects;
}

TEST(CpuJit, ADamagedObjectInTheCacheIsCompiledAgainWithAWarning) {
  ir::KernelGraph g;  // a shape no other test compiles
  g.mark_output(g.relu(g.input("x", {3, 37}, ir::DType::f32)), "y");
  const fs::path file = private_cache_dir() / "damaged_object_graph.json";
  std::ofstream(file) << ir::to_json(g).dump();
  cpu_backend();  // the probe's object is built before the listing
  const std::set<fs::path> before = cached_objects();
  // Another process builds the object, so that this one has never loaded it: the dynamic loader
  // hands back a library it has loaded by its path, whatever the file holds now.
  ASSERT_EQ(std::system(fmt::format("{} run {} --backend cpu --no-cache > /dev/null", YIRAGE_BINARY,
                                    file.string())
                            .c_str()),
            0);
  std::vector<fs::path> built;
  for (const fs::path& p : cached_objects())
    if (!before.contains(p)) built.push_back(p);
  ASSERT_FALSE(built.empty());
  std::vector<uintmax_t> sizes;
  for (const fs::path& p : built) {
    sizes.push_back(fs::file_size(p));
    fs::resize_file(p, sizes.back() / 2);  // as a full disk might have left it
  }

  testing::internal::CaptureStderr();
  const std::vector<ir::HostTensor> inputs = inputs_for(g, 5);
  const std::vector<ir::HostTensor> out = backend::run_on(cpu_backend(), g, inputs);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("yirage: warning: cpu backend: cannot load"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("past its"), std::string::npos) << warning;
  EXPECT_NE(warning.find("compiling it again"), std::string::npos) << warning;
  expect_close(out[0], verify::run_reference(g, inputs)[0], "rebuilt object");
  for (size_t i = 0; i < built.size(); ++i)
    EXPECT_EQ(fs::file_size(built[i]), sizes[i]) << built[i] << " was not rebuilt whole";
}

TEST(CpuJit, FlagsFollowTheDescribedIsa) {
  backend::DeviceDescription d;
  d.capabilities = {{"arch", "x86_64"}, {"isa", {"avx", "avx2", "f16c", "fma"}}};
  cpu::Toolchain avx2 = cpu::make_toolchain(d);
  EXPECT_EQ(avx2.vector_bytes, 32);
  EXPECT_NE(std::find(avx2.flags.begin(), avx2.flags.end(), "-march=x86-64-v3"), avx2.flags.end());
  d.capabilities["isa"] = {"avx2", "avx512bw", "avx512dq", "avx512f", "avx512vl", "fma"};
  EXPECT_EQ(cpu::make_toolchain(d).vector_bytes, 64);
  d.capabilities = {{"arch", "riscv64"}, {"isa", nlohmann::json::array()}};
  cpu::Toolchain generic = cpu::make_toolchain(d);
  EXPECT_EQ(generic.isa_summary, "generic");
  for (const std::string& f : generic.flags) EXPECT_EQ(f.find("-march"), std::string::npos) << f;
}

// The generic (no -march) build of the runtime is the fallback for machines without a known
// vector ISA; it must compute the same results.
TEST(CpuJit, TheGenericVectorBuildIsCorrect) {
  backend::DeviceDescription d;
  d.capabilities = {{"arch", "unknown"}, {"isa", nlohmann::json::array()}};
  cpu::Toolchain tc = cpu::make_toolchain(d);
  ir::KernelGraph g = small_workload("gated_mlp", ir::DType::bf16);
  cpu::CompiledObject object = cpu::compile_and_load(cpu::generate_source(g), tc, 300);
  auto workspace_bytes =
      reinterpret_cast<size_t (*)(int)>(object.object->symbol("yr_workspace_bytes"));
  auto run = reinterpret_cast<int (*)(void* const*, void* const*, char*, int, char*, size_t)>(
      object.object->symbol("yr_run"));
  std::vector<ir::HostTensor> inputs = inputs_for(g, 3);
  std::vector<ir::HostTensor> outputs{ir::HostTensor(g.type(g.outputs()[0].tensor))};
  ir::poison(outputs[0]);
  std::vector<void*> in, out{outputs[0].bytes.data()};
  for (ir::HostTensor& t : inputs) in.push_back(t.bytes.data());
  std::vector<char> workspace(workspace_bytes(2) + 64);
  char error[256] = {};
  ASSERT_EQ(run(in.data(), out.data(), workspace.data(), 2, error, sizeof error), 0) << error;
  expect_close(outputs[0], verify::run_reference(g, inputs)[0], "generic build");
}

}  // namespace
}  // namespace yirage::cpu_test
