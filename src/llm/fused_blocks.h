// The hot blocks through the superoptimizer. RMSNorm + QKV, the attention output with the gated
// MLP, and the final norm + LM head are built as kernel graphs over the weights in their GGUF
// blocks (ir's quant_matmul), one graph per shape bucket of rows. tune::optimize searches fused
// kernels for each, checks them against the unfused graph on random inputs, times them on this
// machine and caches the winner per device fingerprint, so the search runs once per machine and
// later loads are cache hits. The graphs are optimized for, and run on, the backend the caller
// gives: on one whose buffers are host memory (cpu) the winners read the weights in place in the
// mapped file and write the model's own arrays; on a device backend the weights are copied into
// its buffers once, at load. Attention (RoPE, the KV cache, scores, softmax) runs one of two ways:
//  - on the host's hand-written kernels, the default where the backend's buffers are host memory:
//    they round q and the probabilities to f16 as llama.cpp does, which keeps the cpu engine's
//    tokens equal to llama.cpp's, and each block's activations cross to the backend and back;
//  - as a kernel graph of the backend's (attention_graph: RoPE, then ir's paged_attention over a
//    pool of f16 keys and values that the backend holds), the default on a device backend: a
//    step's layers then run with x copied in once and out once (HotBlocks::decoder_layers).
// LlamaModel::hot_path says which.
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
  // RoPE, the KV cache and attention as a graph on the backend as well (attention_graph below),
  // the keys and values in pools of the backend's (HotBlocks::decoder_layers): a step's layers
  // then run with one copy of x in and one out. Off: attention runs on `attention`'s kernels.
  bool attention_on_backend = false;
  // With attention_on_backend: the KV caches to make pools for at load, with progress lines (the
  // model's own). Others get theirs at their first step, optimized without progress lines.
  std::vector<KvLayout> kv_layouts;
  // Time every launch, the backend waited for before and after it (ModelOptions::time_blocks).
  bool time_blocks = false;
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

// A layer's attention over a pool of `layout.blocks` KV blocks for `rows` rows: RoPE on q and k
// (rows of the rmsnorm+qkv graph's outputs), then ir's paged_attention. Inputs q, k, v, pool,
// table, positions (-1 for a padding row) and rope_positions (the same, 0 for a padding row);
// outputs the attention and the pool with this step's keys and values.
ir::KernelGraph attention_graph(const LlamaConfig& config, int rows, const KvLayout& layout);

// Why attention cannot run as a kernel graph for this model (its RoPE rotates part of each
// head), or empty when it can.
std::string backend_attention_unsupported(const LlamaConfig& config);

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
