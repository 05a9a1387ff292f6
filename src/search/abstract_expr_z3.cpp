// The Z3 pruning oracle (axioms and method in abstract_expr_z3.h).
#include "search/abstract_expr_z3.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/error.h"

#if YIRAGE_HAVE_Z3
#include <z3++.h>
#endif

namespace yirage::search {
namespace {

// Texts of one context's atoms, monomials and polynomials, each sorted by text below it.
class Canon {
 public:
  explicit Canon(const ExprContext& ctx) : ctx_(ctx) {}

  const std::string& atom(int32_t id) {
    if (auto it = atoms_.find(id); it != atoms_.end()) return it->second;
    const Poly& arg = ctx_.atom_arg(id);
    std::string text = arg.empty() ? ctx_.atom_fn(id) : ctx_.atom_fn(id) + "(" + poly(arg) + ")";
    return atoms_.emplace(id, std::move(text)).first->second;
  }

  std::vector<int32_t> sorted_factors(const Monomial& m) {
    std::vector<int32_t> f = m.factors;
    std::stable_sort(f.begin(), f.end(), [&](int32_t a, int32_t b) { return atom(a) < atom(b); });
    return f;
  }

  std::string monomial(const Monomial& m) {
    std::string text;
    for (int32_t f : sorted_factors(m)) text += (text.empty() ? "" : "·") + atom(f);
    return (m.sigma ? "Σ[" : "[") + text + "]";
  }

  std::vector<const Monomial*> sorted_monomials(const Poly& p) {
    std::vector<std::pair<std::string, const Monomial*>> keyed;
    for (const Monomial& m : p) keyed.emplace_back(monomial(m), &m);
    std::sort(keyed.begin(), keyed.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const Monomial*> out;
    for (const auto& [text, m] : keyed) out.push_back(m);
    return out;
  }

  std::string poly(const Poly& p) {
    std::vector<std::string> terms;
    for (const Monomial& m : p) terms.push_back(monomial(m));
    std::sort(terms.begin(), terms.end());
    std::string text;
    for (const std::string& t : terms) text += (text.empty() ? "" : " + ") + t;
    return text;
  }

 private:
  const ExprContext& ctx_;
  std::map<int32_t, std::string> atoms_;
};

}  // namespace

const char* pruner_name(Pruner pruner) {
  return pruner == Pruner::z3 ? "z3" : "normal_form";
}

#if YIRAGE_HAVE_Z3

namespace {

// The expressions of one query as Z3 terms over `sort`, and the axioms over the functions they
// use. Terms are built in canonical order, so that the same query is the same formula.
class Encoding {
 public:
  Encoding(z3::context& c, z3::sort sort, Canon& canon, const ExprContext& ctx)
      : c_(c),
        e_(sort),
        canon_(canon),
        ctx_(ctx),
        add_(c.function("add", e_, e_, e_)),
        mul_(c.function("mul", e_, e_, e_)),
        sum_(c.function("sum", e_, e_)),
        inv_(c.function("inv", e_, e_)),
        part_(c.function("part", e_, e_, c.bool_sort())),
        flat_(c.function("flat", e_, c.bool_sort())),
        mono_(c.function("mono", e_, c.bool_sort())),
        one_(c.constant("one", e_)) {}

  z3::expr part(const z3::expr& x, const z3::expr& y) const { return part_(x, y); }

  z3::expr poly(const Poly& p) {
    std::optional<z3::expr> out;
    for (const Monomial* m : canon_.sorted_monomials(p)) {
      z3::expr term = monomial(*m);
      out = out ? add_(*out, term) : term;
    }
    return *out;
  }

  // Quantified over the sort when `domain` is empty, else instantiated at every tuple of it.
  void axioms(z3::solver& s, bool sums_left, const std::vector<z3::expr>& domain) const {
    auto q1 = [&](auto f) {
      if (domain.empty()) {
        z3::expr x = c_.constant("x", e_);
        s.add(z3::forall(x, f(x)));
      } else {
        for (const z3::expr& a : domain) s.add(f(a));
      }
    };
    auto q2 = [&](auto f) {
      if (domain.empty()) {
        z3::expr x = c_.constant("x", e_), y = c_.constant("y", e_);
        s.add(z3::forall(x, y, f(x, y)));
      } else {
        for (const z3::expr& a : domain)
          for (const z3::expr& b : domain) s.add(f(a, b));
      }
    };
    auto q3 = [&](auto f) {
      if (domain.empty()) {
        z3::expr x = c_.constant("x", e_), y = c_.constant("y", e_), z = c_.constant("z", e_);
        s.add(z3::forall(x, y, z, f(x, y, z)));
      } else {
        for (const z3::expr& a : domain)
          for (const z3::expr& b : domain)
            for (const z3::expr& d : domain) s.add(f(a, b, d));
      }
    };
    using E = const z3::expr&;
    // + and · are associative and commutative, + is idempotent (constant factors are dropped),
    // and · distributes over +.
    q2([&](E x, E y) { return add_(x, y) == add_(y, x); });
    q3([&](E x, E y, E z) { return add_(add_(x, y), z) == add_(x, add_(y, z)); });
    q1([&](E x) { return add_(x, x) == x; });
    q2([&](E x, E y) { return mul_(x, y) == mul_(y, x); });
    q3([&](E x, E y, E z) { return mul_(mul_(x, y), z) == mul_(x, mul_(y, z)); });
    q3([&](E x, E y, E z) { return mul_(x, add_(y, z)) == add_(mul_(x, y), mul_(x, z)); });
    if (uses_one_) q1([&](E x) { return mul_(one_, x) == x; });
    // Σ(x)·y = Σ(x·y);  Σ(Σ x) = Σ x;  Σ(x + y) = Σ x + Σ y.
    q2([&](E x, E y) { return mul_(sum_(x), y) == sum_(mul_(x, y)); });
    q1([&](E x) { return sum_(sum_(x)) == sum_(x); });
    q2([&](E x, E y) { return sum_(add_(x, y)) == add_(sum_(x), sum_(y)); });
    // inv(inv(x)) = x;  inv(x·y) = inv(x)·inv(y) for monomials without Σ ("mono").
    if (uses_inv_) {
      q1([&](E x) { return inv_(inv_(x)) == x; });
      q2([&](E x, E y) {
        return z3::implies(mono_(x) && mono_(y), inv_(mul_(x, y)) == mul_(inv_(x), inv_(y)));
      });
    }
    for (const z3::expr& in : inputs_) s.add(mono_(in) && flat_(in));
    if (uses_one_) s.add(mono_(one_) && flat_(one_));
    q2([&](E x, E y) { return z3::implies(mono_(x) && mono_(y), mono_(mul_(x, y))); });
    std::vector<z3::func_decl> fns;
    for (const auto& [name, f] : functions_) fns.push_back(f);
    if (uses_inv_) fns.push_back(inv_);
    for (const z3::func_decl& f : fns) q1([&](E x) { return mono_(f(x)) && part_(x, f(x)); });

    q1([&](E x) { return part_(x, x); });
    q3([&](E x, E y, E z) { return z3::implies(part_(x, y) && part_(y, z), part_(x, z)); });
    q2([&](E x, E y) { return part_(x, add_(x, y)); });
    if (sums_left) {
      q2([&](E x, E y) { return part_(x, mul_(x, y)); });
      q1([&](E x) { return part_(x, sum_(x)); });
      q2([&](E x, E y) { return part_(add_(x, y), add_(sum_(x), y)); });
    } else {
      // Nothing left can sum, so only a factor without Σ ("flat") may complete x.
      for (const z3::func_decl& f : fns) q1([&](E x) { return flat_(f(x)); });
      q2([&](E x, E y) { return z3::implies(flat_(x) && flat_(y), flat_(mul_(x, y))); });
      q2([&](E x, E y) { return z3::implies(flat_(x) && flat_(y), flat_(add_(x, y))); });
      q2([&](E x, E y) { return z3::implies(flat_(y), part_(x, mul_(x, y))); });
    }
  }

 private:
  z3::expr atom(int32_t id) {
    if (auto it = atoms_.find(id); it != atoms_.end()) return it->second;
    const std::string& fn = ctx_.atom_fn(id);
    const Poly& arg = ctx_.atom_arg(id);
    std::optional<z3::expr> term;
    if (arg.empty()) {
      term = c_.constant(fn.c_str(), e_);
      inputs_.push_back(*term);
    } else if (fn == "inv") {
      uses_inv_ = true;
      term = inv_(poly(arg));
    } else {
      auto f = functions_.find(fn);
      if (f == functions_.end())
        f = functions_.emplace(fn, c_.function(("fn." + fn).c_str(), e_, e_)).first;
      term = f->second(poly(arg));
    }
    atoms_.emplace(id, *term);
    return *term;
  }

  z3::expr monomial(const Monomial& m) {
    std::optional<z3::expr> out;
    for (int32_t f : canon_.sorted_factors(m)) {
      z3::expr a = atom(f);
      out = out ? mul_(*out, a) : a;
    }
    if (!out) {
      uses_one_ = true;
      out = one_;
    }
    return m.sigma ? sum_(*out) : *out;
  }

  z3::context& c_;
  z3::sort e_;
  Canon& canon_;
  const ExprContext& ctx_;
  z3::func_decl add_, mul_, sum_, inv_, part_, flat_, mono_;
  z3::expr one_;
  std::map<std::string, z3::func_decl> functions_;  // by name: the order the axioms are added in
  std::map<int32_t, z3::expr> atoms_;
  std::vector<z3::expr> inputs_;
  bool uses_one_ = false, uses_inv_ = false;
};

using Verdict = Z3Oracle::Verdict;

// One attempt in a fresh context: a proof over the uninterpreted sort when `domain_size` is 0,
// else a search for a model over that many elements. Returns the verdict it establishes, if any.
std::optional<Verdict> attempt(const ExprContext& ctx, const Poly& p, bool sums_left,
                               int domain_size, uint64_t rlimit) {
  z3::context c;
  std::vector<std::string> names;
  for (int i = 0; i < domain_size; ++i) names.push_back(fmt::format("e{}", i));
  std::vector<const char*> cnames;
  for (const std::string& n : names) cnames.push_back(n.c_str());
  z3::func_decl_vector elements(c), testers(c);
  z3::sort sort = domain_size == 0 ? c.uninterpreted_sort("E")
                                   : c.enumeration_sort("E", unsigned(domain_size), cnames.data(),
                                                        elements, testers);
  Canon canon(ctx);
  Encoding enc(c, sort, canon, ctx);
  z3::solver s(c, z3::solver::simple());
  z3::params params(c);
  params.set("rlimit", unsigned(std::min<uint64_t>(rlimit, UINT32_MAX)));
  s.set(params);
  const z3::expr prefix = enc.poly(p);
  std::vector<std::pair<std::string, const Poly*>> targets;
  for (const Poly& t : ctx.targets()) targets.emplace_back(canon.poly(t), &t);
  std::sort(targets.begin(), targets.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [text, t] : targets) s.add(!enc.part(prefix, enc.poly(*t)));
  std::vector<z3::expr> domain;
  for (unsigned i = 0; i < elements.size(); ++i) domain.push_back(elements[i]());
  enc.axioms(s, sums_left, domain);
  const z3::check_result r = s.check();
  if (domain_size == 0 && r == z3::unsat) return Verdict::part;
  if (domain_size > 0 && r == z3::sat) return Verdict::not_part;
  return std::nullopt;
}

}  // namespace

bool z3_available() {
  return true;
}

// Examples of differences from the normal form kept for the search's notes.
constexpr size_t kMaxDifferences = 4;

struct Z3Oracle::Impl {
  Z3Limits limits;
  std::mutex mutex;
  // A future per key, set once by the thread that asked first; a thread asking meanwhile waits
  // for it rather than running the same query again (work items of one group run side by side).
  std::unordered_map<std::string, std::shared_future<Verdict>> cache;
  Z3PrunerStats stats;
};

Z3Oracle::Z3Oracle(Z3Limits limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
}

Z3Oracle::~Z3Oracle() = default;

Z3Oracle::Verdict Z3Oracle::check(const ExprContext& ctx, const Poly& p, bool sums_left) {
  Canon canon(ctx);
  std::vector<std::string> targets;
  for (const Poly& t : ctx.targets()) targets.push_back(canon.poly(t));
  std::sort(targets.begin(), targets.end());
  // Also the text of the search's notes.
  std::string key = canon.poly(p) + " ⊑ " + fmt::format("{}", fmt::join(targets, " or "));
  if (!sums_left) key += " (nothing left sums)";
  std::promise<Verdict> promise;
  {
    std::unique_lock lock(impl_->mutex);
    ++impl_->stats.queries;
    if (auto it = impl_->cache.find(key); it != impl_->cache.end()) {
      ++impl_->stats.cache_hits;
      const std::shared_future<Verdict> answer = it->second;
      lock.unlock();
      return answer.get();
    }
    impl_->cache.emplace(key, promise.get_future().share());
  }
  // The normal form's answer orders the attempts and sets the proof's budget (Z3Limits); the
  // verdict is whatever Z3 establishes.
  const bool hint = ctx.may_be_part(p, sums_left);
  const Z3Limits& lim = impl_->limits;
  const auto start = std::chrono::steady_clock::now();
  std::optional<Verdict> v;
  try {
    auto prove = [&] {
      return attempt(ctx, p, sums_left, 0, hint ? lim.proof_rlimit : lim.doubt_rlimit);
    };
    auto refute = [&]() -> std::optional<Verdict> {
      for (int n = 2; n <= lim.max_model_size; ++n)
        if (auto r = attempt(ctx, p, sums_left, n, lim.model_rlimit)) return r;
      return std::nullopt;
    };
    v = hint ? prove() : refute();
    if (!v) v = hint ? refute() : prove();
  } catch (const z3::exception& e) {
    const Error error(fmt::format("Z3 pruning oracle: {}", e.msg()));
    promise.set_exception(std::make_exception_ptr(error));  // for the threads waiting on it
    throw error;
  }
  const Verdict verdict = v.value_or(Verdict::unknown);
  std::lock_guard lock(impl_->mutex);
  Z3PrunerStats& st = impl_->stats;
  st.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  switch (verdict) {
    case Verdict::part: ++st.proved; break;
    case Verdict::not_part: ++st.refuted; break;
    case Verdict::unknown: ++st.unknown; break;
  }
  if (verdict != Verdict::unknown && (verdict == Verdict::part) != hint) {
    ++(hint ? st.refuted_but_kept : st.proved_but_cut);
    if (st.differences.size() < kMaxDifferences)
      st.differences.push_back(fmt::format("Z3 {} where the normal form {}: {}",
                                           hint ? "refutes" : "proves", hint ? "keeps" : "cuts",
                                           key));
  }
  promise.set_value(verdict);
  return verdict;
}

Z3PrunerStats Z3Oracle::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

#else  // no Z3 in this build

bool z3_available() {
  return false;
}

struct Z3Oracle::Impl {};

Z3Oracle::Z3Oracle(Z3Limits) {
  fail("the Z3 pruner is not in this build (configure with libz3-dev installed, YIRAGE_Z3=ON)");
}

Z3Oracle::~Z3Oracle() = default;

Z3Oracle::Verdict Z3Oracle::check(const ExprContext&, const Poly&, bool) {
  fail("the Z3 pruner is not in this build");
}

Z3PrunerStats Z3Oracle::stats() const {
  return {};
}

#endif

}  // namespace yirage::search
