// Digests of the CUDA code of every hand-built suite µGraph (tests/cuda/suite_mugraphs.h, full
// size) under the code generator's options on an H200 and on an A100: the paths the small golden
// inputs never take (weights streamed by TMA or registers, cluster pairs, wgmma chains, staged
// operands) are covered here, one line per graph in cuda_digests.txt. A refactor of the lowering
// that must not change what runs keeps every line; a change to generated code shows up as the
// lines it changes. YIRAGE_UPDATE_GOLDENS=1 rewrites the file (README.md).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "backend/cuda/codegen.h"
#include "backend/cuda/cuda.h"
#include "backend/fingerprint.h"
#include "cuda/suite_mugraphs.h"

namespace yirage {
namespace {

namespace fs = std::filesystem;
namespace cuda = backend::cuda;

const fs::path kDigests = fs::path(YIRAGE_SOURCE_DIR) / "tests" / "golden" / "cuda_digests.txt";

// The options the backend derives for a device of `cc` with `sms` multiprocessors and `shared`
// bytes of opt-in shared memory, with cuBLAS and tensor-map encoding present.
cuda::CodegenOptions options_for(const std::string& cc, int sms, int shared) {
  backend::DeviceDescription d;
  d.capabilities = {{"compute_capability", cc},
                    {"sm_arch", "sm_" + cc.substr(0, 1) + cc.substr(2)},
                    {"multiprocessors", sms},
                    {"shared_memory_per_block_optin_bytes", shared}};
  return cuda::default_codegen_options(d, true, true);
}

// Everything a launch depends on, as text: slots, then each step's launch and source.
std::string program_text(const cuda::Program& p) {
  std::string out;
  for (const cuda::Slot& s : p.slots)
    out += fmt::format("slot {} {} {} {}\n", int(s.kind), s.index, s.bytes, s.offset);
  for (const cuda::KernelLaunch& k : p.kernels) {
    out += fmt::format("{} {} grid {} threads {} shared {} args {} arch {} waits {}\n", k.what,
                       k.name, k.grid, k.threads, k.shared_bytes, k.args, k.arch_specific,
                       k.waits_on_prior_grids);
    if (k.gemm)
      out += fmt::format("gemm {} {} {} {} {} {} {} {} {} {}\n", k.gemm->m, k.gemm->n, k.gemm->k,
                         k.gemm->batches, k.gemm->stride_a, k.gemm->stride_b, k.gemm->stride_c,
                         int(k.gemm->dtype), k.gemm->adds, k.gemm->group);
    for (const cuda::TensorMapArg& t : k.tensor_maps)
      out += fmt::format("map {} {} {} {} {} {}\n", t.arg, int(t.dtype), t.dims, t.row_bytes, t.box,
                         t.swizzle);
    out += k.source;
  }
  return out;
}

// "<device> <workload> bs<N> <variant>" -> "<digest> <steps>", for every hand-built variant.
std::map<std::string, std::string> digests() {
  const std::vector<std::pair<std::string, cuda::CodegenOptions>> devices = {
      {"h200", options_for("9.0", 132, 232448)}, {"a100", options_for("8.0", 108, 166912)}};
  std::map<std::string, std::string> out;
  for (const auto& [device, options] : devices)
    for (const suite::WorkloadInfo& w : suite::workloads())
      for (int bs : w.has_batch ? std::vector<int>{1, 8} : std::vector<int>{1})
        for (const cuda_suite::Variant& v : cuda_suite::variants(w.name, bs)) {
          const std::string key = fmt::format("{} {} bs{} {}", device, w.name, bs, v.name);
          std::string value;
          try {
            const cuda::Program p = cuda::lower(v.graph, options);
            value =
                fmt::format("{} {}", backend::fingerprint_of({program_text(p)}), p.kernels.size());
          } catch (const Error& e) {
            value = fmt::format("error: {}", e.what());
          }
          out[key] = value;
        }
  return out;
}

TEST(CudaDigests, TheHandBuiltSuiteLowersAsItsDigestsSay) {
  const std::map<std::string, std::string> now = digests();
  ASSERT_GT(now.size(), 50u);
  const char* update = std::getenv("YIRAGE_UPDATE_GOLDENS");
  if (update && std::string(update) == "1") {
    std::ofstream file(kDigests, std::ios::binary);
    file << "# tests/golden/cuda_digests_test.cpp writes and checks this file\n";
    for (const auto& [key, value] : now) file << key << " = " << value << "\n";
    return;
  }
  std::ifstream file(kDigests);
  ASSERT_TRUE(file) << kDigests << " is missing; tests/golden/README.md says how to write it";
  std::map<std::string, std::string> kept;
  for (std::string line; std::getline(file, line);) {
    const size_t eq = line.find(" = ");
    if (line.starts_with("#") || eq == std::string::npos) continue;
    kept[line.substr(0, eq)] = line.substr(eq + 3);
  }
  std::vector<std::string> changed;
  for (const auto& [key, value] : now)
    if (!kept.contains(key))
      changed.push_back(fmt::format("{}: new ({})", key, value));
    else if (kept[key] != value)
      changed.push_back(fmt::format("{}: {} -> {}", key, kept[key], value));
  for (const auto& [key, value] : kept)
    if (!now.contains(key)) changed.push_back(fmt::format("{}: gone", key));
  EXPECT_TRUE(changed.empty()) << changed.size() << " graphs lower differently:\n"
                               << fmt::format("{}", fmt::join(changed, "\n"))
                               << "\n(if intended, refresh as tests/golden/README.md says)";
}

}  // namespace
}  // namespace yirage
