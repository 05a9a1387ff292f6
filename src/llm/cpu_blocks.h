// The CPU implementation of the model's hot blocks (model.h's HotBlocks), on the kernels of
// kernels.h and a thread pool.
#pragma once

#include <memory>

#include "llm/model.h"

namespace yirage::llm {

std::unique_ptr<HotBlocks> make_cpu_blocks(const LlamaConfig& config, const LlamaWeights& weights,
                                           int context_length, ThreadPool& pool,
                                           const KernelTable& kernels);

// y = (x · 1/sqrt(mean(x²) + eps)) · w for `n` rows of length `dim`; squares in float summed in
// double, as ggml does.
void rms_norm(const float* x, const float* w, int n, int dim, float eps, float* y);

}  // namespace yirage::llm
