// Host tensors for the CLI: inputs made up or read from .npy files, outputs summarised or saved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace yirage::tools {

// One tensor per graph input, in KernelGraph::inputs() order. Floats are uniform in [-1, 1). An
// i32 input gets ids valid for every op that reads it: below the table's rows for embedding,
// below the sequence length for rope, and small otherwise.
std::vector<ir::HostTensor> random_inputs(const ir::KernelGraph& graph, uint64_t seed);

// Reads input N from dir/N.npy (see npy.h for which dtypes each input accepts).
std::vector<ir::HostTensor> load_inputs(const ir::KernelGraph& graph, const std::string& dir);

// Writes output N to dir/N.npy, creating dir.
void save_outputs(const ir::KernelGraph& graph, const std::vector<ir::HostTensor>& outputs,
                  const std::string& dir);

// Statistics over the finite elements; NaN and Inf are counted apart.
struct TensorSummary {
  double min = 0, max = 0, mean = 0, abs_max = 0;
  int64_t nan_count = 0, inf_count = 0;
  std::vector<float> first;  // the first few elements
};

TensorSummary summarize(const ir::HostTensor& tensor);

}  // namespace yirage::tools
