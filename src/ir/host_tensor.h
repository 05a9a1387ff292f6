// A tensor's value in host memory: its type and its bytes, row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ir/kernel_graph.h"
#include "ir/splitmix.h"

namespace yirage::ir {

struct HostTensor {
  TensorType type;
  std::vector<std::byte> bytes;

  HostTensor() = default;
  explicit HostTensor(TensorType t);  // zero-filled

  int64_t size() const { return num_elements(type.dims); }
  // Element i widened to float (f32, f16, bf16, and i32/i8/u8 by value conversion).
  float get(int64_t i) const;
  // Stores v rounded to the tensor's dtype (round to nearest even for f16/bf16).
  void set(int64_t i, float v);
  int32_t get_i32(int64_t i) const;
  void set_i32(int64_t i, int32_t v);
  // Every element as a float, in order.
  std::vector<float> to_floats() const;
};

// Fills float tensors with values uniform in [lo, hi), rounded to the dtype, i32 tensors with
// integers uniform in [0, int_bound), and i8/u8 tensors (quantized weight blocks) with bytes in
// [0, 0x3B], which read as finite block scales.
void fill_random(HostTensor& t, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f,
                 int32_t int_bound = 1);

// Where a paged_attention reads its table and positions straight from graph inputs (`inputs` in
// graph.inputs() order), sets them to a valid batch: drawn integers are all 0, and rows that all
// store to one slot are an error. Row r is a sequence of its own whose keys run round the pool
// from a block of its own; rows past what the pool holds are padding (-1).
void make_paged_attention_indices_valid(const KernelGraph& graph, std::vector<HostTensor>& inputs);

// Fills every byte with 0xFF (NaN for every float dtype) so unwritten elements show.
void poison(HostTensor& t);

}  // namespace yirage::ir
