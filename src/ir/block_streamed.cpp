// Which tiles a block streams instead of holding (ir::StreamedWeights) or keeps in registers
// (ir::RegisterTiles), and what the memory limits count with them left out. The rule is the cuda
// backend's (codegen_block_stream.cpp streams_b and register_streamable), stated on the block graph
// so that the search's tile limits admit the bodies the backend runs without holding their weights,
// and no others.
#include <algorithm>

#include "ir/block_graph.h"

namespace yirage::ir {

namespace {

bool is_16bit(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

}  // namespace

bool BlockGraph::streams(int32_t id, const StreamedWeights& s, bool pending) const {
  return streamed_nodes(s, pending).at(size_t(id));
}

// One pass over the nodes' inputs finds every node's readers; then each iterator is held to the
// rule of streams() (block_graph.h).
std::vector<bool> BlockGraph::streamed_nodes(const StreamedWeights& s, bool pending) const {
  std::vector<bool> streamed(nodes_.size(), false);
  if (s.max_rows <= 0 || (s.max_blocks > 0 && grid_.blocks() > s.max_blocks)) return streamed;
  std::vector<std::vector<int32_t>> readers(nodes_.size());
  for (size_t id = 0; id < nodes_.size(); ++id)
    for (int32_t in : nodes_[id].inputs) readers[size_t(in)].push_back(int32_t(id));
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const auto* it = std::get_if<InputIteratorOp>(&nodes_[id].op);
    if (!it || it->fmap != 0) continue;
    const TensorType& operand = operands_.at(size_t(it->operand));
    const Dims& tile = nodes_[id].tile.dims;
    if (operand.dims.size() != 2 || !is_16bit(operand.dtype) || tile.size() != 2 ||
        tile[0] % s.k_multiple != 0 ||
        std::find(s.column_widths.begin(), s.column_widths.end(), tile[1]) == s.column_widths.end())
      continue;
    if (readers[id].empty()) {
      streamed[id] = pending;
      continue;
    }
    if (readers[id].size() != 1) continue;
    const int32_t product = readers[id][0];
    const BlockNode& matmul = nodes_[size_t(product)];
    if (!std::holds_alternative<MatmulOp>(matmul.op) ||
        phases_[size_t(product)] != BlockPhase::in_loop || matmul.inputs.at(1) != int32_t(id) ||
        matmul.inputs.at(0) == int32_t(id) || matmul.tile.dims.size() != 2 ||
        matmul.tile.dims[0] > s.max_rows || staged_a_bytes(matmul) > s.max_staged_bytes)
      continue;
    const std::vector<int32_t>& sums = readers[size_t(product)];
    if (sums.empty()) {
      streamed[id] = pending;
      continue;
    }
    const auto* acc = std::get_if<AccumulatorOp>(&nodes_[size_t(sums[0])].op);
    streamed[id] = sums.size() == 1 && acc && acc->fn == AccumFn::sum;
  }
  return streamed;
}

int64_t BlockGraph::staged_a_bytes(const BlockNode& matmul) const {
  const Dims& a = nodes_.at(size_t(matmul.inputs.at(0))).tile.dims;
  return a.size() == 2 ? a[0] * a[1] * forloop_range_ * 2 : 0;
}

// Products that share A share its staged copy.
int64_t BlockGraph::staged_bytes(const std::vector<bool>& streamed) const {
  int64_t bytes = 0;
  std::vector<int32_t> staged;
  for (const BlockNode& matmul : nodes_) {
    if (!std::holds_alternative<MatmulOp>(matmul.op) || !streamed[size_t(matmul.inputs.at(1))] ||
        std::count(staged.begin(), staged.end(), matmul.inputs[0]) > 0)
      continue;
    staged.push_back(matmul.inputs[0]);
    bytes += staged_a_bytes(matmul);
  }
  return bytes;
}

int64_t BlockGraph::staged_bytes(const StreamedWeights& s, bool pending) const {
  return staged_bytes(streamed_nodes(s, pending));
}

int64_t BlockGraph::in_loop_bytes(const StreamedWeights& s, bool pending) const {
  const std::vector<bool> streamed = streamed_nodes(s, pending);
  int64_t bytes = 0;
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (phases_[id] == BlockPhase::in_loop && !streamed[id]) bytes += tile_bytes(int32_t(id));
  return bytes;
}

int64_t BlockGraph::total_bytes(const StreamedWeights& s, bool pending) const {
  const std::vector<bool> streamed = streamed_nodes(s, pending);
  int64_t bytes = 0;
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (!streamed[id]) bytes += tile_bytes(int32_t(id));
  return bytes;
}

bool BlockGraph::in_registers(int32_t id, const RegisterTiles& r) const {
  return register_nodes(r).at(size_t(id));
}

// One pass over the nodes' inputs counts every node's readers (and keeps the last); then each
// node is held to the rules of RegisterTiles (block_graph.h).
std::vector<bool> BlockGraph::register_nodes(const RegisterTiles& r) const {
  std::vector<bool> kept(nodes_.size(), false);
  if (!r.single_use_elementwise && !r.summed_into_accumulator) return kept;
  std::vector<int> readers(nodes_.size(), 0);
  std::vector<int32_t> reader(nodes_.size(), -1);
  for (size_t other = 0; other < nodes_.size(); ++other)
    for (int32_t in : nodes_[other].inputs) {
      ++readers[size_t(in)];
      reader[size_t(in)] = int32_t(other);
    }
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (readers[id] != 1) continue;
    const BlockOp& op = nodes_[id].op;
    const size_t by = size_t(reader[id]);
    if (r.single_use_elementwise &&
        (std::holds_alternative<UnaryOp>(op) || std::holds_alternative<BinaryOp>(op))) {
      kept[id] = phases_[id] == phases_[by];
      continue;
    }
    if (!r.summed_into_accumulator || phases_[id] != BlockPhase::in_loop) continue;
    const auto* reduce = std::get_if<ReduceOp>(&op);
    const bool sums = std::holds_alternative<MatmulOp>(op) ||
                      (reduce && (reduce->fn == ReduceFn::sum || reduce->fn == ReduceFn::mean));
    const auto* acc = std::get_if<AccumulatorOp>(&nodes_[by].op);
    kept[id] = sums && acc &&
               (acc->fn == AccumFn::sum || acc->fn == AccumFn::mean || acc->fn == AccumFn::rms);
  }
  return kept;
}

BlockGraph::TileOverrun BlockGraph::tile_overrun(const BlockLimits& limits, bool pending) const {
  const std::vector<bool> streamed = streamed_nodes(limits.streamed, pending);
  const std::vector<bool> in_registers = register_nodes(limits.in_registers);
  const int64_t extra_stages = pipeline_buffers(limits.pipeline_stages, forloop_range_) - 1;
  int64_t in_loop = 0, held = 0;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (streamed[id] || in_registers[id]) continue;
    const int64_t bytes = tile_bytes(int32_t(id));
    held += bytes;
    if (phases_[id] == BlockPhase::in_loop) in_loop += bytes;
    const auto* it = std::get_if<InputIteratorOp>(&nodes_[id].op);
    if (it && it->fmap != kReplicate) held += extra_stages * bytes;
  }
  using Kind = TileOverrun::Kind;
  if (limits.max_tile_bytes_in_loop > 0 && in_loop > limits.max_tile_bytes_in_loop)
    return {Kind::in_loop, in_loop, limits.max_tile_bytes_in_loop};
  const int64_t staged = staged_bytes(streamed);
  if (staged > limits.streamed.max_staged_bytes)
    return {Kind::staged, staged, limits.streamed.max_staged_bytes};
  if (limits.max_tile_bytes_total > 0 && held + staged > limits.max_tile_bytes_total)
    return {Kind::total, held + staged, limits.max_tile_bytes_total};
  return {};
}

}  // namespace yirage::ir
