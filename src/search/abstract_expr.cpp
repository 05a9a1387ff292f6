// The abstraction and its normal form (axioms in abstract_expr.h).
#include "search/abstract_expr.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

namespace yirage::search {
namespace {

// A polynomial grows with every distributed product; past this many monomials the prefix is given
// up (the block search counts it as pruned), which keeps a runaway product from stalling it.
constexpr size_t kMaxMonomials = 256;

void normalize(Poly& p) {
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
}

bool sub_multiset(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

bool monomial_below(const Monomial& a, const Monomial& b, bool sums_left) {
  return (sums_left ? (!a.sigma || b.sigma) : a.sigma == b.sigma) &&
         sub_multiset(a.factors, b.factors);
}

// A sum can only become part of b by being multiplied, as a whole, by what b's terms have
// beyond it: so some one multiset m must complete every term of `a` to a term of b.
bool below_with(const Poly& a, const Poly& b, bool sums_left) {
  if (a.empty()) return true;
  for (const Monomial& first : b) {
    if (!monomial_below(a[0], first, sums_left)) continue;
    std::vector<int32_t> rest;
    std::set_difference(first.factors.begin(), first.factors.end(), a[0].factors.begin(),
                        a[0].factors.end(), std::back_inserter(rest));
    bool all = true;
    for (size_t i = 1; i < a.size() && all; ++i) {
      std::vector<int32_t> want(a[i].factors.size() + rest.size());
      std::merge(a[i].factors.begin(), a[i].factors.end(), rest.begin(), rest.end(), want.begin());
      all = std::any_of(b.begin(), b.end(), [&](const Monomial& n) {
        return n.factors == want && monomial_below(a[i], n, sums_left);
      });
    }
    if (all) return true;
  }
  return false;
}

}  // namespace

bool below(const Poly& a, const Poly& b) {
  return below_with(a, b, true);
}

int32_t ExprContext::atom(const std::string& fn, const Poly& arg) {
  auto [it, inserted] = ids_.try_emplace({fn, arg}, int32_t(atoms_.size()));
  if (inserted) atoms_.push_back({fn, arg});
  return it->second;
}

Poly ExprContext::input(int index) {
  return {Monomial{false, {atom(fmt::format("in{}", index), {})}}};
}

Poly ExprContext::apply(const std::string& fn, const Poly& arg) {
  return {Monomial{false, {atom(fn, arg)}}};
}

Poly ExprContext::add(const Poly& a, const Poly& b) const {
  Poly out = a;
  out.insert(out.end(), b.begin(), b.end());
  normalize(out);
  return out;
}

Poly ExprContext::mul(const Poly& a, const Poly& b) const {
  Poly out;
  out.reserve(a.size() * b.size());
  for (const Monomial& x : a)
    for (const Monomial& y : b) {
      Monomial m{x.sigma || y.sigma, {}};
      m.factors.resize(x.factors.size() + y.factors.size());
      std::merge(x.factors.begin(), x.factors.end(), y.factors.begin(), y.factors.end(),
                 m.factors.begin());
      out.push_back(std::move(m));
    }
  normalize(out);
  if (out.size() > kMaxMonomials)
    fail("abstract expression: a product of {} monomials is too large to normalise", out.size());
  return out;
}

Poly ExprContext::sum(const Poly& a) const {
  Poly out = a;
  for (Monomial& m : out) m.sigma = true;
  normalize(out);
  return out;
}

Poly ExprContext::inv(const Poly& a) {
  if (a.size() == 1 && !a[0].sigma) {
    Poly out = {Monomial{}};
    for (int32_t f : a[0].factors) {
      const Atom& at = atoms_[size_t(f)];
      // inv(inv(x)) = x
      Poly factor = at.fn == "inv" ? at.arg : apply("inv", {Monomial{false, {f}}});
      out = mul(out, factor);
    }
    return out;
  }
  return apply("inv", a);
}

Poly ExprContext::of_op(const ir::Op& op, const std::vector<Poly>& in) {
  using namespace ir;
  return std::visit(Overloaded{
                        [&](const MatmulOp&) { return sum(mul(in.at(0), in.at(1))); },
                        [&](const UnaryOp& u) -> Poly {
                          switch (u.fn) {
                            case UnaryFn::square: return mul(in.at(0), in.at(0));
                            case UnaryFn::neg:
                            case UnaryFn::mul_scalar: return in.at(0);
                            case UnaryFn::reciprocal: return inv(in.at(0));
                            case UnaryFn::rsqrt: return inv(apply("sqrt", in.at(0)));
                            default: return apply(std::string(unary_name(u.fn)), in.at(0));
                          }
                        },
                        [&](const BinaryOp& b) -> Poly {
                          switch (b.fn) {
                            case BinaryFn::add:
                            case BinaryFn::sub: return add(in.at(0), in.at(1));
                            case BinaryFn::mul: return mul(in.at(0), in.at(1));
                            case BinaryFn::div: return mul(in.at(0), inv(in.at(1)));
                            case BinaryFn::pow:
                              return apply("pow", mul(in.at(0), apply("pow_exponent", in.at(1))));
                          }
                          return {};
                        },
                        [&](const ReduceOp& r) -> Poly {
                          if (r.fn == ReduceFn::max) return apply("max", in.at(0));
                          return sum(in.at(0));
                        },
                        [&](const RmsNormOp& n) -> Poly {
                          Poly y = mul(in.at(0), inv(apply("sqrt", sum(mul(in.at(0), in.at(0))))));
                          return n.has_weight ? mul(y, in.at(1)) : y;
                        },
                        [&](const LayerNormOp& n) -> Poly {
                          Poly y = apply("layer_norm", in.at(0));
                          if (n.has_weight) y = mul(y, in.at(1));
                          if (n.has_bias) y = add(y, in.at(n.has_weight ? 2 : 1));
                          return y;
                        },
                        [&](const SoftmaxOp&) -> Poly {
                          // The safe form: the search builds what the target says.
                          Poly e = apply("exp", add(in.at(0), apply("max", in.at(0))));
                          return mul(e, inv(sum(e)));
                        },
                        [&](const ConcatOp&) -> Poly {
                          Poly out;
                          for (const Poly& p : in) out = add(out, p);
                          return out;
                        },
                        [&](const ReshapeOp&) { return in.at(0); },
                        [&](const PermuteOp&) { return in.at(0); },
                        [&](const auto& other) -> Poly {
                          Poly arg;
                          for (const Poly& p : in) arg = add(arg, p);
                          return apply(std::string(op_name(Op(other))), arg);
                        },
                    },
                    op);
}

Poly ExprContext::of_block_op(const ir::BlockOp& op, const std::vector<Poly>& in, bool invariant) {
  using namespace ir;
  if (const auto* acc = std::get_if<AccumulatorOp>(&op)) {
    switch (acc->fn) {
      case AccumFn::mean:
        if (invariant) return in.at(0);
        return sum(in.at(0));
      // rescaled_sum(v, m) = Σ exp(m_i - M)·v_i, where v_i holds exp(s - m_i)·V with m_i the
      // chunk's max: the abstraction does not tell a chunk's max from the row's (both are
      // max(s)), so v_i is already what the target's exp(s - max s)·V is, and the rescale, which
      // only moves every term to the same max, adds nothing to it.
      case AccumFn::sum:
      case AccumFn::rescaled_sum: return sum(in.at(0));
      case AccumFn::rms: return apply("sqrt", sum(in.at(0)));
      case AccumFn::max: return apply("max", in.at(0));
    }
  }
  if (std::holds_alternative<ReduceToWidthOp>(op)) return sum(in.at(0));
  if (auto shared = shared_kernel_op(op)) return of_op(*shared, in);
  fail("abstract expression: block op {} has no abstraction", block_op_label(op));
}

std::vector<Poly> ExprContext::of_graph(const ir::KernelGraph& graph) {
  std::vector<std::vector<Poly>> values(graph.nodes().size());
  int inputs = 0;
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    const ir::Node& node = graph.nodes()[id];
    if (std::holds_alternative<ir::InputOp>(node.op)) {
      values[id] = {input(inputs++)};
      continue;
    }
    if (std::holds_alternative<ir::FusedOp>(node.op))
      fail("abstract expression: node '{}' is already fused", node.name);
    std::vector<Poly> in;
    for (const ir::TensorRef& t : node.inputs) in.push_back(values[size_t(t.node)][size_t(t.port)]);
    if (std::holds_alternative<ir::SplitOp>(node.op)) {
      values[id].assign(node.outputs.size(), in.at(0));
      continue;
    }
    if (node.outputs.size() > 1) {  // a kernel-level op of several results: one function each
      Poly arg;
      for (const Poly& p : in) arg = add(arg, p);
      for (size_t port = 0; port < node.outputs.size(); ++port)
        values[id].push_back(apply(fmt::format("{}#{}", ir::op_name(node.op), port), arg));
      continue;
    }
    values[id] = {of_op(node.op, in)};
  }
  std::vector<Poly> outputs;
  for (const ir::GraphOutput& out : graph.outputs())
    outputs.push_back(values[size_t(out.tensor.node)][size_t(out.tensor.port)]);
  return outputs;
}

void ExprContext::collect_subterms(const Poly& p) {
  if (std::find(subterms_.begin(), subterms_.end(), p) != subterms_.end()) return;
  subterms_.push_back(p);
  for (const Monomial& m : p)
    for (int32_t f : m.factors) {
      const Poly arg = atoms_[size_t(f)].arg;  // a copy: collecting may intern new atoms
      if (!arg.empty()) collect_subterms(arg);
    }
}

void ExprContext::set_targets(const std::vector<Poly>& targets) {
  targets_ = targets;
  subterms_.clear();
  for (const Poly& t : targets) collect_subterms(t);
}

bool ExprContext::may_be_part(const Poly& p, bool sums_left) const {
  return std::any_of(subterms_.begin(), subterms_.end(),
                     [&](const Poly& s) { return below_with(p, s, sums_left); });
}

std::string ExprContext::format(const Poly& p) const {
  std::vector<std::string> terms;
  for (const Monomial& m : p) {
    std::vector<std::string> factors;
    for (int32_t f : m.factors) {
      const Atom& a = atoms_[size_t(f)];
      factors.push_back(a.arg.empty() ? a.fn : fmt::format("{}({})", a.fn, format(a.arg)));
    }
    std::string body = fmt::format("{}", fmt::join(factors, "·"));
    terms.push_back(m.sigma ? fmt::format("Σ[{}]", body) : body);
  }
  return fmt::format("{}", fmt::join(terms, " + "));
}

}  // namespace yirage::search
