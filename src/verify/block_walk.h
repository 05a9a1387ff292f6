// What a block graph does, defined once for every domain its tiles take: the literal executor's
// host tensors (block_executor.cpp) and the proof's fingerprints (block_fingerprint.cpp) walk a
// fused kernel by this one definition, and differ only in what a tile's value is. Internal to
// src/verify.
//
// For each block of the grid (x fastest): each loop iteration runs the in-loop nodes in order
// (an iterator reads its window of the operand, a shared op computes from its inputs' tiles),
// then folds each accumulator's input into it; after the loop, in node order, each accumulator
// gives its result, each post-loop op computes, and each saver writes its tile into its window of
// the output. Every output element must be written exactly once over the whole grid, else the
// savers' omaps are wrong and the walk says which element.
//
// A Domain provides:
//   using Value;        a tile's value
//   using Accumulator;  one accumulator's running state over one block's iterations
//   std::string_view who() const;                     names the caller in errors
//   void at(int32_t node);                            before each step of that node
//   Accumulator accumulator(int32_t node);            a fresh one, for a block
//   Value load(int32_t iterator, const BlockCoord&, int64_t iteration);
//   Value compute(int32_t node, const std::vector<Value>& values);  // a shared op's tile
//   void fold(Accumulator&, const Value& tile, const Value* m);     // m: rescaled_sum's max
//   Value result(const Accumulator&, int64_t iterations);
//   void save(int32_t saver, size_t output, const Value& tile, const BlockCoord&);
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "support/error.h"
#include "verify/indexing.h"

namespace yirage::verify {

template <class Domain>
class BlockWalk {
 public:
  using Value = typename Domain::Value;

  BlockWalk(const ir::BlockGraph& graph, Domain& domain) : graph_(graph), domain_(domain) {
    outputs_ = graph.output_types();
    for (const ir::TensorType& type : outputs_)
      writes_.emplace_back(size_t(ir::num_elements(type.dims)), 0);
    size_t next = 0;
    for (int32_t id = 0; id < int32_t(graph.nodes().size()); ++id)
      output_of_.push_back(graph.phase(id) == ir::BlockPhase::saver ? int64_t(next++) : -1);
  }

  // Walks every block, then checks that every output element was written once.
  void run() {
    for_each_block(graph_, [&](const BlockCoord& block) { run_block(block); });
    for (size_t o = 0; o < outputs_.size(); ++o)
      for (size_t i = 0; i < writes_[o].size(); ++i)
        if (writes_[o][i] != 1)
          fail(
              "{}: output {} ({}) element {} was written {} times; every element must be "
              "written exactly once, so the savers' omaps are wrong",
              domain_.who(), o, ir::format_type(outputs_[o]),
              ir::format_dims(unravel(int64_t(i), outputs_[o].dims)), writes_[o][i]);
  }

 private:
  using Accumulator = typename Domain::Accumulator;

  const ir::BlockNode& node(int32_t id) const { return graph_.nodes()[size_t(id)]; }
  ir::BlockPhase phase(int32_t id) const { return graph_.phase(id); }
  int32_t count() const { return int32_t(graph_.nodes().size()); }

  void run_block(const BlockCoord& block) {
    const size_t nodes = graph_.nodes().size();
    std::vector<Value> values(nodes);
    std::vector<std::optional<Accumulator>> accumulators(nodes);
    for (int32_t id = 0; id < count(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(node(id).op))
        accumulators[size_t(id)].emplace(domain_.accumulator(id));
    const int64_t range = graph_.forloop_range();
    for (int64_t iteration = 0; iteration < range; ++iteration) {
      for (int32_t id = 0; id < count(); ++id) {
        if (phase(id) != ir::BlockPhase::in_loop) continue;
        domain_.at(id);
        values[size_t(id)] = std::holds_alternative<ir::InputIteratorOp>(node(id).op)
                                 ? domain_.load(id, block, iteration)
                                 : domain_.compute(id, values);
      }
      for (int32_t id = 0; id < count(); ++id)
        if (accumulators[size_t(id)]) {
          domain_.at(id);
          const std::vector<int32_t>& in = node(id).inputs;
          domain_.fold(*accumulators[size_t(id)], values[size_t(in[0])],
                       in.size() > 1 ? &values[size_t(in[1])] : nullptr);
        }
    }
    for (int32_t id = 0; id < count(); ++id) {
      domain_.at(id);
      if (accumulators[size_t(id)])
        values[size_t(id)] = domain_.result(*accumulators[size_t(id)], range);
      else if (phase(id) == ir::BlockPhase::saver)
        save(id, values[size_t(node(id).inputs[0])], block);
      else if (phase(id) == ir::BlockPhase::post_loop)
        values[size_t(id)] = domain_.compute(id, values);
    }
  }

  void save(int32_t id, const Value& tile, const BlockCoord& block) {
    const size_t o = size_t(output_of_[size_t(id)]);
    const ir::Dims& dims = node(id).tile.dims;
    domain_.save(id, o, tile, block);
    const auto& omap = std::get<ir::OutputSaverOp>(node(id).op).omap;
    for_each_window_row(outputs_[o].dims, dims, saver_tile_offset(omap, dims, block),
                        [&](int64_t to, int64_t, int64_t length) {
                          for (int64_t i = 0; i < length; ++i) ++writes_[o][size_t(to + i)];
                        });
  }

  const ir::BlockGraph& graph_;
  Domain& domain_;
  std::vector<ir::TensorType> outputs_;
  std::vector<std::vector<int64_t>> writes_;  // per output element: how often it was written
  std::vector<int64_t> output_of_;            // per node: a saver's output index, else -1
};

}  // namespace yirage::verify
