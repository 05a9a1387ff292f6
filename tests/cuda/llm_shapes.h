// The language models whose kernels the CUDA tests compile and check: SmolLM2-135M (the test
// model, Q4_1 with a Q8_0 head, and all-Q8_0) and a Llama-3-8B-shaped model (Q4_0, and BF16 as
// its Hugging Face checkpoint stores it), as the
// engine's block graphs (llm/fused_blocks.h) build them from shapes alone, plus the embedding and
// rope graphs of the same widths.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/ir.h"
#include "llm/fused_blocks.h"
#include "llm/model.h"

namespace yirage::cuda_llm {

struct ModelShape {
  std::string name;
  llm::LlamaConfig config;
  llm::GgmlType matrices;
  llm::GgmlType head;
};

inline llm::LlamaConfig llama_config(int n_embd, int n_head, int n_head_kv, int n_ff, int n_vocab,
                                     float rope_base) {
  llm::LlamaConfig c;
  c.arch = "llama";
  c.n_layer = 1;
  c.n_embd = n_embd;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = n_embd / n_head;
  c.rope_dim = c.head_dim;
  c.n_ff = n_ff;
  c.n_vocab = n_vocab;
  c.n_ctx_train = 8192;
  c.rope_base = rope_base;
  return c;
}

inline std::vector<ModelShape> model_shapes() {
  const llm::LlamaConfig smol = llama_config(576, 9, 3, 1536, 49152, 100000.0f);
  const llm::LlamaConfig llama3_8b = llama_config(4096, 32, 8, 14336, 128256, 500000.0f);
  return {{"SmolLM2-135M Q4_1", smol, llm::GgmlType::Q4_1, llm::GgmlType::Q8_0},
          {"SmolLM2-135M Q8_0", smol, llm::GgmlType::Q8_0, llm::GgmlType::Q8_0},
          {"Llama-3-8B shape Q4_0", llama3_8b, llm::GgmlType::Q4_0, llm::GgmlType::Q4_0},
          {"Llama-3-8B shape BF16", llama3_8b, llm::GgmlType::BF16, llm::GgmlType::BF16}};
}

inline int64_t block_bytes(llm::GgmlType type) {
  if (type == llm::GgmlType::BF16 || type == llm::GgmlType::F16) return 64;
  return type == llm::GgmlType::Q4_0 ? 18 : type == llm::GgmlType::Q4_1 ? 20 : 34;
}

// A weight matrix's shape and type; no bytes (the graphs never read them).
inline llm::Linear shaped(const std::string& name, llm::GgmlType type, int rows, int cols) {
  return {name, type, rows, cols, nullptr, size_t(cols / 32 * block_bytes(type))};
}

inline llm::LlamaWeights shaped_weights(const ModelShape& m) {
  const llm::LlamaConfig& c = m.config;
  const int q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
  llm::LlamaWeights w;
  llm::LayerWeights l;
  l.attn_norm.assign(size_t(c.n_embd), 1.0f);
  l.ffn_norm.assign(size_t(c.n_embd), 1.0f);
  l.wq = shaped("wq", m.matrices, q, c.n_embd);
  l.wk = shaped("wk", m.matrices, kv, c.n_embd);
  l.wv = shaped("wv", m.matrices, kv, c.n_embd);
  l.wo = shaped("wo", m.matrices, c.n_embd, q);
  l.gate = shaped("gate", m.matrices, c.n_ff, c.n_embd);
  l.up = shaped("up", m.matrices, c.n_ff, c.n_embd);
  l.down = shaped("down", m.matrices, c.n_embd, c.n_ff);
  w.layers.push_back(l);
  w.output_norm.assign(size_t(c.n_embd), 1.0f);
  w.output = shaped("output", m.head, c.n_vocab, c.n_embd);
  w.token_embd = w.output;
  return w;
}

// The token embedding (f32 table, as the engine keeps dequantized rows) and rope on q and k of
// `rows` tokens, both conventions.
inline std::vector<llm::NamedGraph> embedding_and_rope_graphs(const llm::LlamaConfig& c, int rows) {
  std::vector<llm::NamedGraph> graphs;
  {
    ir::KernelGraph g;
    const ir::TensorRef table = g.input("table", {c.n_vocab, c.n_embd}, ir::DType::f32);
    const ir::TensorRef ids = g.input("ids", {rows}, ir::DType::i32);
    g.mark_output(g.embedding(table, ids), "x");
    graphs.push_back({fmt::format("embedding, {} rows", rows), std::move(g)});
  }
  for (ir::RopeStyle style : {ir::RopeStyle::interleaved, ir::RopeStyle::neox}) {
    ir::KernelGraph g;
    const ir::TensorRef q = g.input("q", {rows, c.n_head, c.head_dim}, ir::DType::f32);
    const ir::TensorRef k = g.input("k", {rows, c.n_head_kv, c.head_dim}, ir::DType::f32);
    const ir::TensorRef pos = g.input("positions", {rows}, ir::DType::i32);
    g.mark_output(g.rope(q, pos, c.rope_base, style), "q_rotated");
    g.mark_output(g.rope(k, pos, c.rope_base, style), "k_rotated");
    graphs.push_back(
        {fmt::format("rope ({}), {} rows", ir::rope_style_name(style), rows), std::move(g)});
  }
  return graphs;
}

}  // namespace yirage::cuda_llm
