// Small helpers that several test files share: catching the one-line yirage::Error a call
// throws, and seeded random inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "support/error.h"

namespace yirage::test_util {

// The message of the yirage::Error that `action` throws, or "(no error)" when it throws none.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// One random tensor per graph input, as ir::fill_random draws it; the same for the same seed.
inline std::vector<ir::HostTensor> random_inputs(const ir::KernelGraph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef input : graph.inputs()) {
    inputs.emplace_back(graph.type(input));
    ir::fill_random(inputs.back(), rng);
  }
  return inputs;
}

// `n` floats drawn from a normal distribution of standard deviation `scale`; the same for the same
// seed.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = scale * normal(rng);
  return v;
}

}  // namespace yirage::test_util
