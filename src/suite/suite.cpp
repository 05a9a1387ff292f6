// The eight workloads of docs/suite.md's table. Weights are graph inputs, so one graph serves any
// weights; intermediate nodes carry readable names and the result is always "out".
#include "suite/suite.h"

#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

namespace yirage::suite {
namespace {

using ir::Dims;
using ir::DType;
using ir::KernelGraph;
using ir::TensorRef;

constexpr int64_t kHidden = 4096;
constexpr int64_t kLlamaIntermediate = 14336;

// A node with a name; the graph builder's shorthands name nodes "t<N>".
TensorRef node(KernelGraph& g, std::string name, ir::Op op, std::vector<TensorRef> inputs) {
  return g.add_node(std::move(op), std::move(inputs), std::move(name)).at(0);
}

void finish(KernelGraph& g, TensorRef result) {
  g.mark_output(result, "out");
}

KernelGraph rmsnorm_linear(int64_t bs, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {2 * bs, kHidden}, t);
  TensorRef gain = g.input("G", {kHidden}, t);
  TensorRef w = g.input("W", {kHidden, 6144}, t);
  TensorRef normed = node(
      g, "normed", ir::RmsNormOp{.normalized_shape = {kHidden}, .has_weight = true}, {x, gain});
  finish(g, node(g, "out", ir::MatmulOp{}, {normed, w}));
  return g;
}

KernelGraph gated_mlp(int64_t bs, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {8 * bs, kHidden}, t);
  TensorRef w1 = g.input("W1", {kHidden, kHidden}, t);
  TensorRef w2 = g.input("W2", {kHidden, kHidden}, t);
  TensorRef gate_proj = node(g, "gate_proj", ir::MatmulOp{}, {x, w1});
  TensorRef gate = node(g, "gate", ir::UnaryOp{ir::UnaryFn::silu}, {gate_proj});
  TensorRef up = node(g, "up", ir::MatmulOp{}, {x, w2});
  finish(g, node(g, "out", ir::BinaryOp{ir::BinaryFn::mul}, {gate, up}));
  return g;
}

KernelGraph gqa(int64_t bs, DType t) {
  KernelGraph g;
  TensorRef q = g.input("Q", {2 * bs, 256, 64}, t);
  TensorRef k = g.input("K", {2 * bs, 64, 4096}, t);
  TensorRef v = g.input("V", {2 * bs, 4096, 64}, t);
  TensorRef scores = node(g, "scores", ir::MatmulOp{}, {q, k});
  TensorRef exp_scores = node(g, "exp_scores", ir::UnaryOp{ir::UnaryFn::exp}, {scores});
  TensorRef row_sum =
      node(g, "row_sum", ir::ReduceOp{.fn = ir::ReduceFn::sum, .dim = -1, .keepdim = true},
           {exp_scores});
  TensorRef probs = node(g, "probs", ir::BinaryOp{ir::BinaryFn::div}, {exp_scores, row_sum});
  finish(g, node(g, "out", ir::MatmulOp{}, {probs, v}));
  return g;
}

KernelGraph lora(int64_t, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {16, 256}, t);
  TensorRef w = g.input("W", {256, kHidden}, t);
  TensorRef a = g.input("A", {256, 16}, t);
  TensorRef b = g.input("B", {16, kHidden}, t);
  TensorRef base = node(g, "base", ir::MatmulOp{}, {x, w});
  TensorRef down = node(g, "down", ir::MatmulOp{}, {x, a});
  TensorRef delta = node(g, "delta", ir::MatmulOp{}, {down, b});
  finish(g, node(g, "out", ir::BinaryOp{ir::BinaryFn::add}, {base, delta}));
  return g;
}

KernelGraph ntrans(int64_t bs, DType t) {
  KernelGraph g;
  TensorRef h = g.input("H", {8 * bs, kHidden}, t);
  TensorRef x = g.input("X", {8 * bs, kHidden}, t);
  TensorRef alpha = g.input("alpha", {8 * bs, kHidden}, t);
  ir::RmsNormOp rms{.normalized_shape = {kHidden}};
  TensorRef h_normed = node(g, "h_normed", rms, {h});
  TensorRef h_plus_x = node(g, "h_plus_x", ir::BinaryOp{ir::BinaryFn::add}, {h_normed, x});
  TensorRef scaled = node(g, "scaled", ir::BinaryOp{ir::BinaryFn::mul}, {alpha, h_plus_x});
  TensorRef residual = node(g, "residual", ir::BinaryOp{ir::BinaryFn::add}, {x, scaled});
  finish(g, node(g, "out", rms, {residual}));
  return g;
}

KernelGraph gemm_softmax(int64_t, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {8, 2048}, t);
  TensorRef w = g.input("W", {2048, 32000}, t);
  TensorRef logits = node(g, "logits", ir::MatmulOp{}, {x, w});
  finish(g, node(g, "out", ir::SoftmaxOp{.dim = -1}, {logits}));
  return g;
}

KernelGraph gemm_layernorm(int64_t, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {16, kHidden}, t);
  TensorRef w = g.input("W", {kHidden, kHidden}, t);
  TensorRef proj = node(g, "proj", ir::MatmulOp{}, {x, w});
  finish(g, node(g, "out", ir::LayerNormOp{.normalized_shape = {kHidden}}, {proj}));
  return g;
}

KernelGraph llama_mlp_block(int64_t bs, DType t) {
  KernelGraph g;
  TensorRef x = g.input("X", {bs, kHidden}, t);
  TensorRef gain = g.input("G", {kHidden}, t);
  TensorRef w_gate_up = g.input("Wgu", {kHidden, 2 * kLlamaIntermediate}, t);
  TensorRef w_down = g.input("Wd", {kLlamaIntermediate, kHidden}, t);
  TensorRef normed = node(
      g, "normed", ir::RmsNormOp{.normalized_shape = {kHidden}, .has_weight = true}, {x, gain});
  TensorRef gate_up = node(g, "gate_up", ir::MatmulOp{}, {normed, w_gate_up});
  std::vector<TensorRef> parts =
      g.add_node(ir::SplitOp{.dim = -1, .sizes = {kLlamaIntermediate, kLlamaIntermediate}},
                 {gate_up}, "split");
  TensorRef gate = node(g, "gate", ir::UnaryOp{ir::UnaryFn::silu}, {parts.at(0)});
  TensorRef hidden = node(g, "hidden", ir::BinaryOp{ir::BinaryFn::mul}, {gate, parts.at(1)});
  TensorRef down = node(g, "down", ir::MatmulOp{}, {hidden, w_down});
  finish(g, node(g, "out", ir::BinaryOp{ir::BinaryFn::add}, {down, x}));
  return g;
}

struct Workload {
  WorkloadInfo info;
  KernelGraph (*build)(int64_t bs, DType dtype);
};

const std::vector<Workload>& table() {
  static const std::vector<Workload> workloads = {
      {.info = {.name = "rmsnorm_linear",
                .program =
                    "X[2*bs,4096] -> rms_norm([4096], weight G[4096]) -> matmul W[4096,6144]",
                .has_batch = true,
                .input_scales = {{"W", 1.0f / 64}}},
       .build = rmsnorm_linear},
      {.info = {.name = "gated_mlp",
                .program = "X[8*bs,4096]; silu(X@W1) * (X@W2), W1,W2 [4096,4096]",
                .has_batch = true,
                .input_scales = {{"W1", 1.0f / 64}, {"W2", 1.0f / 64}}},
       .build = gated_mlp},
      {.info = {.name = "gqa",
                .program = "Q[2*bs,256,64], K[2*bs,64,4096], V[2*bs,4096,64]; E=exp(Q@K); (E / "
                           "sum(E, dim -1, keepdim)) @ V",
                .has_batch = true,
                .input_scales = {{"Q", 1.0f / 8}, {"K", 1.0f / 8}}},
       .build = gqa},
      {.info = {.name = "lora",
                .program = "X[16,256]@W[256,4096] + (X@A[256,16])@B[16,4096]",
                .has_batch = false,
                .input_scales = {{"W", 1.0f / 16}, {"A", 1.0f / 16}, {"B", 1.0f / 4}}},
       .build = lora},
      {.info = {.name = "ntrans",
                .program = "H, X, alpha [8*bs,4096]; rms(X + alpha * (rms(H) + X)), rms = "
                           "rms_norm([4096]) without weight",
                .has_batch = true},
       .build = ntrans},
      {.info = {.name = "gemm_softmax",
                .program = "softmax(X[8,2048]@W[2048,32000], dim -1)",
                .has_batch = false,
                .input_scales = {{"W", 1.0f / 64}}},
       .build = gemm_softmax},
      {.info = {.name = "gemm_layernorm",
                .program = "layer_norm(X[16,4096]@W[4096,4096], [4096]) without weight or bias",
                .has_batch = false,
                .input_scales = {{"W", 1.0f / 64}}},
       .build = gemm_layernorm},
      {.info = {.name = "llama_mlp_block",
                .program = "X[bs,4096] -> rms_norm(weight G[4096]) -> @Wgu[4096,2*14336] -> split "
                           "last dim into g,u of 14336 -> silu(g)*u -> @Wd[14336,4096] + X",
                .has_batch = true,
                .input_scales = {{"Wgu", 1.0f / 64}, {"Wd", 1.0f / 128}}},
       .build = llama_mlp_block},
  };
  return workloads;
}

}  // namespace

const std::vector<WorkloadInfo>& workloads() {
  static const std::vector<WorkloadInfo> infos = [] {
    std::vector<WorkloadInfo> list;
    for (const Workload& w : table()) list.push_back(w.info);
    return list;
  }();
  return infos;
}

KernelGraph build_workload(std::string_view name, int bs, DType dtype) {
  if (bs < 1) fail("workload '{}': bs must be at least 1, got {}", name, bs);
  if (!ir::is_float(dtype))
    fail("workload '{}': dtype must be f32, f16 or bf16, got {}", name, ir::dtype_name(dtype));
  for (const Workload& w : table())
    if (w.info.name == name) return w.build(int64_t(bs), dtype);
  std::vector<std::string_view> names;
  for (const Workload& w : table()) names.push_back(w.info.name);
  fail("unknown workload '{}'; known workloads: {}", name, fmt::join(names, ", "));
}

std::vector<ir::HostTensor> random_inputs(const WorkloadInfo& w, const KernelGraph& graph,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> inputs;
  for (TensorRef t : graph.inputs()) {
    float scale = 1.0f;
    const std::string& name = graph.node(t.node).name;
    for (const auto& [input, factor] : w.input_scales)
      if (input == name) scale = factor;
    inputs.emplace_back(graph.type(t));
    ir::fill_random(inputs.back(), rng, -scale, scale);
  }
  return inputs;
}

}  // namespace yirage::suite
