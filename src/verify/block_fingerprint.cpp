// Fused kernels over fingerprints: the block graph evaluated literally, block by block and
// iteration by iteration by the walk the literal executor also takes (block_walk.h), with the
// shared ops meaning what they mean at kernel level (fingerprint_ops.cpp), so that a fused kernel
// fingerprints like the kernel graph it replaces.
//
// Accumulators fold the iterations' tiles t_0 .. t_{R-1}:
//   sum   Σ t_i                mean  (Σ t_i) / R, exactly
//   rms   UF_sqrt((Σ t_i) / R + eps): the canonical sqrt, so (X·W) / rms matches rms_norm(X)·W,
//         whose denominator is UF_sqrt(mean(x²) + eps), eps the exact binary value in both
//   max   the sum of the tiles' max-set fingerprints: a max of chunk maxes is the max of the row
//   rescaled_sum(v, m)   Σ_i exp(m_i - M)·v_i, M the max over the iterations of m. With
//         v_i = Σ_chunk exp(s - m_i)·V, each term is exp(s - M)·V exactly (ω-powers multiply),
//         so the result is exp(-M)·Σ exp(s)·V, and in rescaled_sum(pv, m) / rescaled_sum(l, m)
//         the common factor exp(-M) cancels: whatever value the max takes, the ratio equals
//         softmax(s)·V at kernel level, where the row max cancels the same way.
#include <algorithm>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "support/error.h"
#include "verify/block_walk.h"
#include "verify/fingerprint_ops.h"
#include "verify/indexing.h"

namespace yirage::verify::fp {
namespace {

using ir::AccumFn;
using ir::BlockGraph;
using ir::BlockNode;
using ir::BlockPhase;
using ir::Dims;
using ir::kGridAxes;
using ir::kReplicate;
using ir::TensorType;

// Elementwise a + b of equal shapes, keeping a's kind: adds max-set fingerprints as they are.
FTensor add_fingerprints(const FTensor& a, const FTensor& b) {
  FTensor out = a;
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = field::add(a.v[i], b.v[i]);
  return out;
}

FTensor reduce_to_width(const ir::ReduceToWidthOp& op, const FTensor& x, const TensorType& tile,
                        Trial& trial) {
  // [..., E, ...] as [..., width, E / width, ...], summed over the runs.
  Dims runs = x.type.dims;
  const int64_t extent = runs[size_t(op.dim)];
  runs[size_t(op.dim)] = op.width;
  runs.insert(runs.begin() + op.dim + 1, extent / op.width);
  const FTensor split = reshape(x, {x.type.dtype, runs});
  return reduce(ir::ReduceOp{ir::ReduceFn::sum, op.dim + 1, false}, split, tile, trial);
}

// The running state of one accumulator over one block's iterations.
class Accumulator {
 public:
  Accumulator(AccumFn fn, double eps) : fn_(fn), eps_(eps) {}

  void fold(const FTensor& t, const FTensor* m, Trial& trial) {
    if (fn_ == AccumFn::rescaled_sum) {
      v_.push_back(t);
      m_.push_back(*m);
      return;
    }
    const FTensor term = fn_ == AccumFn::max ? max_elements(t, trial) : t;
    if (!total_)
      total_ = term;
    else if (fn_ == AccumFn::max)
      total_ = add_fingerprints(*total_, term);
    else
      total_ = binary(ir::BinaryFn::add, *total_, term, term.type, trial);
  }

  FTensor result(int64_t iterations, Trial& trial) const {
    switch (fn_) {
      case AccumFn::sum: return *total_;
      case AccumFn::mean: return divided_by_count(*total_, iterations);
      case AccumFn::rms: {
        FTensor mean = divided_by_count(*total_, iterations);
        if (eps_ != 0.0)
          mean = binary(ir::BinaryFn::add, mean, constant(eps_, mean.type.dtype, trial), mean.type,
                        trial);
        return uf_sqrt(mean, trial);
      }
      case AccumFn::max: {
        FTensor max = *total_;
        max.degree = {1, 0};  // its value, when read, is a fresh UF output
        max.uniform = ~0u;
        return max;
      }
      case AccumFn::rescaled_sum: return rescaled(trial);
    }
    fail("fingerprint: accumulator with unknown function code {}", int(fn_));
  }

 private:
  FTensor rescaled(Trial& trial) const {
    FTensor max_set = max_elements(m_[0], trial);
    for (size_t i = 1; i < m_.size(); ++i)
      max_set = add_fingerprints(max_set, max_elements(m_[i], trial));
    const FTensor max = materialize(max_set, trial);
    std::optional<FTensor> sum;
    for (size_t i = 0; i < v_.size(); ++i) {
      const FTensor shift = binary(ir::BinaryFn::sub, m_[i], max, max.type, trial);
      const FTensor term = binary(ir::BinaryFn::mul, v_[i], exp(shift, trial), v_[i].type, trial);
      sum = sum ? binary(ir::BinaryFn::add, *sum, term, term.type, trial) : term;
    }
    return *sum;
  }

  AccumFn fn_;
  double eps_;
  std::optional<FTensor> total_;  // sum, mean, rms: Σ t_i; max: Σ of max-set fingerprints
  std::vector<FTensor> v_, m_;    // rescaled_sum: every iteration's operands
};

// Tiles as fingerprints; the walk is block_walk.h's, which the literal executor shares.
class FingerprintTiles {
 public:
  using Value = FTensor;
  using Accumulator = fp::Accumulator;

  FingerprintTiles(const BlockGraph& graph, const std::vector<const FTensor*>& operands,
                   Trial& trial)
      : graph_(graph), operands_(operands), trial_(trial) {
    for (const TensorType& type : graph.output_types()) outputs_.emplace_back(type);
  }

  std::string_view who() const { return "fingerprint: fused kernel"; }
  void at(int32_t id) {
    trial_.set_location(
        fmt::format("fused kernel node {} ({})", id, ir::block_op_label(node(id).op)));
  }

  Accumulator accumulator(int32_t id) const {
    const auto& acc = std::get<ir::AccumulatorOp>(node(id).op);
    return Accumulator(acc.fn, acc.eps);
  }
  void fold(Accumulator& acc, const FTensor& t, const FTensor* m) { acc.fold(t, m, trial_); }
  FTensor result(const Accumulator& acc, int64_t iterations) {
    return acc.result(iterations, trial_);
  }

  FTensor compute(int32_t id, const std::vector<FTensor>& values) {
    const BlockNode& n = node(id);
    if (const auto* r = std::get_if<ir::ReduceToWidthOp>(&n.op))
      return reduce_to_width(*r, values[size_t(n.inputs[0])], n.tile, trial_);
    std::vector<const FTensor*> in;
    for (int32_t i : n.inputs) in.push_back(&values[size_t(i)]);
    return std::move(evaluate_op(*ir::shared_kernel_op(n.op), in, {n.tile}, trial_)[0]);
  }

  FTensor load(int32_t id, const BlockCoord& block, int64_t iteration) const {
    const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
    const TensorType& tile = node(id).tile;
    const FTensor& operand = *operands_[size_t(it.operand)];
    const Dims offset =
        iterator_tile_offset(it, tile.dims, block, graph_.forloop_range(), iteration);
    FTensor out(tile);  // the operand's kind, degree and uniform dims, on a window of it
    out.has_q = operand.has_q;
    out.max_set = operand.max_set;
    out.degree = operand.degree;
    out.uniform = operand.uniform;
    for_each_window_row(operand.type.dims, tile.dims, offset,
                        [&](int64_t from, int64_t to, int64_t length) {
                          std::copy_n(&operand.v[size_t(from)], length, &out.v[size_t(to)]);
                        });
    return out;
  }

  void save(int32_t id, size_t output, const FTensor& tile, const BlockCoord& block) {
    const auto& omap = std::get<ir::OutputSaverOp>(node(id).op).omap;
    FTensor& out = outputs_[output];
    uint32_t across_blocks = 0;  // dims whose elements come from different blocks
    for (int a = 0; a < kGridAxes; ++a)
      if (omap[size_t(a)] != kReplicate && graph_.grid().extent[size_t(a)] > 1)
        across_blocks |= 1u << omap[size_t(a)];
    for_each_window_row(out.type.dims, tile.type.dims,
                        saver_tile_offset(omap, tile.type.dims, block),
                        [&](int64_t to, int64_t from, int64_t length) {
                          std::copy_n(&tile.v[size_t(from)], length, &out.v[size_t(to)]);
                        });
    // Every block saves the same node, so the kinds agree; degrees and masks combine.
    out.has_q = tile.has_q;
    out.max_set = tile.max_set;
    out.degree = {std::max(out.degree.num, tile.degree.num),
                  std::max(out.degree.den, tile.degree.den)};
    out.uniform = out.degree.den == 0 ? ~0u : (tile.uniform & ~across_blocks);
  }

  std::vector<FTensor> take_outputs() { return std::move(outputs_); }

 private:
  const BlockNode& node(int32_t id) const { return graph_.nodes()[size_t(id)]; }

  const BlockGraph& graph_;
  const std::vector<const FTensor*>& operands_;
  Trial& trial_;
  std::vector<FTensor> outputs_;
};

}  // namespace

std::vector<FTensor> fingerprint_block_graph(const BlockGraph& graph,
                                             const std::vector<const FTensor*>& operands,
                                             Trial& trial) {
  graph.validate(ir::BlockLimits{});
  if (operands.size() != graph.operands().size())
    fail("fingerprint: the fused kernel takes {} operands, got {}", graph.operands().size(),
         operands.size());
  FingerprintTiles tiles(graph, operands, trial);
  BlockWalk(graph, tiles).run();
  return tiles.take_outputs();
}

}  // namespace yirage::verify::fp
