// Literal execution of a block graph: the oracle for fused kernels.
//
// It does what the block graph says, one block and one loop iteration at a time, with no
// scheduling cleverness: iterators copy their tile out of the operand, shared ops run on f32
// tiles, accumulators fold the iterations, post-loop ops run on the folded tiles, and savers copy
// each tile into its place in the output, rounding once to the output's dtype. A shared op runs
// as a one-node kernel graph under run_reference, so a block op means exactly what the kernel op
// means, applied to tiles. Accumulators keep their running values in double.
//
// Outputs start poisoned and every element's writes are counted; anything but exactly one
// write per element is an error, which is what exposes a saver whose omap lets two blocks write
// the same elements. The walk itself is block_walk.h's, which the fingerprint shares.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "support/error.h"
#include "verify/block_walk.h"
#include "verify/indexing.h"
#include "verify/verify.h"

namespace yirage::verify {
namespace {

using ir::AccumFn;
using ir::BlockGraph;
using ir::BlockNode;
using ir::BlockPhase;
using ir::Dims;
using ir::DType;
using ir::HostTensor;
using ir::TensorType;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

TensorType compute_type(const TensorType& tile) {
  return {DType::f32, tile.dims};
}

// A shared block op as a kernel graph of one node over f32 tiles.
ir::KernelGraph single_op_graph(const ir::Op& op, const std::vector<TensorType>& tiles) {
  ir::KernelGraph graph;
  std::vector<ir::TensorRef> operands;
  for (size_t i = 0; i < tiles.size(); ++i)
    operands.push_back(graph.input(fmt::format("in{}", i), tiles[i].dims, DType::f32));
  graph.mark_output(graph.add_node(op, operands)[0]);
  return graph;
}

HostTensor reduce_to_width(const ir::ReduceToWidthOp& op, const HostTensor& x,
                           const TensorType& tile) {
  HostTensor out(compute_type(tile));
  const AxisView in(x.type.dims, op.dim);
  const int64_t run = in.extent / op.width;
  for (int64_t o = 0; o < in.outer; ++o)
    for (int64_t w = 0; w < op.width; ++w)
      for (int64_t i = 0; i < in.inner; ++i) {
        double sum = 0.0;
        for (int64_t k = 0; k < run; ++k) sum += x.get(in.index(o, w * run + k, i));
        out.set((o * op.width + w) * in.inner + i, float(sum));
      }
  return out;
}

// exp(from - to), where a -inf `from` (nothing seen yet) contributes nothing.
double rescale(double from, double to) {
  return from == kNegInf ? 0.0 : std::exp(from - to);
}

// The running state of one accumulator over the iterations of one block.
class Accumulator {
 public:
  Accumulator(AccumFn fn, double eps, const TensorType& tile, const TensorType* m_tile)
      : fn_(fn),
        eps_(eps),
        tile_(tile),
        value_(size_t(ir::num_elements(tile.dims)), fn == AccumFn::max ? kNegInf : 0.0) {
    if (m_tile) running_max_.assign(size_t(ir::num_elements(m_tile->dims)), kNegInf);
  }

  void fold(const HostTensor& t, const HostTensor* m) {
    if (fn_ == AccumFn::rescaled_sum) return fold_rescaled(t, *m);
    for (size_t j = 0; j < value_.size(); ++j) {
      const double v = t.get(int64_t(j));
      if (fn_ != AccumFn::max)
        value_[j] += v;
      else if (v > value_[j] || std::isnan(v))  // a NaN wins and stays, like the reference's max
        value_[j] = v;
    }
  }

  HostTensor result(int64_t iterations) const {
    HostTensor out(compute_type(tile_));
    for (size_t j = 0; j < value_.size(); ++j) {
      double v = value_[j];
      if (fn_ == AccumFn::mean) v /= double(iterations);
      if (fn_ == AccumFn::rms) v = std::sqrt(v / double(iterations) + eps_);
      out.set(int64_t(j), float(v));
    }
    return out;
  }

 private:
  // The online softmax rescale: with M the running max of m, the sum holds
  // Σ exp(m_i - M) · v_i over the iterations so far; a new maximum rescales what is there.
  void fold_rescaled(const HostTensor& v, const HostTensor& m) {
    std::vector<double> new_max = running_max_;
    for (size_t k = 0; k < new_max.size(); ++k) {
      const double mk = m.get(int64_t(k));
      if (mk > new_max[k] || std::isnan(mk)) new_max[k] = mk;
    }
    for (size_t j = 0; j < value_.size(); ++j) {
      const size_t k = size_t(broadcast_index(unravel(int64_t(j), v.type.dims), m.type.dims));
      value_[j] = value_[j] * rescale(running_max_[k], new_max[k]) +
                  v.get(int64_t(j)) * rescale(m.get(int64_t(k)), new_max[k]);
    }
    running_max_ = std::move(new_max);
  }

  AccumFn fn_;
  double eps_;
  TensorType tile_;
  std::vector<double> value_;        // the running sum, or the running max for AccumFn::max
  std::vector<double> running_max_;  // rescaled_sum only: M, in the shape of m
};

// Tiles as host tensors (f32 while computed); the walk is block_walk.h's.
class HostTiles {
 public:
  using Value = HostTensor;
  using Accumulator = verify::Accumulator;

  HostTiles(const BlockGraph& graph, const std::vector<const HostTensor*>& operands)
      : graph_(graph), operands_(operands), kernels_(graph.nodes().size()) {
    const std::vector<BlockNode>& nodes = graph.nodes();
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (std::optional<ir::Op> op = ir::shared_kernel_op(nodes[id].op)) {
        std::vector<TensorType> tiles;
        for (int32_t in : nodes[id].inputs) tiles.push_back(nodes[size_t(in)].tile);
        kernels_[id] = single_op_graph(*op, tiles);
      }
    }
    for (const TensorType& type : graph.output_types()) {
      outputs_.emplace_back(type);
      ir::poison(outputs_.back());
    }
  }

  std::string_view who() const { return "run_block_graph"; }
  void at(int32_t) {}

  Accumulator accumulator(int32_t id) const {
    const BlockNode& n = node(id);
    const auto& acc = std::get<ir::AccumulatorOp>(n.op);
    return Accumulator(acc.fn, acc.eps, n.tile,
                       n.inputs.size() > 1 ? &node(n.inputs[1]).tile : nullptr);
  }
  void fold(Accumulator& acc, const HostTensor& t, const HostTensor* m) const { acc.fold(t, m); }
  HostTensor result(const Accumulator& acc, int64_t iterations) const {
    return acc.result(iterations);
  }

  HostTensor compute(int32_t id, const std::vector<HostTensor>& values) const {
    const BlockNode& n = node(id);
    if (const auto* r = std::get_if<ir::ReduceToWidthOp>(&n.op))
      return reduce_to_width(*r, values[size_t(n.inputs[0])], n.tile);
    std::vector<HostTensor> operands;
    for (int32_t in : n.inputs) operands.push_back(values[size_t(in)]);
    return run_reference(*kernels_[size_t(id)], operands)[0];
  }

  HostTensor load(int32_t id, const BlockCoord& block, int64_t iteration) const {
    const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
    const TensorType& tile = node(id).tile;
    const HostTensor& operand = *operands_[size_t(it.operand)];
    const Dims offset =
        iterator_tile_offset(it, tile.dims, block, graph_.forloop_range(), iteration);
    HostTensor out(compute_type(tile));
    const bool f32 = operand.type.dtype == DType::f32;  // then a row's bytes are its values
    for_each_window_row(operand.type.dims, tile.dims, offset,
                        [&](int64_t from, int64_t to, int64_t length) {
                          if (f32)
                            std::memcpy(out.bytes.data() + size_t(to) * sizeof(float),
                                        operand.bytes.data() + size_t(from) * sizeof(float),
                                        size_t(length) * sizeof(float));
                          else
                            for (int64_t i = 0; i < length; ++i)
                              out.set(to + i, operand.get(from + i));
                        });
    return out;
  }

  void save(int32_t id, size_t output, const HostTensor& tile, const BlockCoord& block) {
    const BlockNode& n = node(id);
    const auto& omap = std::get<ir::OutputSaverOp>(n.op).omap;
    HostTensor& out = outputs_[output];
    for_each_window_row(out.type.dims, n.tile.dims, saver_tile_offset(omap, n.tile.dims, block),
                        [&](int64_t to, int64_t from, int64_t length) {
                          for (int64_t i = 0; i < length; ++i) out.set(to + i, tile.get(from + i));
                        });
  }

  std::vector<HostTensor> take_outputs() { return std::move(outputs_); }

 private:
  const BlockNode& node(int32_t id) const { return graph_.nodes()[size_t(id)]; }

  const BlockGraph& graph_;
  const std::vector<const HostTensor*>& operands_;
  std::vector<std::optional<ir::KernelGraph>> kernels_;  // per node: its shared op, if any
  std::vector<HostTensor> outputs_;
};

void check_operands(const BlockGraph& graph, const std::vector<const HostTensor*>& operands) {
  const std::vector<TensorType>& want = graph.operands();
  if (operands.size() != want.size())
    fail("run_block_graph: the block graph takes {} operand{}, got {}", want.size(),
         want.size() == 1 ? "" : "s", operands.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (operands[i]->type != want[i])
      fail("run_block_graph: operand {}: expected {}, got {}", i, ir::format_type(want[i]),
           ir::format_type(operands[i]->type));
    const size_t need = size_t(ir::num_elements(want[i].dims)) * ir::dtype_size(want[i].dtype);
    if (operands[i]->bytes.size() != need)
      fail("run_block_graph: operand {}: holds {} bytes, but {} takes {}", i,
           operands[i]->bytes.size(), ir::format_type(want[i]), need);
  }
}

}  // namespace

std::vector<HostTensor> run_block_graph(const BlockGraph& graph,
                                        const std::vector<const HostTensor*>& operands) {
  check_operands(graph, operands);
  HostTiles tiles(graph, operands);
  BlockWalk(graph, tiles).run();
  return tiles.take_outputs();
}

std::vector<HostTensor> run_block_graph(const BlockGraph& graph,
                                        const std::vector<HostTensor>& operands) {
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& t : operands) pointers.push_back(&t);
  return run_block_graph(graph, pointers);
}

}  // namespace yirage::verify
