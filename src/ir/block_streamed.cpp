// Which tiles a block streams instead of holding (ir::StreamedWeights), and what the memory
// limits count with them left out. The rule is the cuda backend's (codegen_block_stream.cpp
// streams_b and register_streamable), stated on the block graph so that the search's tile limits
// admit the bodies the backend runs without holding their weights, and no others.
#include <algorithm>

#include "ir/block_graph.h"

namespace yirage::ir {

namespace {

bool is_16bit(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

}  // namespace

bool BlockGraph::streams(int32_t id, const StreamedWeights& s, bool pending) const {
  const BlockNode& node = nodes_.at(size_t(id));
  const auto* it = std::get_if<InputIteratorOp>(&node.op);
  if (s.max_rows <= 0 || !it || it->fmap != 0) return false;
  if (s.max_blocks > 0 && grid_.blocks() > s.max_blocks) return false;
  const TensorType& operand = operands_.at(size_t(it->operand));
  const Dims& tile = node.tile.dims;
  if (operand.dims.size() != 2 || !is_16bit(operand.dtype) || tile.size() != 2 ||
      tile[0] % s.k_multiple != 0 ||
      std::find(s.column_widths.begin(), s.column_widths.end(), tile[1]) == s.column_widths.end())
    return false;
  std::vector<int32_t> readers;
  for (size_t other = 0; other < nodes_.size(); ++other)
    for (int32_t in : nodes_[other].inputs)
      if (in == id) readers.push_back(int32_t(other));
  if (readers.empty()) return pending;
  if (readers.size() != 1) return false;
  const int32_t product = readers[0];
  const BlockNode& matmul = nodes_[size_t(product)];
  if (!std::holds_alternative<MatmulOp>(matmul.op) || staged_a_bytes(matmul) > s.max_staged_bytes ||
      phases_[size_t(product)] != BlockPhase::in_loop || matmul.inputs.at(1) != id ||
      matmul.inputs.at(0) == id || matmul.tile.dims.size() != 2 || matmul.tile.dims[0] > s.max_rows)
    return false;
  int readers_of_product = 0;
  bool summed = false;
  for (const BlockNode& other : nodes_)
    for (int32_t in : other.inputs)
      if (in == product) {
        ++readers_of_product;
        const auto* acc = std::get_if<AccumulatorOp>(&other.op);
        summed = acc && acc->fn == AccumFn::sum;
      }
  return readers_of_product == 0 ? pending : readers_of_product == 1 && summed;
}

int64_t BlockGraph::staged_a_bytes(const BlockNode& matmul) const {
  const Dims& a = nodes_.at(size_t(matmul.inputs.at(0))).tile.dims;
  return a.size() == 2 ? a[0] * a[1] * forloop_range_ * 2 : 0;
}

// Products that share A share its staged copy.
int64_t BlockGraph::staged_bytes(const StreamedWeights& s, bool pending) const {
  int64_t bytes = 0;
  std::vector<int32_t> staged;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (!std::holds_alternative<InputIteratorOp>(nodes_[id].op) ||
        !streams(int32_t(id), s, pending))
      continue;
    for (const BlockNode& matmul : nodes_)
      if (std::holds_alternative<MatmulOp>(matmul.op) && matmul.inputs.at(1) == int32_t(id) &&
          std::count(staged.begin(), staged.end(), matmul.inputs[0]) == 0) {
        staged.push_back(matmul.inputs[0]);
        bytes += staged_a_bytes(matmul);
      }
  }
  return bytes;
}

int64_t BlockGraph::in_loop_bytes(const StreamedWeights& s, bool pending) const {
  int64_t bytes = 0;
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (phases_[id] == BlockPhase::in_loop && !streams(int32_t(id), s, pending))
      bytes += tile_bytes(int32_t(id));
  return bytes;
}

int64_t BlockGraph::total_bytes(const StreamedWeights& s, bool pending) const {
  int64_t bytes = 0;
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (!streams(int32_t(id), s, pending)) bytes += tile_bytes(int32_t(id));
  return bytes;
}

}  // namespace yirage::ir
