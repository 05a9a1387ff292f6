// Block-level enumeration: the block graphs of one fusion group under one configuration.
//
// The iterators come from the configuration. Then, depth first:
//   1. in-loop ops over the loop body's tiles (skipped when the loop has one iteration),
//   2. one accumulator for each in-loop tile no op reads,
//   3. post-loop ops over the accumulated tiles,
//   4. savers, once the unread post-loop tiles are exactly the group's outputs.
// Ops come from a vocabulary derived from the group's kernel ops (a matmul gives matmul; an
// rms_norm gives itself and its parts square, mean, div, mul and the rms accumulator, so that
// the norm can be folded through a matmul; a softmax gives max, sub, exp, sum and div, its safe
// form; ...). The number of ops is bounded by the vocabulary's expansion of the group.
//
// Canonical order: an op either reads the newest tile or sorts after the op added before it (by
// vocabulary index, then operand ids), commutative ops take their operands in order, and an op
// never repeats an existing node; so independent ops are produced in one order only.
//
// Pruning, counted in `pruned`:
//   - abstract expressions (abstract_expr.h): every new tile must be able to be part of an output;
//   - partial sums: inside the loop, a tile that sums over the walked dim holds one iteration's
//     share of a sum the accumulator finishes, so only linear ops may touch it (no exp, no norm,
//     no product of two iteration-varying factors, no adding of a non-partial tile), and an
//     accumulator may only take tiles whose walked dims are all summed away;
//   - the online softmax: a max over the walked dim (the chunk's max m_i) is read in the loop only
//     as s - m_i, and that only by exp; exp(s - m_i) and what is linear in it carry the factor
//     exp(-m_i), which differs per iteration, so they are accumulated by rescaled_sum(., m_i)
//     alone (a running max with rescaled accumulators), and a tile never mixes two such factors;
//   - expansion parts: an op that only a softmax or rms_norm brings reads what the expansion
//     applies it to (the shift x - max x of a max on x, the row sum of an exp, the chunk mean of
//     a square), since the abstraction, which drops signs and repeated sums, finds sub(s, s) and
//     mean(mean x) parts of the target too;
//   - memory: the loop body's tiles and all tiles within capabilities.search, less the weights
//     a product streams (ir::StreamedWeights);
//   - arity: the unread tiles must still be reducible to the outputs with the ops left.
#include <algorithm>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "search/abstract_expr.h"
#include "search/abstract_expr_z3.h"
#include "search/internal.h"
#include "support/error.h"

namespace yirage::search {
namespace {

using ir::BlockOp;
using ir::BlockPhase;

// One work item stops here, so that no group starves the others of the budget; the cut is by
// count, so it is the same in every run.
constexpr uint64_t kMaxStatesPerItem = 200000;

enum class Kind : uint8_t { plain, partial_sum, partial_max };

struct TileInfo {
  int32_t expr = -1;      // ExprMemo id
  bool invariant = true;  // the same in every iteration
  Kind kind = Kind::plain;
  uint32_t walked = 0;  // dims that are one iteration's slice of the walked dim
  // The online softmax (see the header comment): `shift` is the chunk max m (a node id) this tile
  // has had subtracted, s - m, which only exp may read; `scale` is the m whose exp(-m) factor the
  // tile carries, exp(s - m) and what is linear in it, which only rescaled_sum(., m) may
  // accumulate. -1: none.
  int32_t shift = -1, scale = -1;
  int readers = 0;
  std::vector<int32_t> key;  // vocabulary index and operands, for the no-repeat rule
};

// What an op that only the expansion of a softmax or an rms_norm brings may read: what the
// expansion applies it to. Without that, sub(s, s), mean(mean(x)) and Σ over a matmul's Σ are
// abstractly parts of the target (the abstraction drops signs and repeated sums), and they
// multiplied the states of an attention group with a QK-norm by a thousand for nothing.
enum class Reads : uint8_t {
  anything,
  minus_its_max,  // sub(x, max(x)) of a max node on x: the softmax's shift
  exp,            // the softmax's row sum, of exp(x - max x)
  square,         // the rms norm's chunk mean, of x²
};

struct VocabOp {
  BlockOp op;
  int arity = 1;
  bool commutative = false;
  Reads reads = Reads::anything;
};

struct Vocab {
  std::vector<VocabOp> ops;
  std::vector<double> rms_eps;  // one rms accumulator per distinct eps
  int max_ops = 0;
  bool sums = false;  // some op adds a Σ (matmul, sum, mean)
};

// Identifies an op with its attributes, for the vocabulary and the no-repeat rule.
std::string op_key(const BlockOp& op) {
  return std::visit(
      ir::Overloaded{
          [](const ir::UnaryOp& u) { return fmt::format("{}:{}", ir::unary_name(u.fn), u.scalar); },
          [](const ir::BinaryOp& b) { return std::string(ir::binary_name(b.fn)); },
          [](const ir::ReduceOp& r) {
            return fmt::format("{}:{}:{}", ir::reduce_name(r.fn), r.dim, r.keepdim);
          },
          [](const ir::RmsNormOp& n) {
            return fmt::format("rms_norm:{}:{}:{}", fmt::join(n.normalized_shape, ","), n.eps,
                               n.has_weight);
          },
          [](const ir::LayerNormOp& n) {
            return fmt::format("layer_norm:{}:{}:{}:{}", fmt::join(n.normalized_shape, ","), n.eps,
                               n.has_weight, n.has_bias);
          },
          [](const ir::AccumulatorOp& a) {
            return fmt::format("accum:{}:{}", ir::accum_name(a.fn), a.eps);
          },
          [&](const auto&) { return std::string(ir::block_op_name(op)); },
      },
      op);
}

// With a loop, an rms_norm may have to be folded through a matmul over its own dim, so its parts
// join the vocabulary; without one, the norm sees whole rows and runs as one op.
Vocab make_vocab(const ir::KernelGraph& target, bool loop) {
  Vocab v;
  std::vector<std::string> keys;
  auto add = [&](BlockOp op, int arity, bool commutative = false, Reads reads = Reads::anything) {
    if (std::holds_alternative<ir::MatmulOp>(op)) v.sums = true;
    if (const auto* r = std::get_if<ir::ReduceOp>(&op); r && r->fn != ir::ReduceFn::max)
      v.sums = true;
    std::string key = op_key(op) + fmt::format("/{}", arity);
    if (auto it = std::find(keys.begin(), keys.end(), key); it != keys.end()) {
      Reads& known = v.ops[size_t(it - keys.begin())].reads;
      if (known != reads) known = Reads::anything;  // two uses: the op is free
      return;
    }
    keys.push_back(key);
    v.ops.push_back({std::move(op), arity, commutative, reads});
  };
  for (const ir::Node& node : target.nodes()) {
    const int rank = node.outputs.empty() ? 0 : int(node.outputs[0].dims.size());
    std::visit(ir::Overloaded{
                   [&](const ir::MatmulOp& m) {
                     add(m, 2);
                     v.max_ops += 1;
                   },
                   [&](const ir::UnaryOp& u) {
                     add(u, 1);
                     v.max_ops += 1;
                   },
                   [&](const ir::BinaryOp& b) {
                     add(b, 2, b.fn == ir::BinaryFn::add || b.fn == ir::BinaryFn::mul);
                     v.max_ops += 1;
                   },
                   [&](const ir::ReduceOp& r) {
                     const int in_rank = int(target.type(node.inputs[0]).dims.size());
                     add(ir::ReduceOp{r.fn, r.dim - in_rank, r.keepdim}, 1);
                     v.max_ops += 1;
                   },
                   [&](const ir::RmsNormOp& n) {
                     add(n, n.has_weight ? 2 : 1);
                     if (!loop || n.normalized_shape.size() != 1) {
                       v.max_ops += 1;
                       return;
                     }
                     v.max_ops += 3 + (n.has_weight ? 1 : 0);
                     add(ir::UnaryOp{ir::UnaryFn::square}, 1);
                     add(ir::ReduceOp{ir::ReduceFn::mean, -1, true}, 1, false, Reads::square);
                     add(ir::BinaryOp{ir::BinaryFn::div}, 2);
                     if (n.has_weight) add(ir::BinaryOp{ir::BinaryFn::mul}, 2, true);
                     if (std::find(v.rms_eps.begin(), v.rms_eps.end(), n.eps) == v.rms_eps.end())
                       v.rms_eps.push_back(n.eps);
                   },
                   [&](const ir::LayerNormOp& n) {
                     add(n, 1 + int(n.has_weight) + int(n.has_bias));
                     v.max_ops += 1;
                   },
                   [&](const ir::SoftmaxOp& s) {
                     // The safe form only: e = exp(x - max x), e / Σe (abstract_expr.h).
                     add(ir::ReduceOp{ir::ReduceFn::max, s.dim - rank, true}, 1);
                     add(ir::BinaryOp{ir::BinaryFn::sub}, 2, false, Reads::minus_its_max);
                     add(ir::UnaryOp{ir::UnaryFn::exp}, 1);
                     add(ir::ReduceOp{ir::ReduceFn::sum, s.dim - rank, true}, 1, false, Reads::exp);
                     add(ir::BinaryOp{ir::BinaryFn::div}, 2);
                     v.max_ops += 5;
                   },
                   [&](const auto&) {},
               },
               node.op);
  }
  return v;
}

bool nonlinear_unary(ir::UnaryFn fn) {
  return fn != ir::UnaryFn::neg && fn != ir::UnaryFn::mul_scalar;
}

// The walked dims of an elementwise result, aligned from the right; nullopt when an operand's
// slice meets a full dim of the same extent in the other, which would combine different
// elements.
std::optional<uint32_t> broadcast_walked(const std::vector<const TileInfo*>& in,
                                         const std::vector<const ir::TensorType*>& types,
                                         const ir::TensorType& out) {
  uint32_t walked = 0;
  const int ro = int(out.dims.size());
  for (int d = 0; d < ro; ++d) {
    int walked_count = 0, full_count = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const int r = int(types[i]->dims.size());
      const int di = d - (ro - r);
      if (di < 0 || types[i]->dims[size_t(di)] == 1) continue;
      if (in[i]->walked >> di & 1)
        ++walked_count;
      else
        ++full_count;
    }
    if (walked_count && full_count) return std::nullopt;
    if (walked_count) walked |= 1u << d;
  }
  return walked;
}

// Abstract expressions by id, with the results of ops and of the pruning test remembered: the
// same few expressions recur across the whole enumeration. The test runs when first asked, as the
// Z3 oracle's is not cheap.
class ExprMemo {
 public:
  ExprMemo(ExprContext& exprs, Budget& budget) : exprs_(exprs), z3_(budget.z3), budget_(budget) {}
  ~ExprMemo() { budget_.release(held_); }
  ExprMemo(const ExprMemo&) = delete;
  ExprMemo& operator=(const ExprMemo&) = delete;

  int32_t id(const Poly& p) {
    auto [it, inserted] = ids_.try_emplace(p, int32_t(polys_.size()));
    if (inserted) {
      polys_.push_back(p);
      part_.push_back(-1);
      strict_part_.push_back(-1);
      // Twice: the map's key and the vector's copy.
      uint64_t bytes = kNodeBytes;
      for (const Monomial& m : p) bytes += 2 * (sizeof(Monomial) + m.factors.size() * 4);
      hold(bytes);
    }
    return it->second;
  }
  const Poly& poly(int32_t id) const { return polys_[size_t(id)]; }
  bool part(int32_t id, bool sums_left = true) {
    int8_t& known = (sums_left ? part_ : strict_part_)[size_t(id)];
    if (known < 0) known = may_be_part(polys_[size_t(id)], sums_left);
    return known;
  }

  // The expression of `op` (vocabulary entry `v`, or an accumulator when v < 0) on `in`; -1 when
  // it cannot be normalised.
  int32_t apply(int32_t v, const BlockOp& op, const std::vector<int32_t>& in, bool invariant) {
    std::vector<int32_t> key = {v, invariant};
    key.insert(key.end(), in.begin(), in.end());
    if (auto it = results_.find(key); it != results_.end()) return it->second;
    int32_t r = -1;
    try {
      std::vector<Poly> args;
      for (int32_t i : in) args.push_back(polys_[size_t(i)]);
      r = id(exprs_.of_block_op(op, args, invariant));
    } catch (const Error&) {
    }
    hold(kNodeBytes + key.size() * sizeof(int32_t));
    results_.emplace(std::move(key), r);
    return r;
  }

 private:
  bool may_be_part(const Poly& p, bool sums_left) const {
    return z3_ ? z3_->may_be_part(exprs_, p, sums_left) : exprs_.may_be_part(p, sums_left);
  }

  // A map node's own bytes beside its key and value (three pointers and a colour, rounded up).
  static constexpr uint64_t kNodeBytes = 48;
  void hold(uint64_t bytes) {
    held_ += bytes;
    budget_.hold(bytes);
  }

  ExprContext& exprs_;
  Z3Oracle* z3_;
  Budget& budget_;
  uint64_t held_ = 0;
  std::map<Poly, int32_t> ids_;
  std::vector<Poly> polys_;
  std::vector<int8_t> part_, strict_part_;  // -1: not asked yet
  std::map<std::vector<int32_t>, int32_t> results_;
};

class Enumerator {
 public:
  Enumerator(const Group& group, const BlockConfig& config, const SearchSpace& space,
             Budget& budget)
      : group_(group),
        config_(config),
        space_(space),
        limits_(space.limits()),
        budget_(budget),
        vocab_(make_vocab(group.target, config.range > 1)),
        memo_(exprs_, budget) {
    const std::vector<Poly> targets = exprs_.of_graph(group.target);
    exprs_.set_targets(targets);
    for (const Poly& t : targets) targets_.push_back(memo_.id(t));
    for (size_t j = 0; j < group.target.outputs().size(); ++j) {
      ir::Dims tile = group.target.type(group.target.outputs()[j].tensor).dims;
      for (int a = 0; a < ir::kGridAxes; ++a)
        if (config.omaps[j][size_t(a)] != ir::kReplicate)
          tile[size_t(config.omaps[j][size_t(a)])] /= config.grid.extent[size_t(a)];
      output_tiles_.push_back(tile);
    }
  }

  std::vector<BlockCandidate> run(bool* cut) {
    std::vector<ir::TensorType> operands;
    for (const ir::TensorRef& in : group_.target.inputs())
      operands.push_back(group_.target.type(in));
    ir::BlockGraph g(config_.grid, config_.range, operands);
    std::vector<TileInfo> tiles;
    for (const ir::InputIteratorOp& it : config_.iterators) {
      g.add(it, {});
      TileInfo t;
      t.expr = memo_.id(exprs_.input(it.operand));
      const bool walks = config_.range > 1 && it.fmap != ir::kReplicate;
      t.invariant = !walks;
      t.walked = walks ? 1u << it.fmap : 0;
      tiles.push_back(std::move(t));
    }
    if (config_.range > 1)
      in_loop(g, tiles, 0, {});
    else
      accumulate(g, tiles);
    std::sort(found_.begin(), found_.end(), [](const BlockCandidate& a, const BlockCandidate& b) {
      return std::tie(a.cost, a.key) < std::tie(b.cost, b.key);
    });
    if (states_ > kMaxStatesPerItem) *cut = true;
    return std::move(found_);
  }

 private:
  using Key = std::vector<int32_t>;

  int unread(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, BlockPhase phase) const {
    int n = 0;
    for (size_t i = 0; i < tiles.size(); ++i)
      if (g.phase(int32_t(i)) == phase && tiles[i].readers == 0) ++n;
    return n;
  }

  bool reducible(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int ops,
                 BlockPhase phase) const {
    return unread(g, tiles, phase) - int(output_tiles_.size()) <= vocab_.max_ops - ops;
  }

  // Visits every op of the vocabulary on every canonical choice of operands of `phase`.
  void expand(
      const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int ops, const Key& last,
      BlockPhase phase,
      const std::function<void(ir::BlockGraph&, std::vector<TileInfo>&, const Key&)>& next) {
    if (ops >= vocab_.max_ops) return;
    std::vector<int32_t> eligible;
    for (size_t i = 0; i < tiles.size(); ++i)
      if (g.phase(int32_t(i)) == phase) eligible.push_back(int32_t(i));
    const int32_t newest = int32_t(tiles.size()) - 1;
    for (size_t v = 0; v < vocab_.ops.size(); ++v) {
      const VocabOp& vop = vocab_.ops[v];
      std::vector<int32_t> args(size_t(vop.arity));
      std::function<void(size_t)> choose = [&](size_t pos) {
        if (budget_.stopped.load(std::memory_order_relaxed)) return;
        if (pos < args.size()) {
          for (int32_t t : eligible) {
            if (vop.commutative && pos > 0 && t < args[pos - 1]) continue;
            args[pos] = t;
            choose(pos + 1);
          }
          return;
        }
        Key key = {int32_t(v)};
        key.insert(key.end(), args.begin(), args.end());
        const bool reads_newest = std::find(args.begin(), args.end(), newest) != args.end();
        if (!reads_newest && !(last < key)) return;
        for (const TileInfo& t : tiles)
          if (t.key == key) return;
        try_op(g, tiles, int32_t(v), vop.op, args, key, phase,
               [&](ir::BlockGraph& g2, std::vector<TileInfo>& t2) { next(g2, t2, key); });
      };
      choose(0);
    }
  }

  // The flags of an in-loop op's result, or nullopt when partial-sum pruning cuts it.
  std::optional<TileInfo> in_loop_flags(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles,
                                        const BlockOp& op, const std::vector<int32_t>& args,
                                        const ir::TensorType& out) const {
    std::vector<const TileInfo*> in;
    std::vector<const ir::TensorType*> types;
    for (int32_t a : args) {
      in.push_back(&tiles[size_t(a)]);
      types.push_back(&g.nodes()[size_t(a)].tile);
    }
    TileInfo r;
    if (std::optional<TileInfo> online = online_softmax_flags(op, in, types, args, out))
      return online;
    for (const TileInfo* t : in) {
      if (t->kind == Kind::partial_max || t->shift >= 0) return std::nullopt;
      r.invariant = r.invariant && t->invariant;
    }
    const auto partials = std::count_if(in.begin(), in.end(),
                                        [](const TileInfo* t) { return t->kind != Kind::plain; });
    if (partials) r.kind = Kind::partial_sum;
    // A partial times anything that varies per iteration is not linear in the partial.
    auto linear_product = [&] {
      if (partials > 1) return false;
      for (const TileInfo* t : in)
        if (t->kind == Kind::plain && partials == 1 && !t->invariant) return false;
      return true;
    };
    // A norm needs whole rows: none of its normalized dims may be walked by the loop, and no
    // partial value may reach it.
    auto norm_rule = [&](const ir::Dims& normalized_shape) {
      const int rank = int(types[0]->dims.size());
      if (partials) return false;
      for (size_t k = 0; k < normalized_shape.size(); ++k)
        if (in[0]->walked >> (rank - 1 - int(k)) & 1) return false;
      r.walked = in[0]->walked;
      return true;
    };
    bool ok = std::visit(
        ir::Overloaded{
            [&](const ir::MatmulOp&) {
              const int ra = int(types[0]->dims.size()), rb = int(types[1]->dims.size());
              const bool ka = in[0]->walked >> (ra - 1) & 1, kb = in[1]->walked >> (rb - 2) & 1;
              if (ka != kb || !linear_product()) return false;
              if (ka) r.kind = Kind::partial_sum;
              const int ro = int(out.dims.size());
              if (in[0]->walked >> (ra - 2) & 1) r.walked |= 1u << (ro - 2);
              if (in[1]->walked >> (rb - 1) & 1) r.walked |= 1u << (ro - 1);
              for (int d = 0; d < ro - 2; ++d) {
                const int da = d - (ro - ra), db = d - (ro - rb);
                if ((da >= 0 && (in[0]->walked >> da & 1)) ||
                    (db >= 0 && (in[1]->walked >> db & 1)))
                  r.walked |= 1u << d;
              }
              return true;
            },
            [&](const ir::UnaryOp& u) {
              if (partials && nonlinear_unary(u.fn)) return false;
              r.walked = in[0]->walked;
              return true;
            },
            [&](const ir::BinaryOp& b) {
              auto w = broadcast_walked(in, types, out);
              if (!w) return false;
              r.walked = *w;
              switch (b.fn) {
                case ir::BinaryFn::add:
                case ir::BinaryFn::sub: return partials == 0 || partials == 2;
                case ir::BinaryFn::mul: return linear_product();
                case ir::BinaryFn::div: return in[1]->kind == Kind::plain && linear_product();
                case ir::BinaryFn::pow: return partials == 0;
              }
              return false;
            },
            [&](const ir::ReduceOp& red) {
              const int rank = int(types[0]->dims.size());
              const int dim = red.dim < 0 ? red.dim + rank : red.dim;
              const bool walked = in[0]->walked >> dim & 1;
              if (red.fn == ir::ReduceFn::max && partials) return false;
              uint32_t w = in[0]->walked & ~(1u << dim);
              if (!red.keepdim) w = (w & ((1u << dim) - 1)) | ((w >> (dim + 1)) << dim);
              r.walked = w;
              if (walked)
                r.kind = red.fn == ir::ReduceFn::max ? Kind::partial_max : Kind::partial_sum;
              return true;
            },
            [&](const ir::RmsNormOp& n) { return norm_rule(n.normalized_shape); },
            [&](const ir::LayerNormOp& n) { return norm_rule(n.normalized_shape); },
            [&](const auto&) { return false; },
        },
        op);
    if (!ok) return std::nullopt;
    r.scale = scale_of(op, in);
    if (r.scale == kNotLinear) return std::nullopt;
    return r;
  }

  // The two steps of the online softmax that no other rule allows: s - m, with m the max of this
  // iteration's chunk along the walked dim, and exp of that, which carries the factor exp(-m)
  // that a rescaled_sum accumulator takes back out. nullopt: the op is neither.
  static std::optional<TileInfo> online_softmax_flags(
      const BlockOp& op, const std::vector<const TileInfo*>& in,
      const std::vector<const ir::TensorType*>& types, const std::vector<int32_t>& args,
      const ir::TensorType& out) {
    TileInfo r;
    r.invariant = false;
    const auto* b = std::get_if<ir::BinaryOp>(&op);
    if (b && b->fn == ir::BinaryFn::sub && in[1]->kind == Kind::partial_max) {
      const TileInfo& s = *in[0];
      if (s.kind != Kind::plain || s.invariant || s.shift >= 0 || s.scale >= 0) return std::nullopt;
      auto w = broadcast_walked(in, types, out);
      if (!w) return std::nullopt;
      r.walked = *w;
      r.shift = args[1];
      return r;
    }
    const auto* u = std::get_if<ir::UnaryOp>(&op);
    if (u && u->fn == ir::UnaryFn::exp && in[0]->shift >= 0) {
      r.walked = in[0]->walked;
      r.scale = in[0]->shift;
      return r;
    }
    return std::nullopt;
  }

  static constexpr int32_t kNotLinear = -2;

  // The chunk max whose exp(-m) factor the result of `op` carries (-1: none), or kNotLinear when
  // the op is not linear in that factor, so that no single rescale could take it out: a
  // nonlinear function of it, a product or sum of tiles of different factors, a division by it.
  static int32_t scale_of(const BlockOp& op, const std::vector<const TileInfo*>& in) {
    int32_t scale = -1;
    int scaled = 0;
    for (const TileInfo* t : in)
      if (t->scale >= 0) {
        if (scale >= 0 && t->scale != scale) return kNotLinear;
        scale = t->scale;
        ++scaled;
      }
    if (scaled == 0) return -1;
    const bool linear =
        std::visit(ir::Overloaded{
                       [&](const ir::MatmulOp&) { return scaled == 1; },
                       [&](const ir::UnaryOp& u) { return !nonlinear_unary(u.fn); },
                       [&](const ir::BinaryOp& b) {
                         switch (b.fn) {
                           case ir::BinaryFn::add:
                           case ir::BinaryFn::sub: return scaled == int(in.size());
                           case ir::BinaryFn::mul: return scaled == 1;
                           case ir::BinaryFn::div: return in[1]->scale < 0;
                           case ir::BinaryFn::pow: return false;
                         }
                         return false;
                       },
                       [&](const ir::ReduceOp& red) { return red.fn != ir::ReduceFn::max; },
                       [&](const auto&) { return false; },
                   },
                   op);
    return linear ? scale : kNotLinear;
  }

  template <class Next>
  void try_op(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int32_t v,
              const BlockOp& op, const std::vector<int32_t>& args, const Key& key, BlockPhase phase,
              Next&& next) {
    std::vector<int32_t> in;
    for (int32_t a : args) in.push_back(tiles[size_t(a)].expr);
    const int32_t expr = memo_.apply(v, op, in, false);
    if (expr < 0 || !memo_.part(expr, phase == BlockPhase::in_loop || vocab_.sums)) {
      ++budget_.pruned;
      ++budget_.expr_pruned;
      return;
    }
    if (!reads_fit(vocab_.ops[size_t(v)].reads, g, args)) {
      ++budget_.pruned;
      return;
    }
    ir::BlockGraph g2 = g;
    try {
      g2.add(op, args);
    } catch (const Error&) {
      return;  // the operands' shapes do not fit the op: not a program
    }
    TileInfo info;
    if (phase == BlockPhase::in_loop) {
      auto flags = in_loop_flags(g, tiles, op, args, g2.nodes().back().tile);
      if (!flags) {
        ++budget_.pruned;
        return;
      }
      info = std::move(*flags);
    }
    info.expr = expr;
    info.key = key;
    if (!fits(g2)) {
      ++budget_.pruned;
      return;
    }
    std::vector<TileInfo> t2 = tiles;
    for (int32_t a : args) ++t2[size_t(a)].readers;
    t2.push_back(std::move(info));
    ++budget_.states;
    if (budget_.stop() || ++states_ > kMaxStatesPerItem) return;
    next(g2, t2);
  }

  static bool reads_fit(Reads reads, const ir::BlockGraph& g, const std::vector<int32_t>& args) {
    const ir::BlockNode& first = g.nodes()[size_t(args[0])];
    auto is_unary = [](const ir::BlockNode& n, ir::UnaryFn fn) {
      const auto* u = std::get_if<ir::UnaryOp>(&n.op);
      return u && u->fn == fn;
    };
    switch (reads) {
      case Reads::anything: return true;
      case Reads::minus_its_max: {
        const ir::BlockNode& m = g.nodes()[size_t(args[1])];
        const auto* max = std::get_if<ir::ReduceOp>(&m.op);
        return max && max->fn == ir::ReduceFn::max && m.inputs[0] == args[0];
      }
      case Reads::exp: return is_unary(first, ir::UnaryFn::exp);
      case Reads::square: return is_unary(first, ir::UnaryFn::square);
    }
    return true;
  }

  // Tiles that may still stream (the product that would read them not yet added) count as
  // streamed until complete() validates the finished graph.
  bool fits(const ir::BlockGraph& g) const {
    return g.tile_overrun(limits_, true).kind == ir::BlockGraph::TileOverrun::Kind::none;
  }

  void in_loop(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int ops,
               const Key& last) {
    if (!reducible(g, tiles, ops, BlockPhase::in_loop)) return;
    accumulate(g, tiles, ops);
    expand(g, tiles, ops, last, BlockPhase::in_loop,
           [&](ir::BlockGraph& g2, std::vector<TileInfo>& t2, const Key& key) {
             in_loop(g2, t2, ops + 1, key);
           });
  }

  // Step 2: accumulators for the unread in-loop tiles, each with every function that fits it.
  void accumulate(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int ops = 0) {
    if (!reducible(g, tiles, ops, BlockPhase::in_loop)) return;
    std::vector<int32_t> frontier;
    for (size_t i = 0; i < tiles.size(); ++i)
      if (g.phase(int32_t(i)) == BlockPhase::in_loop && tiles[i].readers == 0) {
        if (tiles[i].walked != 0) return;  // a slice of the walked dim cannot be accumulated
        frontier.push_back(int32_t(i));
      }
    std::vector<std::vector<ir::AccumulatorOp>> options;
    for (int32_t t : frontier) {
      const TileInfo& info = tiles[size_t(t)];
      std::vector<ir::AccumulatorOp> fns;
      if (config_.range == 1) {
        fns.push_back({ir::AccumFn::sum});
      } else if (info.scale >= 0) {
        if (info.kind != Kind::partial_sum) return;
        fns.push_back({ir::AccumFn::rescaled_sum});
      } else if (info.kind == Kind::partial_max) {
        fns.push_back({ir::AccumFn::max});
      } else if (info.kind == Kind::partial_sum) {
        fns.push_back({ir::AccumFn::sum});
        for (double eps : vocab_.rms_eps) fns.push_back({ir::AccumFn::rms, eps});
      } else if (info.invariant) {
        fns.push_back({ir::AccumFn::mean});
      } else {
        return;
      }
      options.push_back(std::move(fns));
    }
    std::vector<size_t> pick(frontier.size(), 0);
    while (!budget_.stopped.load(std::memory_order_relaxed)) {
      add_accumulators(g, tiles, frontier, options, pick, ops);
      size_t i = 0;
      while (i < pick.size() && ++pick[i] == options[i].size()) pick[i++] = 0;
      if (i == pick.size()) break;
    }
  }

  void add_accumulators(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles,
                        const std::vector<int32_t>& frontier,
                        const std::vector<std::vector<ir::AccumulatorOp>>& options,
                        const std::vector<size_t>& pick, int ops) {
    ir::BlockGraph g2 = g;
    std::vector<TileInfo> t2 = tiles;
    for (size_t i = 0; i < frontier.size(); ++i) {
      const ir::AccumulatorOp acc = options[i][pick[i]];
      const TileInfo& src = tiles[size_t(frontier[i])];
      std::vector<int32_t> operands = {frontier[i]};
      if (acc.fn == ir::AccumFn::rescaled_sum) operands.push_back(src.scale);
      std::vector<int32_t> exprs;
      for (int32_t o : operands) exprs.push_back(tiles[size_t(o)].expr);
      TileInfo info;
      info.expr = config_.range == 1 ? src.expr
                                     : memo_.apply(-1 - int32_t(acc.fn) * 64 - eps_index(acc), acc,
                                                   exprs, src.invariant);
      if (info.expr < 0 || !memo_.part(info.expr)) {
        ++budget_.pruned;
        ++budget_.expr_pruned;
        return;
      }
      try {
        g2.add(acc, operands);
      } catch (const Error&) {
        return;  // a rescale whose max does not broadcast to the tile: not a program
      }
      for (int32_t o : operands) ++t2[size_t(o)].readers;
      t2.push_back(std::move(info));
    }
    if (!fits(g2)) {
      ++budget_.pruned;
      return;
    }
    ++budget_.states;
    if (budget_.stop() || ++states_ > kMaxStatesPerItem) return;
    post_loop(g2, t2, ops, {});
  }

  void post_loop(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles, int ops,
                 const Key& last) {
    if (!reducible(g, tiles, ops, BlockPhase::post_loop)) return;
    complete(g, tiles);
    expand(g, tiles, ops, last, BlockPhase::post_loop,
           [&](ir::BlockGraph& g2, std::vector<TileInfo>& t2, const Key& key) {
             post_loop(g2, t2, ops + 1, key);
           });
  }

  // Step 4: savers, when the unread post-loop tiles are the outputs.
  void complete(const ir::BlockGraph& g, const std::vector<TileInfo>& tiles) {
    const size_t outputs = output_tiles_.size();
    std::vector<int32_t> saved(outputs, -1);
    for (size_t i = 0; i < tiles.size(); ++i) {
      if (g.phase(int32_t(i)) != BlockPhase::post_loop || tiles[i].readers) continue;
      bool matched = false;
      for (size_t j = 0; j < outputs && !matched; ++j)
        if (saved[j] < 0 && tiles[i].expr == targets_[j] &&
            g.nodes()[i].tile.dims == output_tiles_[j]) {
          saved[j] = int32_t(i);
          matched = true;
        }
      if (!matched) return;
    }
    if (std::count(saved.begin(), saved.end(), -1)) return;
    ir::BlockGraph g2 = g;
    try {
      for (size_t j = 0; j < outputs; ++j) g2.save(saved[j], config_.omaps[j]);
      g2.validate(limits_);
      std::vector<ir::TensorType> want;
      for (const ir::GraphOutput& o : group_.target.outputs())
        want.push_back(group_.target.type(o.tensor));
      if (g2.output_types() != want) return;
    } catch (const Error&) {
      return;
    }
    ++budget_.candidates;
    BlockCandidate c;
    c.cost = block_graph_cost(g2, space_);
    c.key = ir::to_json(g2).dump();
    for (const BlockCandidate& f : found_)
      if (f.key == c.key) return;
    if (budget_.rejects(g2)) return;
    c.body = std::make_shared<const ir::BlockGraph>(std::move(g2));
    // Held until the search ends (its caller keeps every group's candidates): the key, and the
    // body's structs at about as much again.
    budget_.hold(2 * c.key.size());
    found_.push_back(std::move(c));
  }

  const Group& group_;
  const BlockConfig& config_;
  const SearchSpace& space_;
  const ir::BlockLimits limits_;  // space_'s, kept: fits() runs on every state
  Budget& budget_;
  Vocab vocab_;
  int32_t eps_index(const ir::AccumulatorOp& acc) const {
    auto it = std::find(vocab_.rms_eps.begin(), vocab_.rms_eps.end(), acc.eps);
    return it == vocab_.rms_eps.end() ? 0 : int32_t(it - vocab_.rms_eps.begin());
  }

  ExprContext exprs_;
  ExprMemo memo_;
  std::vector<int32_t> targets_;
  std::vector<ir::Dims> output_tiles_;
  std::vector<BlockCandidate> found_;
  uint64_t states_ = 0;
};

}  // namespace

std::vector<BlockCandidate> search_block_graphs(const Group& group, const BlockConfig& config,
                                                const SearchSpace& space, Budget& budget) {
  bool cut = false;
  std::vector<BlockCandidate> found = Enumerator(group, config, space, budget).run(&cut);
  if (cut) ++budget.cut_items;
  return found;
}

}  // namespace yirage::search
