// Golden files of generated code: for every graph in inputs/ and every backend in kGenerators,
// the source its code generator writes is compared with <backend>/<graph>.<extension>, so that a
// change to a generator shows up as a reviewed diff of these files. YIRAGE_UPDATE_GOLDENS=1
// writes them instead (README.md).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/codegen.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_util.h"
#include "backend/opencl/codegen.h"
#include "backend/triton/codegen.h"
#include "ir/ir.h"

namespace yirage {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(YIRAGE_SOURCE_DIR) / "tests" / "golden";

// The generated code after `marker`, or all of it where the marker is absent: the runtime and
// preludes every program starts with are the same for all graphs and stay out of the goldens.
std::string after(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  return at == std::string::npos ? text : text.substr(at + marker.size());
}

std::string cpu_source(const ir::KernelGraph& g) {
  return after(backend::cpu::generate_source(g), "// ==== generated ====\n");
}

std::string cuda_source(const ir::KernelGraph& g) {
  const backend::cuda::Program program = backend::cuda::lower(g);
  std::string out;
  for (const backend::cuda::KernelLaunch& k : program.kernels) {
    out += fmt::format("// ==== {}: grid [{}, {}, {}], {} threads, {} bytes of shared memory\n",
                       k.what, k.grid[0], k.grid[1], k.grid[2], k.threads, k.shared_bytes);
    out += after(k.source, backend::cuda::detail::prelude());
  }
  return out;
}

std::string opencl_source(const ir::KernelGraph& g) {
  const backend::opencl::DeviceLimits limits{.local_memory_bytes = 64 * 1024,
                                             .max_work_group_size = 256};
  const backend::opencl::Program program = backend::opencl::lower(g, limits);
  std::string out = program.source;
  for (const backend::opencl::Step& s : program.steps)
    out += fmt::format("// step {}: {} global [{}, {}, {}] local [{}, {}, {}]{}\n", s.what,
                       s.kernel.empty() ? "copy" : s.kernel, s.global[0], s.global[1], s.global[2],
                       s.local[0], s.local[1], s.local[2],
                       s.copy_bytes ? fmt::format(" {} bytes", s.copy_bytes) : "");
  return out;
}

// Each kernel's launch, then its module less the imports every module starts with.
std::string triton_source(const ir::KernelGraph& g) {
  const backend::triton::Program program = backend::triton::lower(g);
  std::string out;
  for (const backend::triton::TritonKernel& k : program.kernels)
    out += fmt::format("# ==== {}: grid [{}, {}, {}], {} warps\n{}", k.what, k.grid[0], k.grid[1],
                       k.grid[2], k.num_warps,
                       after(k.source, backend::triton::detail::module_header()));
  return out;
}

struct Generator {
  std::string backend;    // the folder of its goldens
  std::string extension;  // of its golden files
  std::function<std::string(const ir::KernelGraph&)> source;
};

// One line per backend whose generated code is kept as golden files.
const std::vector<Generator> kGenerators = {
    {"cpu", "cpp", cpu_source},
    {"cuda", "cu", cuda_source},
    {"opencl", "cl", opencl_source},
    {"triton", "py", triton_source},
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "line 12: expected `...`, generated `...`" for the first line that differs.
std::string first_difference(const std::string& expected, const std::string& actual) {
  std::istringstream e(expected), a(actual);
  std::string el, al;
  for (int line = 1;; ++line) {
    const bool more_e = bool(std::getline(e, el)), more_a = bool(std::getline(a, al));
    if (!more_e && !more_a) return "they differ only in line endings";
    if (!more_e || !more_a || el != al)
      return fmt::format("line {}: golden `{}`, generated `{}`", line, more_e ? el : "<end>",
                         more_a ? al : "<end>");
  }
}

std::vector<fs::path> inputs() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kGoldenDir / "inputs"))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

class Golden : public ::testing::TestWithParam<Generator> {};

TEST_P(Golden, GeneratedSourcesMatchTheGoldenFiles) {
  const Generator& gen = GetParam();
  const char* update = std::getenv("YIRAGE_UPDATE_GOLDENS");
  const bool updating = update && std::string(update) == "1";
  const fs::path dir = kGoldenDir / gen.backend;
  if (updating) fs::create_directories(dir);
  std::set<fs::path> expected_files;
  const std::vector<fs::path> graphs = inputs();
  ASSERT_FALSE(graphs.empty());
  for (const fs::path& input : graphs) {
    const fs::path golden = dir / (input.stem().string() + "." + gen.extension);
    expected_files.insert(golden);
    const std::string source = gen.source(ir::load_kernel_graph(input.string()));
    if (updating) {
      std::ofstream(golden, std::ios::binary) << source;
      continue;
    }
    ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; tests/golden/README.md says how to "
                                    << "write it";
    const std::string kept = read_file(golden);
    EXPECT_TRUE(kept == source) << golden << ": " << first_difference(kept, source)
                                << " (if the change is intended, refresh the goldens as "
                                << "tests/golden/README.md says and review their diff)";
  }
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_TRUE(expected_files.contains(entry.path()))
        << entry.path() << " has no graph in tests/golden/inputs";
}

INSTANTIATE_TEST_SUITE_P(Backends, Golden, ::testing::ValuesIn(kGenerators),
                         [](const auto& info) { return info.param.backend; });

}  // namespace
}  // namespace yirage
