// bench/gpu.sh's driver: for each suite workload at fp16 (bs 1 and 8 where it has a batch),
// compiles each hand-built µGraph variant (suite_mugraphs.h) and the unfused graph for the cuda
// backend, checks each against the reference executor on random inputs (outputs poisoned first),
// times the correct ones with CUDA events over CUDA-graph replays, and prints one JSON object per
// line.
//
//   yirage_cuda_bench [--workloads a,b,...] [--bs 1,8] [--variants n32_k256,...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "suite/suite.h"
#include "suite_mugraphs.h"
#include "verify/verify.h"

namespace yirage {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

struct Check {
  double rel_l2 = 0, max_abs = 0;
  int64_t not_finite = 0;
};

Check compare(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  Check c;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double a = actual.get(i), e = expected.get(i);
    if (!std::isfinite(a)) {
      ++c.not_finite;
      continue;
    }
    diff += (a - e) * (a - e);
    norm += e * e;
    c.max_abs = std::max(c.max_abs, std::fabs(a - e));
  }
  c.rel_l2 = std::sqrt(diff / std::max(norm, 1e-30));
  return c;
}

int run(int argc, char** argv) {
  std::vector<std::string> names;
  for (const suite::WorkloadInfo& w : suite::workloads()) names.push_back(w.name);
  std::vector<int> batch_sizes{1, 8};
  std::vector<std::string> only_variants;  // empty: every variant
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--workloads")
      names = split_list(argv[i + 1]);
    else if (flag == "--variants")
      only_variants = split_list(argv[i + 1]);
    else if (flag == "--bs") {
      batch_sizes.clear();
      for (const std::string& b : split_list(argv[i + 1])) batch_sizes.push_back(std::stoi(b));
    } else {
      fail("yirage_cuda_bench: unknown flag '{}'", flag);
    }
  }
  backend::Backend& cuda = backend::get_backend("cuda");
  const uint64_t seed = std::random_device{}();
  for (const suite::WorkloadInfo& w : suite::workloads()) {
    if (std::find(names.begin(), names.end(), w.name) == names.end()) continue;
    for (int bs : batch_sizes) {
      if (!w.has_batch && bs != 1) continue;
      const ir::KernelGraph reference_graph = suite::build_workload(w.name, bs, ir::DType::f16);
      const std::vector<ir::HostTensor> inputs = suite::random_inputs(w, reference_graph, seed);
      const std::vector<ir::HostTensor> expected = verify::run_reference(reference_graph, inputs);
      int64_t bytes = 0;
      for (const ir::HostTensor& t : inputs) bytes += int64_t(t.bytes.size());
      for (const ir::HostTensor& t : expected) bytes += int64_t(t.bytes.size());
      // The plain graph competes too: its kernel-level matmuls are cuBLAS calls where cuBLAS
      // loaded, so a fused variant has to beat the library path to be chosen.
      std::vector<cuda_suite::Variant> candidates = cuda_suite::variants(w.name, bs);
      candidates.push_back({"unfused", reference_graph});
      for (const cuda_suite::Variant& v : candidates) {
        if (!only_variants.empty() &&
            std::find(only_variants.begin(), only_variants.end(), v.name) == only_variants.end())
          continue;
        nlohmann::json row = {{"workload", w.name},
                              {"bs", bs},
                              {"variant", v.name},
                              {"seed", seed},
                              {"bytes", bytes}};
        try {
          const std::vector<ir::HostTensor> actual = backend::run_on(cuda, v.graph, inputs);
          const Check c = compare(actual.at(0), expected.at(0));
          row["rel_l2"] = c.rel_l2;
          row["max_abs_err"] = c.max_abs;
          row["not_finite"] = c.not_finite;
          row["correct"] = c.not_finite == 0 && c.rel_l2 <= 1e-2;
          std::unique_ptr<backend::Module> module = cuda.compile(v.graph);
          row["kernels"] = backend::cuda::kernel_count(*module);
          std::vector<std::unique_ptr<backend::Buffer>> in, out;
          std::vector<backend::Buffer*> in_ptr, out_ptr;
          for (const ir::HostTensor& t : inputs) {
            in.push_back(cuda.allocate(t.bytes.size()));
            in.back()->write(t.bytes);
            in_ptr.push_back(in.back().get());
          }
          out.push_back(cuda.allocate(expected[0].bytes.size()));
          out_ptr.push_back(out.back().get());
          const backend::cuda::Timing t = backend::cuda::time_module(*module, in_ptr, out_ptr);
          row["median_us"] = t.median_us;
          row["min_us"] = t.min_us;
        } catch (const std::exception& e) {
          row["correct"] = false;
          row["error"] = e.what();
        }
        std::cout << row.dump() << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace yirage

int main(int argc, char** argv) {
  try {
    return yirage::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "yirage_cuda_bench: %s\n", e.what());
    return 1;
  }
}
