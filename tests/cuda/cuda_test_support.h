// What the CUDA GPU tests share: the backend or a skip (a failure where YIRAGE_REQUIRE_CUDA=1,
// as bench/gpu.sh sets), fresh seeds, and the comparison of a graph run on the GPU with the
// reference executor on random inputs, by relative L2 error with the output dtype's tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "ir/host_tensor.h"
#include "ir/quant.h"
#include "verify/verify.h"

namespace yirage::backend::cuda_testing {

inline Backend* cuda_or_skip() {
  for (const BackendInfo& info : describe_backends()) {
    if (info.name != "cuda") continue;
    if (info.availability.available) return &get_backend("cuda");
    const char* require = std::getenv("YIRAGE_REQUIRE_CUDA");
    if (require && std::string(require) == "1")
      ADD_FAILURE() << "cuda is required here but unavailable: " << info.availability.reason;
    return nullptr;
  }
  return nullptr;
}

inline uint64_t fresh_seed() {
  return std::random_device{}();
}

// ‖actual − expected‖ / ‖expected‖ over `size` element pairs that `at(i)` returns; a non-finite
// difference counts as huge, so a NaN or an infinity on either side shows.
template <typename At>
double relative_l2_over(size_t size, At&& at) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < size; ++i) {
    const auto [a, e] = at(i);
    const double d = double(a) - double(e);
    diff += std::isfinite(d) ? d * d : 1e30;
    norm += double(e) * double(e);
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Of two tensors (a kernel's output and the reference's).
inline double relative_l2(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  return relative_l2_over(size_t(expected.size()), [&](size_t i) {
    return std::pair{actual.get(int64_t(i)), expected.get(int64_t(i))};
  });
}

// Of two float arrays (an engine's logits or hidden states).
inline double relative_l2(const std::vector<float>& actual, const std::vector<float>& expected) {
  return relative_l2_over(expected.size(), [&](size_t i) {
    return std::pair{actual[i], expected[i]};
  });
}

// N rows of K/32 blocks of `format`: random quants, scales uniform in [0.001, 0.02] (a trained
// model's range) rounded to f16, q4_1's minimum in [-0.1, 0.1].
// For f16 and bf16, weights uniform in [-0.05, 0.05] as 16-bit floats.
inline ir::HostTensor quant_weight(ir::QuantFormat format, int64_t n, int64_t k,
                                   std::mt19937_64& rng) {
  const int64_t row_bytes = k / 32 * ir::quant_block_bytes(format);
  ir::HostTensor w(ir::TensorType{ir::DType::u8, {n, row_bytes}});
  if (ir::quant_reads_float_activations(format)) {
    std::uniform_real_distribution<float> value(-0.05f, 0.05f);
    const ir::DType t = format == ir::QuantFormat::bf16 ? ir::DType::bf16 : ir::DType::f16;
    for (int64_t i = 0; i < n * k; ++i) {
      const uint16_t bits =
          t == ir::DType::bf16 ? ir::f32_to_bf16(value(rng)) : ir::f32_to_f16(value(rng));
      std::memcpy(w.bytes.data() + 2 * i, &bits, 2);
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), minimum(-0.1f, 0.1f);
  for (auto& b : w.bytes) b = std::byte(byte(rng));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      std::byte* block = w.bytes.data() + r * row_bytes + b * ir::quant_block_bytes(format);
      const uint16_t d = ir::f32_to_f16(scale(rng));
      std::memcpy(block, &d, 2);
      if (format == ir::QuantFormat::q4_1) {
        const uint16_t m = ir::f32_to_f16(minimum(rng));
        std::memcpy(block + 2, &m, 2);
      }
    }
  return w;
}

// Relative L2 error and NaN count against the reference, with the dtype's tolerance. Inputs are
// uniform in [-1, 1], or [-r, r] for an input `ranges` names.
inline void expect_matches(const ir::KernelGraph& graph, Backend& cuda, uint64_t seed,
                           const std::string& what,
                           const std::map<std::string, float>& ranges = {}) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef in : graph.inputs()) {
    const auto range = ranges.find(graph.node(in.node).name);
    const float r = range == ranges.end() ? 1.0f : range->second;
    inputs.emplace_back(graph.type(in));
    ir::fill_random(inputs.back(), rng, -r, r, 4);
  }
  const std::vector<ir::HostTensor> expected = verify::run_reference(graph, inputs);
  const std::vector<ir::HostTensor> actual = run_on(cuda, graph, inputs);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t o = 0; o < expected.size(); ++o) {
    const ir::DType t = expected[o].type.dtype;
    const double tol = t == ir::DType::f32 ? 1e-5 : t == ir::DType::f16 ? 2e-3 : 1.5e-2;
    int64_t bad = 0;
    for (int64_t i = 0; i < expected[o].size(); ++i)
      if (!std::isfinite(actual[o].get(i))) ++bad;
    EXPECT_EQ(bad, 0) << what << " output " << o << ": elements not finite (unwritten?)";
    EXPECT_LE(relative_l2(actual[o], expected[o]), tol)
        << what << " output " << o << " (" << ir::dtype_name(t) << "), seed " << seed;
  }
}

}  // namespace yirage::backend::cuda_testing

// Declares `var`, the cuda backend, or skips the test.
#define CUDA_OR_SKIP(var)                                                        \
  yirage::backend::Backend* var = yirage::backend::cuda_testing::cuda_or_skip(); \
  if (!var) GTEST_SKIP() << "no usable CUDA GPU on this machine";                \
  static_assert(true)
