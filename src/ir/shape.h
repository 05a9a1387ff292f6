// Tensor shapes: up to four dims, row-major, with NumPy broadcasting.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace yirage::ir {

inline constexpr int kMaxRank = 4;

using Dims = std::vector<int64_t>;

// "[2, 4096]"; used in every error message that names a shape.
std::string format_dims(const Dims& dims);

// The most elements one tensor may hold: 2^40, far past any real model, and small enough that
// element and byte counts never overflow int64.
inline constexpr int64_t kMaxElements = int64_t(1) << 40;

int64_t num_elements(const Dims& dims);

// Whether every dim is >= 1 and the element count is at most kMaxElements, computed without
// overflow.
bool fits_element_limit(const Dims& dims);

// Row-major strides in elements.
Dims row_major_strides(const Dims& dims);

// NumPy broadcasting of two shapes; nullopt when they are incompatible.
std::optional<Dims> broadcast_dims(const Dims& a, const Dims& b);

// Turns a possibly negative axis into 0..rank-1; nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);

// A tensor seen as [outer, extent, inner] around one axis. Dropping or keeping that axis as 1
// leaves `outer` and `inner` alone, so the same view addresses a reduction's result.
struct AxisView {
  int64_t outer = 1, extent = 1, inner = 1;

  AxisView(const Dims& dims, int axis) {
    for (int j = 0; j < axis; ++j) outer *= dims[size_t(j)];
    extent = dims[size_t(axis)];
    for (size_t j = size_t(axis) + 1; j < dims.size(); ++j) inner *= dims[j];
  }
  int64_t index(int64_t o, int64_t k, int64_t i) const { return (o * extent + k) * inner + i; }
};

}  // namespace yirage::ir
