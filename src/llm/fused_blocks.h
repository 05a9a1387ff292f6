// The hot blocks through the superoptimizer. RMSNorm + QKV, the attention output with the gated
// MLP, and the final norm + LM head are built as kernel graphs over the weights in their GGUF
// blocks (ir's quant_matmul), one graph per shape bucket of rows. tune::optimize searches fused
// kernels for each, checks them against the unfused graph on random inputs, times them on this
// machine and caches the winner per device fingerprint, so the search runs once per machine and
// later loads are cache hits. The graphs are optimized for, and run on, the backend the caller
// gives: on one whose buffers are host memory (cpu) the winners read the weights in place in the
// mapped file and write the model's own arrays; on a device backend the weights are copied into
// its buffers once, at load, and each block's activations are copied in and its results out. The
// attention core (RoPE, the KV cache, scores, softmax) stays on the hand-written
// kernels: as a kernel graph it was slower at decode, and the search's summation orders, met by
// the f16 rounding of the probabilities, broke token-for-token agreement with llama.cpp. It runs on
// the host whatever the backend, which LlamaModel::hot_path says.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ir/ir.h"
#include "llm/model.h"

namespace yirage::llm {

struct FusedBlockOptions {
  // Where the block graphs are optimized for and run; must outlive the blocks.
  backend::Backend* backend = nullptr;
  double search_seconds = 2;  // per graph, the first time it is optimized on this device
  // Lines saying what is being optimized (and whether it was a cache hit); may be empty.
  std::function<void(const std::string&)> progress;
  // The tuning pipeline's own lines (candidates, compile, profile); may be empty.
  std::function<void(const std::string&)> detail;
};

struct NamedGraph {
  std::string name;  // "rmsnorm+qkv, 64 rows", ...
  ir::KernelGraph graph;
};

// The block graphs the model's hot blocks run, in the order they are optimized: per bucket of
// rows (64, 16, 4, 1) RMSNorm + QKV and the attention output with the gated MLP, then the final
// norm with the LM head. They read only the first layer's weights' types and shapes (every layer's
// are the same), never their bytes, so the CUDA compile tests build them from shapes alone.
std::vector<NamedGraph> fused_block_graphs(const LlamaConfig& config, const LlamaWeights& weights);

// Why the model's hot blocks cannot run as kernel graphs on `backend` (a weight type quant_matmul
// has no format for, no backend or an unavailable one), or empty when they can.
std::string fused_blocks_unsupported(const LlamaConfig& config, const LlamaWeights& weights,
                                     const backend::Backend* backend);

// Optimizes (or loads from the tuning cache) every block graph and compiles the winners.
// `attention` runs the attention block. Throws yirage::Error when fused_blocks_unsupported says
// why not.
std::unique_ptr<HotBlocks> make_fused_blocks(const LlamaConfig& config, const LlamaWeights& weights,
                                             std::unique_ptr<HotBlocks> attention,
                                             const FusedBlockOptions& options);

}  // namespace yirage::llm
