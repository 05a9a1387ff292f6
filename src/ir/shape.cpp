#include "ir/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace yirage::ir {

std::string format_dims(const Dims& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

int64_t num_elements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool fits_element_limit(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > kMaxElements / n) return false;
    n *= d;
  }
  return true;
}

Dims row_major_strides(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

std::optional<Dims> broadcast_dims(const Dims& a, const Dims& b) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the trailing dim; a missing leading dim acts as 1.
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return int(axis < 0 ? axis + rank : axis);
}

}  // namespace yirage::ir
