// A Z3 oracle for the pruning question of abstract_expr.h: can this prefix be part of a target?
//
// Where the normal form answers by matching monomials, this oracle states the question the way
// Mirage does: an uninterpreted sort of expressions; functions add, mul, Σ, inv and one per
// opaque function (exp, silu, sqrt, ...); the equivalence axioms of abstract_expr.h as quantified
// formulas,
//   + and · associative and commutative, x + x = x (constant factors are dropped), · distributes
//   over +;  Σ(x)·y = Σ(x·y);  Σ(Σ x) = Σ x;  Σ(x + y) = Σ x + Σ y;  inv(inv(x)) = x;
//   inv(x·y) = inv(x)·inv(y) for x, y monomials without Σ (a predicate "mono")
// (its other axioms, matmul = Σ(a·b), a / b = a·inv(b), rms_norm, softmax, ..., are definitions
// already applied in the ExprContext expressions encoded here); and a relation part(x, y) with
//   part(x, x);  part(x, y) ∧ part(y, z) → part(x, z);  part(x, x + y);  part(x, f(x)) for
//   every function f, inv included;
//   with an op left that sums: part(x, x·y), part(x, Σ x) and part(x + y, Σ x + y) (a term that
//   is constant along the summed dim sums to a multiple of itself);
//   without one: part(x, x·y) only for a y without Σ (a predicate "flat"), the normal form's "no
//   Σ only meets no Σ".
// A query is answered in two ways, each bounded by a Z3 resource limit:
//   - a proof: the axioms with ¬part(p, t) for every target t are unsatisfiable (E-matching over
//     the quantified axioms), so the prefix is part of a target and survives;
//   - a counter-model: the same formulas, instantiated over a finite domain of 2, 3, ... elements,
//     are satisfiable, so the axioms do not make p part of any target and the prefix is cut.
// Neither within the limits is "unknown", and the prefix survives: Z3 never cuts on unknown.
// The limits are resource counts, not wall time, so an answer never depends on machine load, and
// every query builds its formulas in a canonical order in a fresh context, so it never depends on
// which thread asked first: a search stays deterministic.
//
// Results are cached per search under the canonical text of (prefix, targets, sums left), which
// does not depend on any ExprContext's atom ids, so the many work items of one group share them.
//
// On the search targets, Z3 agrees with the normal form (the search's default) wherever it
// decides, except that the axioms make the reciprocal of a part a part (inv(x) ⊑ inv(inv(x)) = x),
// which the normal form's containment does not follow. It leaves some of the normal form's cuts
// unknown, mostly a surplus factor (x·x·y against x·y·z) for which no counter-model of up to 4
// elements turns up within the limits, and its searches take 2-3 orders of magnitude longer in
// the enumeration.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "search/abstract_expr.h"
#include "search/search.h"

namespace yirage::search {

// Z3 resource units per attempt. The normal form's answer picks the attempt made first and its
// budget, never the verdict: proofs of what the normal form keeps get a large budget, as
// E-matching modulo associativity and commutativity is slow on big targets (ntrans's need several
// million); what it cuts is first refuted, and a proof of it is only a cross-check.
struct Z3Limits {
  uint64_t proof_rlimit = 10000000;  // proving what the normal form keeps
  uint64_t model_rlimit = 400000;    // each finite-domain attempt
  uint64_t doubt_rlimit = 400000;    // proving what the normal form cuts and Z3 did not refute
  int max_model_size = 4;            // domains of 2 .. this many elements are tried
};

class Z3Oracle {
 public:
  enum class Verdict : uint8_t { part, not_part, unknown };

  // Throws yirage::Error when the build has no Z3 (z3_available() in search.h).
  explicit Z3Oracle(Z3Limits limits = {});
  ~Z3Oracle();
  Z3Oracle(const Z3Oracle&) = delete;
  Z3Oracle& operator=(const Z3Oracle&) = delete;

  // Whether `p` may be part of one of ctx.targets() (see ExprContext::may_be_part for
  // `sums_left`). Thread-safe; contexts may differ between calls.
  Verdict check(const ExprContext& ctx, const Poly& p, bool sums_left = true);
  bool may_be_part(const ExprContext& ctx, const Poly& p, bool sums_left = true) {
    return check(ctx, p, sums_left) != Verdict::not_part;
  }

  Z3PrunerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yirage::search
