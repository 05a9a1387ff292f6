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
// the same elements.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "support/error.h"
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

class BlockRunner {
 public:
  BlockRunner(const BlockGraph& graph, const std::vector<const HostTensor*>& operands)
      : graph_(graph), operands_(operands), output_of_(graph.nodes().size(), -1) {
    const std::vector<BlockNode>& nodes = graph.nodes();
    kernels_.resize(nodes.size());
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
      writes_.emplace_back(size_t(ir::num_elements(type.dims)), 0);
    }
    int32_t next = 0;
    for (size_t id = 0; id < nodes.size(); ++id)
      if (graph.phase(int32_t(id)) == BlockPhase::saver) output_of_[id] = next++;
  }

  void run_block(const BlockCoord& block) {
    const std::vector<BlockNode>& nodes = graph_.nodes();
    std::vector<HostTensor> values(nodes.size());
    std::vector<std::optional<Accumulator>> accumulators(nodes.size());
    for (size_t id = 0; id < nodes.size(); ++id)
      if (const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[id].op))
        accumulators[id].emplace(acc->fn, acc->eps, nodes[id].tile, m_tile(nodes[id]));

    for (int64_t iteration = 0; iteration < graph_.forloop_range(); ++iteration) {
      for (size_t id = 0; id < nodes.size(); ++id)
        if (graph_.phase(int32_t(id)) == BlockPhase::in_loop)
          values[id] = in_loop_value(nodes[id], id, values, block, iteration);
      for (size_t id = 0; id < nodes.size(); ++id)
        if (accumulators[id]) {
          const std::vector<int32_t>& in = nodes[id].inputs;
          accumulators[id]->fold(values[size_t(in[0])],
                                 in.size() > 1 ? &values[size_t(in[1])] : nullptr);
        }
    }

    for (size_t id = 0; id < nodes.size(); ++id)
      if (accumulators[id]) values[id] = accumulators[id]->result(graph_.forloop_range());
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (graph_.phase(int32_t(id)) == BlockPhase::saver)
        save(nodes[id], output_of_[id], values[size_t(nodes[id].inputs[0])], block);
      else if (graph_.phase(int32_t(id)) == BlockPhase::post_loop && !accumulators[id])
        values[id] = computed(nodes[id], id, values);
    }
  }

  std::vector<HostTensor> finish() {
    for (size_t o = 0; o < outputs_.size(); ++o)
      for (size_t i = 0; i < writes_[o].size(); ++i)
        if (writes_[o][i] != 1)
          fail(
              "run_block_graph: output {} ({}) element {} was written {} times; every element "
              "must be written exactly once, so the savers' omaps are wrong",
              o, ir::format_type(outputs_[o].type),
              ir::format_dims(unravel(int64_t(i), outputs_[o].type.dims)), writes_[o][i]);
    return std::move(outputs_);
  }

 private:
  const TensorType* m_tile(const BlockNode& node) const {
    return node.inputs.size() > 1 ? &graph_.nodes()[size_t(node.inputs[1])].tile : nullptr;
  }

  HostTensor in_loop_value(const BlockNode& node, size_t id, const std::vector<HostTensor>& values,
                           const BlockCoord& block, int64_t iteration) const {
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&node.op))
      return load(*it, node.tile, block, iteration);
    return computed(node, id, values);
  }

  HostTensor computed(const BlockNode& node, size_t id,
                      const std::vector<HostTensor>& values) const {
    if (const auto* r = std::get_if<ir::ReduceToWidthOp>(&node.op))
      return reduce_to_width(*r, values[size_t(node.inputs[0])], node.tile);
    std::vector<HostTensor> operands;
    for (int32_t in : node.inputs) operands.push_back(values[size_t(in)]);
    return run_reference(*kernels_[id], operands)[0];
  }

  HostTensor load(const ir::InputIteratorOp& it, const TensorType& tile, const BlockCoord& block,
                  int64_t iteration) const {
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

  void save(const BlockNode& node, int32_t output, const HostTensor& tile,
            const BlockCoord& block) {
    const auto& omap = std::get<ir::OutputSaverOp>(node.op).omap;
    HostTensor& out = outputs_[size_t(output)];
    for_each_window_row(out.type.dims, node.tile.dims,
                        saver_tile_offset(omap, node.tile.dims, block),
                        [&](int64_t to, int64_t from, int64_t length) {
                          for (int64_t i = 0; i < length; ++i) {
                            out.set(to + i, tile.get(from + i));
                            ++writes_[size_t(output)][size_t(to + i)];
                          }
                        });
  }

  const BlockGraph& graph_;
  const std::vector<const HostTensor*>& operands_;
  std::vector<std::optional<ir::KernelGraph>> kernels_;  // per node: its shared op, if any
  std::vector<int32_t> output_of_;                       // per node: a saver's output index
  std::vector<HostTensor> outputs_;
  std::vector<std::vector<int64_t>> writes_;  // per output element: how often it was written
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
  BlockRunner runner(graph, operands);
  for_each_block(graph, [&](const BlockCoord& block) { runner.run_block(block); });
  return runner.finish();
}

std::vector<HostTensor> run_block_graph(const BlockGraph& graph,
                                        const std::vector<HostTensor>& operands) {
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& t : operands) pointers.push_back(&t);
  return run_block_graph(graph, pointers);
}

}  // namespace yirage::verify
