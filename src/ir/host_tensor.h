// A tensor's value in host memory: its type and its bytes, row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ir/kernel_graph.h"

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

// splitmix64 (Steele, Lea and Flood): random bits for test and tuning inputs, seeded by one draw of
// a std::mt19937_64. Filling full-shape inputs drew billions of values, and one mt19937_64 draw per
// value (with std::uniform_*_distribution on top) was a quarter of those tests' time; this is
// several times faster, and its statistical quality is more than inputs need.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Fills float tensors with values uniform in [lo, hi), rounded to the dtype, i32 tensors with
// integers uniform in [0, int_bound), and i8/u8 tensors (quantized weight blocks) with bytes in
// [0, 0x3B], which read as finite block scales.
void fill_random(HostTensor& t, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f,
                 int32_t int_bound = 1);

// Fills every byte with 0xFF (NaN for every float dtype) so unwritten elements show.
void poison(HostTensor& t);

}  // namespace yirage::ir
