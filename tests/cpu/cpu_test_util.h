// Helpers of the cpu backend tests: a private object cache, per-dtype comparison with the
// reference executor, and the suite's workloads at small shapes.
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "ir/ir.h"
#include "verify/verify.h"

namespace yirage::cpu_test {

// Points YIRAGE_CACHE_DIR at a fresh directory for this test process, before any backend is
// created, so that tests neither read nor fill the user's cache.
inline const std::filesystem::path& private_cache_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "yirage-cpu-test-XXXXXX");
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    setenv("YIRAGE_CACHE_DIR", pattern.c_str(), 1);
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// A tuning-cache file's path in a new, empty folder of this process's cache directory.
inline std::filesystem::path fresh_cache_db(const std::string& name) {
  const std::filesystem::path dir = private_cache_dir() / ("tune-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir / "tuning.sqlite";
}

inline backend::Backend& cpu_backend() {
  private_cache_dir();
  return backend::get_backend("cpu");
}

// Tolerances: both sides round every kernel-level result to its dtype, but the reference
// computes in double and we in f32, so a result may land one unit of the dtype away, and the
// difference can grow through the ops that follow. Errors are measured against the tensor's
// largest magnitude, as matmul sums of mixed signs can be much smaller than their terms.
inline void expect_close(const ir::HostTensor& actual, const ir::HostTensor& expected,
                         const std::string& what) {
  ASSERT_EQ(actual.type, expected.type) << what;
  const ir::DType t = expected.type.dtype;
  const double rtol = t == ir::DType::f32 ? 2e-4 : t == ir::DType::f16 ? 1.5e-2 : 5e-2;
  double scale = 1e-3;
  for (int64_t i = 0; i < expected.size(); ++i)
    if (std::isfinite(expected.get(i))) scale = std::max(scale, double(std::fabs(expected.get(i))));
  int64_t bad = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double a = actual.get(i), e = expected.get(i);
    const bool ok = (std::isnan(e) && std::isnan(a)) || (std::isinf(e) && a == e) ||
                    std::fabs(a - e) <= rtol * (std::fabs(e) + 0.1 * scale);
    if (!ok && ++bad <= 3)
      ADD_FAILURE() << what << " (" << ir::format_type(expected.type) << ") element " << i
                    << ": got " << a << ", expected " << e;
  }
  EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
}

// Random inputs in [-1, 1), scaled per input name; integer inputs in [0, int_bound).
inline std::vector<ir::HostTensor> inputs_for(
    const ir::KernelGraph& g, uint64_t seed, int32_t int_bound = 1,
    const std::vector<std::pair<std::string, float>>& scales = {}) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef in : g.inputs()) {
    inputs.emplace_back(g.type(in));
    float lo = -1.0f, hi = 1.0f;
    const std::string& name = g.node(in.node).name;
    if (name.starts_with("P")) lo = 0.5f, hi = 2.0f;  // positive operands: sqrt, pow, ...
    for (const auto& [n, s] : scales)
      if (n == name) lo *= s, hi *= s;
    ir::fill_random(inputs.back(), rng, lo, hi, int_bound);
  }
  return inputs;
}

// Runs `g` on the cpu backend and on the reference executor and compares every output.
inline void check_against_reference(const ir::KernelGraph& g, uint64_t seed,
                                    const std::string& what, int32_t int_bound = 1,
                                    const std::vector<std::pair<std::string, float>>& scales = {}) {
  const std::vector<ir::HostTensor> inputs = inputs_for(g, seed, int_bound, scales);
  const std::vector<ir::HostTensor> expected = verify::run_reference(g, inputs);
  const std::vector<ir::HostTensor> actual = backend::run_on(cpu_backend(), g, inputs);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    expect_close(actual[i], expected[i], what + " output '" + g.outputs()[i].name + "'");
}

// The eight workloads of suite.cpp with the same programs at small shapes (hidden 64 instead of
// 4096), so that the reference executor checks them in milliseconds.
inline ir::KernelGraph small_workload(const std::string& name, ir::DType t) {
  using ir::BinaryFn;
  using ir::TensorRef;
  constexpr int64_t h = 64, inter = 96;
  ir::KernelGraph g;
  auto node = [&](std::string n, ir::Op op, std::vector<TensorRef> in) {
    return g.add_node(std::move(op), std::move(in), std::move(n)).at(0);
  };
  if (name == "rmsnorm_linear") {
    TensorRef x = g.input("X", {2, h}, t), gain = g.input("G", {h}, t),
              w = g.input("W", {h, 96}, t);
    TensorRef normed =
        node("normed", ir::RmsNormOp{.normalized_shape = {h}, .has_weight = true}, {x, gain});
    g.mark_output(node("out", ir::MatmulOp{}, {normed, w}), "out");
  } else if (name == "gated_mlp") {
    TensorRef x = g.input("X", {8, h}, t), w1 = g.input("W1", {h, h}, t),
              w2 = g.input("W2", {h, h}, t);
    TensorRef gate =
        node("gate", ir::UnaryOp{ir::UnaryFn::silu}, {node("gp", ir::MatmulOp{}, {x, w1})});
    TensorRef up = node("up", ir::MatmulOp{}, {x, w2});
    g.mark_output(node("out", ir::BinaryOp{BinaryFn::mul}, {gate, up}), "out");
  } else if (name == "gqa") {
    TensorRef q = g.input("Q", {2, 32, 16}, t), k = g.input("K", {2, 16, 128}, t),
              v = g.input("V", {2, 128, 16}, t);
    TensorRef e = node("e", ir::UnaryOp{ir::UnaryFn::exp}, {node("s", ir::MatmulOp{}, {q, k})});
    TensorRef sum = node("sum", ir::ReduceOp{.fn = ir::ReduceFn::sum, .dim = -1}, {e});
    TensorRef p = node("p", ir::BinaryOp{BinaryFn::div}, {e, sum});
    g.mark_output(node("out", ir::MatmulOp{}, {p, v}), "out");
  } else if (name == "lora") {
    TensorRef x = g.input("X", {16, 32}, t), w = g.input("W", {32, h}, t),
              a = g.input("A", {32, 4}, t), b = g.input("B", {4, h}, t);
    TensorRef base = node("base", ir::MatmulOp{}, {x, w});
    TensorRef delta = node("delta", ir::MatmulOp{}, {node("down", ir::MatmulOp{}, {x, a}), b});
    g.mark_output(node("out", ir::BinaryOp{BinaryFn::add}, {base, delta}), "out");
  } else if (name == "ntrans") {
    TensorRef hh = g.input("H", {8, h}, t), x = g.input("X", {8, h}, t),
              al = g.input("alpha", {8, h}, t);
    ir::RmsNormOp rms{.normalized_shape = {h}};
    TensorRef hx = node("hx", ir::BinaryOp{BinaryFn::add}, {node("hn", rms, {hh}), x});
    TensorRef res = node("res", ir::BinaryOp{BinaryFn::add},
                         {x, node("sc", ir::BinaryOp{BinaryFn::mul}, {al, hx})});
    g.mark_output(node("out", rms, {res}), "out");
  } else if (name == "gemm_softmax") {
    TensorRef x = g.input("X", {8, 32}, t), w = g.input("W", {32, 200}, t);
    g.mark_output(node("out", ir::SoftmaxOp{.dim = -1}, {node("l", ir::MatmulOp{}, {x, w})}),
                  "out");
  } else if (name == "gemm_layernorm") {
    TensorRef x = g.input("X", {16, h}, t), w = g.input("W", {h, h}, t);
    g.mark_output(
        node("out", ir::LayerNormOp{.normalized_shape = {h}}, {node("p", ir::MatmulOp{}, {x, w})}),
        "out");
  } else if (name == "llama_mlp_block") {
    TensorRef x = g.input("X", {1, h}, t), gain = g.input("G", {h}, t),
              wgu = g.input("Wgu", {h, 2 * inter}, t), wd = g.input("Wd", {inter, h}, t);
    TensorRef normed =
        node("normed", ir::RmsNormOp{.normalized_shape = {h}, .has_weight = true}, {x, gain});
    TensorRef gu = node("gu", ir::MatmulOp{}, {normed, wgu});
    std::vector<TensorRef> parts =
        g.add_node(ir::SplitOp{.dim = -1, .sizes = {inter, inter}}, {gu}, "split");
    TensorRef hidden = node("hidden", ir::BinaryOp{BinaryFn::mul},
                            {node("gate", ir::UnaryOp{ir::UnaryFn::silu}, {parts[0]}), parts[1]});
    g.mark_output(
        node("out", ir::BinaryOp{BinaryFn::add}, {node("down", ir::MatmulOp{}, {hidden, wd}), x}),
        "out");
  } else {
    throw std::runtime_error("unknown workload " + name);
  }
  return g;
}

inline const std::vector<std::string> kWorkloads = {
    "rmsnorm_linear", "gated_mlp",      "gqa", "lora", "ntrans", "gemm_softmax",
    "gemm_layernorm", "llama_mlp_block"};

}  // namespace yirage::cpu_test
