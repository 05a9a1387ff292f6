// Abstract expressions: what a tile computes, up to the equivalence axioms the pruning uses.
//
// Every tile (and kernel tensor) is abstracted to a polynomial: a set of monomials, each a
// multiset of atoms with a flag Σ saying that the monomial sums over something. Atoms are the
// graph inputs and opaque functions of a polynomial: exp, silu, sqrt, inv (1/x), max, ... The
// abstraction drops shapes, reduction dims, constant factors and signs, and normalises with:
//   + and · are associative and commutative; · distributes over +;  a - b ~ a + b
//   Σ(x)·y = Σ(x·y);  Σ(Σ x) = Σ x;  Σ(x + y) = Σ x + Σ y;  matmul(a, b) = Σ(a·b)
//   mean, sum, the sum accumulator = Σ;  the mean of a loop-invariant tile is the tile itself
//   inv(x·y) = inv(x)·inv(y) for a monomial without Σ;  inv(inv(x)) = x;  a / b = a·inv(b)
//   square(x) = x·x;  rsqrt(x) = inv(sqrt(x));  rms accumulator = sqrt(Σ x) (eps dropped)
//   rms_norm(x, w) = x·inv(sqrt(Σ x·x))·w;
//   softmax(x) = exp(x - max(x))·inv(Σ exp(x - max(x))), the safe form and the only one: the plain
//   exp(x)·inv(Σ exp(x)) is a different expression, so the search never proposes it; a
//   rescaled_sum accumulator is Σ of its first operand (block_search.cpp builds the online form)
// A prefix survives when one multiset m completes each of its monomials to a monomial of one
// subterm of the target (a polynomial the target contains, itself included): later ops can only
// multiply the prefix as a whole, add terms, sum, or wrap it in a function. Σ may only meet Σ,
// and no Σ only no Σ once no op left can sum. Because the abstraction is coarser than equality,
// this never cuts a program whose every intermediate tile is, under these axioms, a part of the
// target (the assumption Mirage's pruning makes too: programs that compute and cancel a term are
// not searched). Completeness of a candidate is abstract equality; correctness is the fingerprint
// check's job.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/block_graph.h"
#include "ir/ir.h"

namespace yirage::search {

struct Monomial {
  bool sigma = false;
  std::vector<int32_t> factors;  // atom ids, sorted
  friend auto operator<=>(const Monomial&, const Monomial&) = default;
  friend bool operator==(const Monomial&, const Monomial&) = default;
};

using Poly = std::vector<Monomial>;  // sorted, without duplicates

// Interns atoms, so that equal expressions are equal vectors. One per thread: ids depend on the
// order of interning, but only equality and containment are ever asked of them.
class ExprContext {
 public:
  Poly input(int index);
  Poly apply(const std::string& fn, const Poly& arg);  // an opaque function atom
  Poly add(const Poly& a, const Poly& b) const;
  Poly mul(const Poly& a, const Poly& b) const;
  Poly sum(const Poly& a) const;  // Σ
  Poly inv(const Poly& a);

  // The abstraction of a kernel-level op (also a shared block op) applied to its operands.
  Poly of_op(const ir::Op& op, const std::vector<Poly>& in);
  // Of a block op: shared ops as above, accumulators by the axioms; iterators are inputs.
  // `invariant` says that the accumulated tile is the same in every iteration.
  Poly of_block_op(const ir::BlockOp& op, const std::vector<Poly>& in, bool invariant);
  // Every output of a kernel graph without fused nodes, in output order.
  std::vector<Poly> of_graph(const ir::KernelGraph& graph);

  // Registers the polynomials prefixes are compared with.
  void set_targets(const std::vector<Poly>& targets);
  const std::vector<Poly>& targets() const { return targets_; }
  // Whether `p` may be part of a target (see the header comment). Without `sums_left` (no op
  // that is still allowed can add a Σ), a monomial without Σ must stay below one without Σ.
  bool may_be_part(const Poly& p, bool sums_left = true) const;

  std::string format(const Poly& p) const;

  // An atom's function name (`in<k>` for graph input k) and argument (empty for an input), for
  // encoders of these expressions into other provers.
  const std::string& atom_fn(int32_t id) const { return atoms_[size_t(id)].fn; }
  const Poly& atom_arg(int32_t id) const { return atoms_[size_t(id)].arg; }

 private:
  int32_t atom(const std::string& fn, const Poly& arg);
  void collect_subterms(const Poly& p);

  struct Atom {
    std::string fn;
    Poly arg;
  };
  std::map<std::pair<std::string, Poly>, int32_t> ids_;
  std::vector<Atom> atoms_;
  std::vector<Poly> targets_, subterms_;
};

// Whether every monomial of `a` is below some monomial of `b` (sub-multiset, Σ-compatible).
bool below(const Poly& a, const Poly& b);

}  // namespace yirage::search
