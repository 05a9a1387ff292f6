// Index arithmetic shared by the executors and the fingerprinter (internal to src/verify):
// row-major ravel/unravel, NumPy broadcast reads, a tensor viewed around one axis, the walk over a
// block grid, and where a block's tile sits in the tensor an iterator reads or a saver writes. Each
// executor meaning the same thing by an index is what lets their results be compared element by
// element.
#pragma once

#include <array>
#include <cstdint>

#include "ir/block_graph.h"
#include "ir/shape.h"

namespace yirage::verify {

using BlockCoord = std::array<int64_t, ir::kGridAxes>;

// Row-major flat index -> coordinates.
inline ir::Dims unravel(int64_t index, const ir::Dims& dims) {
  ir::Dims coords(dims.size());
  for (size_t j = dims.size(); j-- > 0;) {
    coords[j] = index % dims[j];
    index /= dims[j];
  }
  return coords;
}

// Coordinates -> row-major flat index.
inline int64_t ravel(const ir::Dims& coords, const ir::Dims& dims) {
  int64_t index = 0;
  for (size_t j = 0; j < dims.size(); ++j) index = index * dims[j] + coords[j];
  return index;
}

// The flat index into a tensor of shape `dims` that NumPy broadcasting reads for result
// coordinates `coords`: dims align at the right, and a dim of extent 1 is read at index 0.
inline int64_t broadcast_index(const ir::Dims& coords, const ir::Dims& dims) {
  const size_t lead = coords.size() - dims.size();
  int64_t index = 0;
  for (size_t j = 0; j < dims.size(); ++j)
    index = index * dims[j] + (dims[j] == 1 ? 0 : coords[lead + j]);
  return index;
}

using ir::AxisView;

// Calls run(block) for every block of the graph's grid, x varying fastest.
template <typename Run>
void for_each_block(const ir::BlockGraph& graph, Run&& run) {
  const auto& extent = graph.grid().extent;
  for (int64_t z = 0; z < extent[2]; ++z)
    for (int64_t y = 0; y < extent[1]; ++y)
      for (int64_t x = 0; x < extent[0]; ++x) run(BlockCoord{x, y, z});
}

// Calls run(whole_index, window_index, length) for each row of a `window` placed at `offset`
// inside a row-major tensor of shape `whole`: the window's elements along its last dim are
// contiguous in both, so tiles move a row at a time instead of an index computation each.
template <typename Run>
void for_each_window_row(const ir::Dims& whole, const ir::Dims& window, const ir::Dims& offset,
                         Run&& run) {
  const size_t rank = window.size();
  if (rank == 0) return run(int64_t(0), int64_t(0), int64_t(1));
  const int64_t length = window.back();
  if (length == 0) return;
  const ir::Dims strides = ir::row_major_strides(whole);
  int64_t base = 0;
  for (size_t j = 0; j < rank; ++j) base += offset[j] * strides[j];
  const int64_t rows = ir::num_elements(window) / length;
  ir::Dims coord(rank, 0);
  for (int64_t row = 0; row < rows; ++row) {
    run(base, row * length, length);
    for (size_t j = rank - 1; j-- > 0;) {  // the next row: an odometer over the leading dims
      base += strides[j];
      if (++coord[j] < window[j]) break;
      base -= strides[j] * window[j];
      coord[j] = 0;
    }
  }
}

// Where the tile an iterator yields starts in its operand, per dim (ir::iterator_steps).
inline ir::Dims iterator_tile_offset(const ir::InputIteratorOp& it, const ir::Dims& tile,
                                     const BlockCoord& block, int64_t forloop_range,
                                     int64_t iteration) {
  const ir::IteratorSteps steps = ir::iterator_steps(it, tile, forloop_range);
  ir::Dims offset(tile.size(), 0);
  for (int a = 0; a < ir::kGridAxes; ++a)
    if (it.imap[size_t(a)] != ir::kReplicate)
      offset[size_t(it.imap[size_t(a)])] += block[size_t(a)] * steps.block[size_t(a)];
  if (it.fmap != ir::kReplicate) offset[size_t(it.fmap)] += iteration * steps.loop;
  return offset;
}

// Where a block's tile goes in the output a saver writes: block b along an axis mapped to dim d
// writes chunk b of it.
inline ir::Dims saver_tile_offset(const ir::AxisMap& omap, const ir::Dims& tile,
                                  const BlockCoord& block) {
  ir::Dims offset(tile.size(), 0);
  for (int a = 0; a < ir::kGridAxes; ++a) {
    const int d = omap[size_t(a)];
    if (d != ir::kReplicate) offset[size_t(d)] = block[size_t(a)] * tile[size_t(d)];
  }
  return offset;
}

}  // namespace yirage::verify
