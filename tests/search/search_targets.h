// The search targets of docs/suite.md at small shapes, built like src/suite builds them, and the
// device descriptions the search tests run under.
#pragma once

#include <string>

#include "backend/backend.h"
#include "ir/ir.h"

namespace yirage::search::testing {

using ir::DType;
using ir::KernelGraph;
using ir::TensorRef;

// Every name small_target() knows.
inline constexpr const char* kTargetNames[] = {
    "rmsnorm_linear", "gated_mlp", "gemm_layernorm", "gqa", "lora", "ntrans", "gemm_softmax"};

inline TensorRef named(KernelGraph& g, std::string name, ir::Op op, std::vector<TensorRef> in) {
  return g.add_node(std::move(op), std::move(in), std::move(name)).at(0);
}

inline KernelGraph small_target(const std::string& name, DType t = DType::f32) {
  KernelGraph g;
  if (name == "rmsnorm_linear") {
    auto x = g.input("X", {4, 64}, t);
    auto gain = g.input("G", {64}, t);
    auto w = g.input("W", {64, 48}, t);
    auto normed =
        named(g, "normed", ir::RmsNormOp{.normalized_shape = {64}, .has_weight = true}, {x, gain});
    g.mark_output(named(g, "out", ir::MatmulOp{}, {normed, w}), "out");
  } else if (name == "gated_mlp") {
    auto x = g.input("X", {8, 32}, t);
    auto w1 = g.input("W1", {32, 32}, t);
    auto w2 = g.input("W2", {32, 32}, t);
    auto gate = named(g, "gate", ir::UnaryOp{ir::UnaryFn::silu},
                      {named(g, "gate_proj", ir::MatmulOp{}, {x, w1})});
    auto up = named(g, "up", ir::MatmulOp{}, {x, w2});
    g.mark_output(named(g, "out", ir::BinaryOp{ir::BinaryFn::mul}, {gate, up}), "out");
  } else if (name == "gqa") {
    auto q = g.input("Q", {2, 16, 8}, t);
    auto k = g.input("K", {2, 8, 32}, t);
    auto v = g.input("V", {2, 32, 8}, t);
    auto e = named(g, "exp_scores", ir::UnaryOp{ir::UnaryFn::exp},
                   {named(g, "scores", ir::MatmulOp{}, {q, k})});
    auto sum = named(g, "row_sum", ir::ReduceOp{ir::ReduceFn::sum, -1, true}, {e});
    auto probs = named(g, "probs", ir::BinaryOp{ir::BinaryFn::div}, {e, sum});
    g.mark_output(named(g, "out", ir::MatmulOp{}, {probs, v}), "out");
  } else if (name == "lora") {
    auto x = g.input("X", {16, 32}, t);
    auto w = g.input("W", {32, 64}, t);
    auto a = g.input("A", {32, 8}, t);
    auto b = g.input("B", {8, 64}, t);
    auto base = named(g, "base", ir::MatmulOp{}, {x, w});
    auto delta = named(g, "delta", ir::MatmulOp{}, {named(g, "down", ir::MatmulOp{}, {x, a}), b});
    g.mark_output(named(g, "out", ir::BinaryOp{ir::BinaryFn::add}, {base, delta}), "out");
  } else if (name == "ntrans") {
    auto h = g.input("H", {8, 32}, t);
    auto x = g.input("X", {8, 32}, t);
    auto alpha = g.input("alpha", {8, 32}, t);
    ir::RmsNormOp rms{.normalized_shape = {32}};
    auto hn = named(g, "h_normed", rms, {h});
    auto hx = named(g, "h_plus_x", ir::BinaryOp{ir::BinaryFn::add}, {hn, x});
    auto scaled = named(g, "scaled", ir::BinaryOp{ir::BinaryFn::mul}, {alpha, hx});
    auto residual = named(g, "residual", ir::BinaryOp{ir::BinaryFn::add}, {x, scaled});
    g.mark_output(named(g, "out", rms, {residual}), "out");
  } else if (name == "gemm_softmax") {
    auto x = g.input("X", {8, 32}, t);
    auto w = g.input("W", {32, 64}, t);
    g.mark_output(
        named(g, "out", ir::SoftmaxOp{.dim = -1}, {named(g, "logits", ir::MatmulOp{}, {x, w})}),
        "out");
  } else if (name == "gemm_layernorm") {
    auto x = g.input("X", {16, 32}, t);
    auto w = g.input("W", {32, 32}, t);
    g.mark_output(named(g, "out", ir::LayerNormOp{.normalized_shape = {32}},
                        {named(g, "proj", ir::MatmulOp{}, {x, w})}),
                  "out");
  }
  return g;
}

// A description shaped like a data-centre GPU's: shared memory per block, many SMs.
inline backend::DeviceDescription cuda_like_device() {
  backend::DeviceDescription d;
  d.name = "CUDA-like test GPU";
  d.fingerprint = "test-gpu";
  d.capabilities = {{"search",
                     {{"max_tile_bytes_in_loop", 114 * 1024},
                      {"max_tile_bytes_total", 228 * 1024},
                      {"max_grid_blocks", 132 * 64},
                      {"parallel_units", 132},
                      {"bytes_per_second", 3.3e12},
                      {"flops_per_second", 2.6e14},
                      {"launch_seconds", 4e-6}}}};
  return d;
}

// A CPU description with this machine's shape but fixed numbers, so results do not depend on
// the host.
inline backend::DeviceDescription cpu_like_device() {
  backend::DeviceDescription d;
  d.name = "CPU-like test host";
  d.fingerprint = "test-cpu";
  d.capabilities = {{"search",
                     {{"max_tile_bytes_in_loop", 1 << 20},
                      {"max_tile_bytes_total", 2 << 20},
                      {"max_grid_blocks", 2 * 4096},
                      {"parallel_units", 2},
                      {"bytes_per_second", 2e10},
                      {"flops_per_second", 8e10},
                      {"launch_seconds", 2e-6}}}};
  return d;
}

}  // namespace yirage::search::testing
