// The public workload suite: the blocks of LLM inference every benchmark and search target uses.
//
// Each workload is a kernel graph built from the table in docs/suite.md, parameterised by batch
// scale `bs` (which scales the leading dimension where the workload has a batch) and dtype. The
// examples/ folder holds these graphs as JSON, written by `yirage suite export`; a test checks
// that the files still match this code.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/host_tensor.h"
#include "ir/ir.h"

namespace yirage::suite {

struct WorkloadInfo {
  std::string name;
  std::string program;  // one line, as in docs/suite.md's table
  bool has_batch;       // whether bs scales it
  // Factors for inputs drawn uniformly from [-1, 1), matching the value ranges the peer scripts
  // use (docs/suite.md), so that f16 runs stay finite: exp(Q@K) of unscaled inputs
  // overflows f16. Inputs not listed keep factor 1.
  std::vector<std::pair<std::string, float>> input_scales = {};
};

// The eight workloads in docs/suite.md's order.
const std::vector<WorkloadInfo>& workloads();

// Builds a workload; throws yirage::Error for an unknown name (listing the known ones), bs < 1,
// or a non-float dtype.
ir::KernelGraph build_workload(std::string_view name, int bs = 1, ir::DType dtype = ir::DType::f32);

// Random inputs for `graph` (built from `w`), each drawn uniformly from [-f, f) with f its
// factor in w.input_scales (1 where none), from one generator seeded with `seed`.
std::vector<ir::HostTensor> random_inputs(const WorkloadInfo& w, const ir::KernelGraph& graph,
                                          uint64_t seed);

}  // namespace yirage::suite
