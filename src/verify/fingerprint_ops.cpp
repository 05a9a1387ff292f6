// Fingerprint semantics of every op: what each real-valued op becomes over Z_p × Z_q.
//
// The fragment (exact, complete): +, -, ·, matmul, sum/mean (mean divides by the extent exactly),
// division (by the field inverse; a zero divisor makes the trial degenerate and it is drawn
// again), scalars (every finite double is a dyadic rational, mapped exactly: 0.5 is the inverse
// of 2, eps is the exact binary value the double holds), shape ops (exact moves), and
// exp(x) = ω^(x mod q) in Z_p, which has no q-residue: a tensor that depends on an exp is
// compared on p alone, and exp of such a tensor (nested exp) becomes a UF instead.
//
// Outside the fragment, ops are uninterpreted functions (UFs): UF_f(x) is a keyed hash of
// (f, x mod p), drawn afresh each trial, equal for equal arguments. That is sound (a UF is an
// arbitrary function, so programs that agree for every interpretation of it agree for the true
// one) and incomplete (sqrt(x)^2 = x is not recognised). Where an op is definable from the
// fragment, it is defined so, which recognises more equivalences at no cost in soundness:
//   silu(x)    = x / (1 + exp(-x))          exact; 1 + ω^t is never 0 since -1 is not a power of ω
//   sqrt(x)    = UF_sqrt(x)
//   rsqrt(x)   = 1 / UF_sqrt(x)             one canonical form: x·rsqrt(y) = x / sqrt(y) exactly,
//                                           and the rms accumulator is UF_sqrt of a mean too
//   reciprocal = 1 / x, square = x·x, neg, mul_scalar: in the fragment
//   gelu, relu = UF_gelu, UF_relu;  pow(a, b) = UF_pow(a, b)
//   rms_norm   = x / UF_sqrt(mean(x²) + eps) · w
//   layer_norm = (x - μ) / UF_sqrt(mean((x - μ)²) + eps) · w + b, μ = mean(x)
//   softmax    = exp(x - M) / Σ exp(x - M), M the row max (below); M cancels in the ratio, so
//                softmax matches exp(x)/Σexp(x) and any other max, e.g. an online rescale's
//   rope       = the exact rotation (a·c - b·s, a·s + b·c), with (c, s) a UF of the angle's
//                exact description (position, theta, 2i/D in lowest terms); positions are real
//                integers, the same in both programs
//   embedding  = an exact gather by the integer ids
//   quant_matmul(x, w) = UF_qa(x) · W, W[k][n] = UF_qw(w[n][k mod row bytes], k): a matmul of
//                uninterpreted values, since quantizing activations per block and decoding the
//                weight's bytes are outside the fragment; both programs hold the same node
//   paged_attention(q, k, v, pool, table, positions) = a UF of all of its inputs at once: every
//                output element is UF_pa(digest of every input element, output, index). The
//                appends, the gather through the table and the softmax are all data-dependent,
//                so nothing of them is modelled; two programs agree on it only where they apply
//                the op to the same inputs, which is all the search needs of a kernel-level op
//
// max is a UF of the multiset it ranges over, made to commute with regrouping: a max tensor holds
// the max-set fingerprint F(S) = Σ_{x∈S} h(x), h a UF, and a max over maxes adds their
// fingerprints, so max(max(A), max(B)) = max(A ∪ B) for the disjoint chunks a fused loop takes.
// Its value, where an op reads it, is UF_max_value(F). Sound: a sum of random-oracle values
// tells multisets apart; incomplete where real max is idempotent (max(x, x) = x is not seen).
//
// Degrees. Each tensor carries a bound on the degree of the numerator and denominator of its
// elements as rational functions of the inputs, UF outputs and exp atoms, and a mask of dims
// along which its denominators do not vary (so a sum along them keeps one common denominator,
// as for x / rms(x) summed over the normalized dim). The driver turns these into the bound.
#include "verify/fingerprint_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "ir/splitmix.h"
#include "support/error.h"
#include "verify/indexing.h"

namespace yirage::verify::fp {
namespace {

using field::kP;
using field::kQ;
using ir::Dims;
using ir::TensorType;

// ---- index maps -----------------------------------------------------------------------------

// For every element of `dims`, in row-major order, the offset Σ coord[j]·stride[j].
std::vector<int64_t> strided_map(const Dims& dims, const Dims& stride) {
  std::vector<int64_t> map(size_t(ir::num_elements(dims)));
  Dims coord(dims.size(), 0);
  int64_t offset = 0;
  for (int64_t& entry : map) {
    entry = offset;
    for (size_t j = dims.size(); j-- > 0;) {
      ++coord[j];
      offset += stride[j];
      if (coord[j] < dims[j]) break;
      offset -= stride[j] * dims[j];
      coord[j] = 0;
    }
  }
  return map;
}

// For every element of `out`, the element of a tensor of shape `in` that broadcasting reads.
std::vector<int64_t> broadcast_map(const Dims& out, const Dims& in) {
  const size_t lead = out.size() - in.size();
  Dims stride(out.size(), 0);
  int64_t s = 1;
  for (size_t j = in.size(); j-- > 0;) {
    if (in[j] != 1) stride[lead + j] = s;
    s *= in[j];
  }
  return strided_map(out, stride);
}

// ---- degrees and uniform-denominator masks ----------------------------------------------------

constexpr uint32_t kAllBits = ~0u;

bool bit(uint32_t mask, int j) {
  return (mask >> j) & 1u;
}

// x's uniform mask over the dims of a broadcast result of shape `out`.
uint32_t aligned_bits(const FTensor& x, const Dims& out) {
  if (x.degree.den == 0) return kAllBits;
  const int lead = int(out.size()) - x.rank();
  uint32_t mask = 0;
  for (int j = 0; j < int(out.size()); ++j) {
    const int i = j - lead;
    if (i < 0 || x.type.dims[size_t(i)] == 1 || bit(x.uniform, i)) mask |= 1u << j;
  }
  return mask;
}

// The dims of `out` along which x does not vary because it is broadcast there.
uint32_t broadcast_bits(const FTensor& x, const Dims& out) {
  const int lead = int(out.size()) - x.rank();
  uint32_t mask = 0;
  for (int j = 0; j < int(out.size()); ++j)
    if (j < lead || x.type.dims[size_t(j - lead)] == 1) mask |= 1u << j;
  return mask;
}

Degree add_degree(Degree a, Degree b) {
  return {std::max(a.num + b.den, b.num + a.den), a.den + b.den};
}
Degree mul_degree(Degree a, Degree b) {
  return {a.num + b.num, a.den + b.den};
}
Degree div_degree(Degree a, Degree b) {
  return {a.num + b.den, a.den + b.num};
}

// A tensor whose elements are fresh variables: UF outputs, exp atoms.
void mark_fresh(FTensor& t) {
  t.degree = {1, 0};
  t.uniform = kAllBits;
}

// ---- element arithmetic ---------------------------------------------------------------------

// Inverts every element in place with one field inversion (Montgomery's trick). A zero makes the
// trial degenerate; q-residues are checked only where they hold values.
void invert_all(std::vector<Pair>& v, bool check_q, const Trial& trial) {
  std::vector<Pair> prefix(v.size());
  Pair running{1, 1};
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].p == 0 || (check_q && v[i].q == 0))
      throw DegenerateTrial{fmt::format("{}: a divisor is zero", trial.location())};
    if (!check_q) v[i].q = 1;  // no value there; keeps the running product invertible
    prefix[i] = running;
    running = field::mul(running, v[i]);
  }
  Pair inverse{field::inv_mod(running.p, kP), field::inv_mod(running.q, kQ)};
  for (size_t i = v.size(); i-- > 0;) {
    const Pair element = v[i];
    v[i] = field::mul(inverse, prefix[i]);
    inverse = field::mul(inverse, element);
  }
}

// An unfilled tensor of `type` with like's kind, degree and mask, for ops that move or negate
// like's elements.
FTensor same_kind(const FTensor& like, TensorType type) {
  FTensor out(std::move(type));
  out.has_q = like.has_q;
  out.max_set = like.max_set;
  out.degree = like.degree;
  out.uniform = like.uniform;
  return out;
}

// x itself, or its max sets materialized into `storage`: ops read values without copying them.
const FTensor& values_of(const FTensor& x, std::optional<FTensor>& storage, Trial& trial) {
  if (!x.max_set) return x;
  return storage.emplace(materialize(x, trial));
}

// A UF applied to every element of x.
FTensor uf_map(Uf fn, const FTensor& x, Trial& trial) {
  FTensor out(x.type);
  for (size_t i = 0; i < x.v.size(); ++i) out.v[i] = trial.uf(fn, {x.v[i].p});
  mark_fresh(out);
  Accounting& acc = trial.accounting();
  acc.uf_calls += double(x.size());
  acc.uf_arg_degree = std::max(acc.uf_arg_degree, x.degree.num + x.degree.den);
  return out;
}

FTensor negated(const FTensor& x) {
  FTensor out = same_kind(x, x.type);
  for (size_t i = 0; i < x.v.size(); ++i) out.v[i] = field::sub(Pair{}, x.v[i]);
  return out;
}

// Sums x along `dim`, keeping it as extent 1.
FTensor sum_along(const FTensor& x, int dim) {
  Dims dims = x.type.dims;
  dims[size_t(dim)] = 1;
  FTensor out = same_kind(x, {x.type.dtype, dims});
  const AxisView view(x.type.dims, dim);
  for (int64_t o = 0; o < view.outer; ++o)
    for (int64_t i = 0; i < view.inner; ++i) {
      Pair acc;
      for (int64_t k = 0; k < view.extent; ++k)
        acc = field::add(acc, x.v[size_t(view.index(o, k, i))]);
      out.v[size_t(o * view.inner + i)] = acc;
    }
  out.degree = sum_degree(x.degree, double(view.extent), bit(x.uniform, dim));
  out.uniform = out.degree.den == 0 ? kAllBits : (x.uniform | (1u << dim));
  return out;
}

FTensor scaled(const FTensor& x, Pair factor) {
  FTensor out = same_kind(x, x.type);
  for (size_t i = 0; i < x.v.size(); ++i) out.v[i] = field::mul(x.v[i], factor);
  return out;
}

Pair inverse_of_count(int64_t n) {
  return {field::inv_mod(uint64_t(n) % kP, kP), field::inv_mod(uint64_t(n) % kQ, kQ)};
}

// Maps a uniform mask through a reshape: dims of `from` and `to` fall into blocks of equal
// element count, and a block of `to` is uniform when all of its block of `from` is.
uint32_t reshape_bits(const Dims& from, uint32_t bits, const Dims& to) {
  std::vector<int> f, t;  // the dims of extent > 1; those of extent 1 are trivially uniform
  for (int j = 0; j < int(from.size()); ++j)
    if (from[size_t(j)] > 1) f.push_back(j);
  for (int j = 0; j < int(to.size()); ++j)
    if (to[size_t(j)] > 1) t.push_back(j);
  uint32_t out = trivial_bits(to);
  size_t i = 0, j = 0;
  while (i < f.size() && j < t.size()) {
    const size_t i0 = i, j0 = j;
    int64_t pf = from[size_t(f[i++])], pt = to[size_t(t[j++])];
    while (pf != pt) {
      if (pf < pt)
        pf *= from[size_t(f[i++])];
      else
        pt *= to[size_t(t[j++])];
    }
    bool uniform = true;
    for (size_t a = i0; a < i; ++a) uniform = uniform && bit(bits, f[a]);
    if (uniform)
      for (size_t b = j0; b < j; ++b) out |= 1u << t[b];
  }
  return out;
}

}  // namespace

FTensor divided_by_count(const FTensor& x, int64_t n) {
  return scaled(x, inverse_of_count(n));
}

FTensor::FTensor(ir::TensorType t) : type(std::move(t)), v(size_t(ir::num_elements(type.dims))) {}

Degree sum_degree(Degree term, double count, bool uniform) {
  if (uniform || term.den == 0) return term;
  // Σ_k N_k / D_k over count terms with distinct denominators.
  return {term.num + (count - 1) * term.den, count * term.den};
}

uint32_t trivial_bits(const Dims& dims) {
  uint32_t mask = 0;
  for (size_t j = 0; j < dims.size(); ++j)
    if (dims[j] == 1) mask |= 1u << j;
  return mask;
}

namespace {

// ω is a random square other than 1: squares of 2 .. p-2 are exactly the elements of order q.
uint64_t draw_omega(std::mt19937_64& rng) {
  const uint64_t h = std::uniform_int_distribution<uint64_t>(2, kP - 2)(rng);
  return field::mul_mod(h, h, kP);
}

}  // namespace

Trial::Trial(std::seed_seq& seed) : rng_(seed), key_{rng_(), rng_()}, powers_(draw_omega(rng_)) {}

Pair Trial::uf(Uf fn, std::initializer_list<uint64_t> args) const {
  uint64_t words[8];
  if (args.size() > 6) fail("fingerprint: a UF takes at most 6 arguments, got {}", args.size());
  size_t n = 0;
  words[n++] = uint64_t(fn);
  for (uint64_t a : args) words[n++] = a;
  // 128 hash bits per residue keep the reduction's bias below 2^-64.
  uint64_t h[4];
  for (uint64_t tag = 0; tag < 4; ++tag) {
    words[n] = tag;
    h[tag] = field::siphash(key_, words, n + 1);
  }
  return {field::reduce_p((field::u128(h[0]) << 64) | h[1]),
          field::reduce_q((field::u128(h[2]) << 64) | h[3])};
}

FTensor constant(double value, ir::DType dtype, Trial& trial) {
  const auto p = field::residue_of(value, kP), q = field::residue_of(value, kQ);
  if (!p || !q)
    fail("fingerprint: {}: the scalar {} is not a finite number", trial.location(), value);
  trial.accounting().note_constant(value);
  FTensor c({dtype, {}});
  c.v[0] = {*p, *q};
  c.degree = {0, 0};
  return c;
}

FTensor materialize(const FTensor& x, Trial& trial) {
  if (!x.max_set) return x;
  return uf_map(Uf::max_value, x, trial);
}

FTensor max_elements(const FTensor& x, Trial& trial) {
  if (x.max_set) return x;
  FTensor out = uf_map(Uf::max_element, x, trial);
  out.max_set = true;
  return out;
}

FTensor uf_sqrt(const FTensor& x, Trial& trial) {
  std::optional<FTensor> storage;
  return uf_map(Uf::sqrt, values_of(x, storage, trial), trial);
}

FTensor exp(const FTensor& x0, Trial& trial) {
  std::optional<FTensor> storage;
  const FTensor& x = values_of(x0, storage, trial);
  if (!x.has_q) return uf_map(Uf::nested_exp, x, trial);
  FTensor out(x.type);
  for (size_t i = 0; i < x.v.size(); ++i) out.v[i] = {trial.powers().pow(x.v[i].q), 0};
  out.has_q = false;
  mark_fresh(out);
  Accounting& acc = trial.accounting();
  acc.uses_exp = true;
  acc.exp_calls += double(x.size());
  acc.exp_arg_degree = std::max(acc.exp_arg_degree, x.degree.num + x.degree.den);
  return out;
}

FTensor binary(ir::BinaryFn fn, const FTensor& a0, const FTensor& b0, const TensorType& out_type,
               Trial& trial) {
  std::optional<FTensor> sa, sb;
  const FTensor &a = values_of(a0, sa, trial), &b = values_of(b0, sb, trial);
  const Dims& od = out_type.dims;
  const std::vector<int64_t> ia = broadcast_map(od, a.type.dims),
                             ib = broadcast_map(od, b.type.dims);
  FTensor out(out_type);
  out.has_q = a.has_q && b.has_q;
  out.uniform = aligned_bits(a, od) & aligned_bits(b, od);
  auto each = [&](auto op) {
    for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = op(a.v[size_t(ia[i])], b.v[size_t(ib[i])]);
  };
  switch (fn) {
    case ir::BinaryFn::add:
      each(field::add);
      out.degree = add_degree(a.degree, b.degree);
      break;
    case ir::BinaryFn::sub:
      each(field::sub);
      out.degree = add_degree(a.degree, b.degree);
      break;
    case ir::BinaryFn::mul:
      each(field::mul);
      out.degree = mul_degree(a.degree, b.degree);
      break;
    case ir::BinaryFn::div: {
      std::vector<Pair> inverses = b.v;
      invert_all(inverses, b.has_q, trial);
      trial.accounting().zero_divisor_risk += double(b.size()) * b.degree.num;
      for (size_t i = 0; i < out.v.size(); ++i)
        out.v[i] = field::mul(a.v[size_t(ia[i])], inverses[size_t(ib[i])]);
      out.degree = div_degree(a.degree, b.degree);
      // The new denominator is b's numerator: uniform only where b is broadcast.
      out.uniform = aligned_bits(a, od) & (b.degree.num == 0 ? kAllBits : broadcast_bits(b, od));
      break;
    }
    case ir::BinaryFn::pow: {
      for (size_t i = 0; i < out.v.size(); ++i)
        out.v[i] = trial.uf(Uf::pow, {a.v[size_t(ia[i])].p, b.v[size_t(ib[i])].p});
      out.has_q = true;
      mark_fresh(out);
      Accounting& acc = trial.accounting();
      acc.uf_calls += double(out.size());
      acc.uf_arg_degree =
          std::max({acc.uf_arg_degree, a.degree.num + a.degree.den, b.degree.num + b.degree.den});
      break;
    }
  }
  if (out.degree.den == 0) out.uniform = kAllBits;
  return out;
}

FTensor unary(const ir::UnaryOp& op, const FTensor& x0, Trial& trial) {
  using ir::BinaryFn;
  using ir::UnaryFn;
  std::optional<FTensor> storage;
  const FTensor& x = values_of(x0, storage, trial);
  auto reciprocal = [&](const FTensor& t) {
    return binary(BinaryFn::div, constant(1.0, t.type.dtype, trial), t, t.type, trial);
  };
  switch (op.fn) {
    case UnaryFn::exp: return exp(x, trial);
    case UnaryFn::silu: {
      const FTensor one_plus = binary(BinaryFn::add, constant(1.0, x.type.dtype, trial),
                                      exp(negated(x), trial), x.type, trial);
      return binary(BinaryFn::div, x, one_plus, x.type, trial);
    }
    case UnaryFn::gelu: return uf_map(Uf::gelu, x, trial);
    case UnaryFn::relu: return uf_map(Uf::relu, x, trial);
    case UnaryFn::sqrt: return uf_sqrt(x, trial);
    case UnaryFn::rsqrt: return reciprocal(uf_sqrt(x, trial));
    case UnaryFn::square: return binary(BinaryFn::mul, x, x, x.type, trial);
    case UnaryFn::neg: return negated(x);
    case UnaryFn::reciprocal: return reciprocal(x);
    case UnaryFn::mul_scalar:
      return binary(BinaryFn::mul, x, constant(op.scalar, x.type.dtype, trial), x.type, trial);
  }
  fail("fingerprint: {}: unary op with unknown function code {}", trial.location(), int(op.fn));
}

FTensor reduce(const ir::ReduceOp& op, const FTensor& x, const TensorType& out, Trial& trial) {
  if (op.fn == ir::ReduceFn::max) {
    FTensor m = sum_along(max_elements(x, trial), op.dim);
    mark_fresh(m);
    return reshape(m, out);
  }
  std::optional<FTensor> storage;
  FTensor sum = sum_along(values_of(x, storage, trial), op.dim);
  if (op.fn == ir::ReduceFn::mean) sum = scaled(sum, inverse_of_count(x.type.dims[size_t(op.dim)]));
  return reshape(sum, out);
}

namespace {

// Rows m .. m+R-1 of C = A·B for one batch entry (row-major A [M, K], B [K, N], C [M, N]), in both
// fields. Per column, the R sums stay in registers over a chunk of 15 k: a product of residues is
// below 2^124, so 15 of them on top of a reduced value (below 2^62) fit in 128 bits. A block of
// 64 columns keeps the chunk of B it reads (15 rows) in the L1 cache, and each B element read
// serves R rows.
template <int R>
void matmul_rows(const Pair* a, const Pair* b, Pair* c, int64_t m, int64_t k_size, int64_t n_size) {
  constexpr int64_t kChunk = 15, kCols = 64;
  for (int64_t n0 = 0; n0 < n_size; n0 += kCols) {
    const int64_t cols = std::min(kCols, n_size - n0);
    uint64_t rp[R][kCols] = {}, rq[R][kCols] = {};
    for (int64_t k0 = 0; k0 < k_size; k0 += kChunk) {
      const int64_t k1 = std::min(k_size, k0 + kChunk);
      for (int64_t j = 0; j < cols; ++j) {
        field::u128 sp[R], sq[R];
        for (int r = 0; r < R; ++r) sp[r] = rp[r][j], sq[r] = rq[r][j];
        for (int64_t k = k0; k < k1; ++k) {
          const Pair y = b[k * n_size + n0 + j];
          for (int r = 0; r < R; ++r) {
            const Pair x = a[(m + r) * k_size + k];
            sp[r] += field::u128(x.p) * y.p;
            sq[r] += field::u128(x.q) * y.q;
          }
        }
        for (int r = 0; r < R; ++r)
          rp[r][j] = field::reduce_p(sp[r]), rq[r][j] = field::reduce_q(sq[r]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < cols; ++j) c[(m + r) * n_size + n0 + j] = {rp[r][j], rq[r][j]};
  }
}

void matmul_batch(const Pair* a, const Pair* b, Pair* c, int64_t m_size, int64_t k_size,
                  int64_t n_size) {
  int64_t m = 0;
  for (; m + 4 <= m_size; m += 4) matmul_rows<4>(a, b, c, m, k_size, n_size);
  for (; m + 2 <= m_size; m += 2) matmul_rows<2>(a, b, c, m, k_size, n_size);
  for (; m < m_size; ++m) matmul_rows<1>(a, b, c, m, k_size, n_size);
}

// Whether x's denominators are the same along dim j (or there are none).
bool uniform_along(const FTensor& x, int j) {
  return x.degree.den == 0 || x.type.dims[size_t(j)] == 1 || bit(x.uniform, j);
}

}  // namespace

FTensor matmul(const FTensor& a0, const FTensor& b0, const TensorType& out_type, Trial& trial) {
  std::optional<FTensor> sa, sb;
  const FTensor &a = values_of(a0, sa, trial), &b = values_of(b0, sb, trial);
  const Dims &ad = a.type.dims, &bd = b.type.dims, &od = out_type.dims;
  const int ra = a.rank(), rb = b.rank(), ro = int(od.size());
  const int64_t m_size = ad[size_t(ra - 2)], k_size = ad.back(), n_size = bd.back();
  const Dims batch(od.begin(), od.end() - 2);
  const std::vector<int64_t> a_base = broadcast_map(batch, Dims(ad.begin(), ad.end() - 2));
  const std::vector<int64_t> b_base = broadcast_map(batch, Dims(bd.begin(), bd.end() - 2));
  FTensor out(out_type);
  out.has_q = a.has_q && b.has_q;
  for (size_t bi = 0; bi < a_base.size(); ++bi) {
    matmul_batch(a.v.data() + a_base[bi] * m_size * k_size,
                 b.v.data() + b_base[bi] * k_size * n_size,
                 out.v.data() + int64_t(bi) * m_size * n_size, m_size, k_size, n_size);
  }
  const bool common_den = uniform_along(a, ra - 1) && uniform_along(b, rb - 2);
  out.degree = sum_degree(mul_degree(a.degree, b.degree), double(k_size), common_den);
  if (out.degree.den == 0) return out;
  out.uniform = 0;
  for (int j = 0; j < ro - 2; ++j) {
    const int ja = j - (ro - ra), jb = j - (ro - rb);
    if ((ja < 0 || uniform_along(a, ja)) && (jb < 0 || uniform_along(b, jb)))
      out.uniform |= 1u << j;
  }
  if (uniform_along(a, ra - 2)) out.uniform |= 1u << (ro - 2);
  if (uniform_along(b, rb - 1)) out.uniform |= 1u << (ro - 1);
  return out;
}

FTensor softmax(int dim, const FTensor& x0, Trial& trial) {
  std::optional<FTensor> storage;
  const FTensor& x = values_of(x0, storage, trial);
  Dims kept = x.type.dims;
  kept[size_t(dim)] = 1;
  const FTensor max = reduce({ir::ReduceFn::max, dim, true}, x, {x.type.dtype, kept}, trial);
  const FTensor e = exp(binary(ir::BinaryFn::sub, x, max, x.type, trial), trial);
  return binary(ir::BinaryFn::div, e, sum_along(e, dim), x.type, trial);
}

namespace {

// A norm's input seen as [rows, group] with the normalized dims last.
TensorType norm_rows(const FTensor& x, const Dims& normalized) {
  const int64_t group = ir::num_elements(normalized);
  return {x.type.dtype, {x.size() / group, group}};
}

FTensor mean_of_row(const FTensor& x) {
  return scaled(sum_along(x, 1), inverse_of_count(x.type.dims[1]));
}

}  // namespace

FTensor rms_norm(const ir::RmsNormOp& op, const std::vector<const FTensor*>& in, Trial& trial) {
  using ir::BinaryFn;
  std::optional<FTensor> storage;
  const FTensor& x = values_of(*in[0], storage, trial);
  const TensorType rows = norm_rows(x, op.normalized_shape);
  const FTensor xr = reshape(x, rows);
  FTensor ms = mean_of_row(binary(BinaryFn::mul, xr, xr, rows, trial));
  ms = binary(BinaryFn::add, ms, constant(op.eps, x.type.dtype, trial), ms.type, trial);
  FTensor y = reshape(binary(BinaryFn::div, xr, uf_sqrt(ms, trial), rows, trial), x.type);
  if (op.has_weight) y = binary(BinaryFn::mul, y, *in[1], x.type, trial);
  return y;
}

FTensor layer_norm(const ir::LayerNormOp& op, const std::vector<const FTensor*>& in, Trial& trial) {
  using ir::BinaryFn;
  std::optional<FTensor> storage;
  const FTensor& x = values_of(*in[0], storage, trial);
  const TensorType rows = norm_rows(x, op.normalized_shape);
  const FTensor xr = reshape(x, rows);
  const FTensor centered = binary(BinaryFn::sub, xr, mean_of_row(xr), rows, trial);
  FTensor var = mean_of_row(binary(BinaryFn::mul, centered, centered, rows, trial));
  var = binary(BinaryFn::add, var, constant(op.eps, x.type.dtype, trial), var.type, trial);
  FTensor y = reshape(binary(BinaryFn::div, centered, uf_sqrt(var, trial), rows, trial), x.type);
  size_t next = 1;
  if (op.has_weight) y = binary(BinaryFn::mul, y, *in[next++], x.type, trial);
  if (op.has_bias) y = binary(BinaryFn::add, y, *in[next], x.type, trial);
  return y;
}

FTensor concat(int dim, const std::vector<const FTensor*>& in, const TensorType& out_type,
               Trial& trial) {
  const bool all_max_sets =
      std::all_of(in.begin(), in.end(), [](const FTensor* t) { return t->max_set; });
  FTensor out(out_type);
  out.max_set = all_max_sets;
  out.degree = {0, 0};
  const AxisView out_view(out_type.dims, dim);
  int64_t offset = 0;
  for (const FTensor* part0 : in) {
    std::optional<FTensor> storage;
    const FTensor& part = all_max_sets ? *part0 : values_of(*part0, storage, trial);
    out.has_q = out.has_q && part.has_q;
    out.degree = {std::max(out.degree.num, part.degree.num),
                  std::max(out.degree.den, part.degree.den)};
    out.uniform &= part.degree.den == 0 ? kAllBits : part.uniform;
    const AxisView view(part.type.dims, dim);
    for (int64_t o = 0; o < view.outer; ++o)
      for (int64_t k = 0; k < view.extent; ++k)
        for (int64_t i = 0; i < view.inner; ++i)
          out.v[size_t(out_view.index(o, offset + k, i))] = part.v[size_t(view.index(o, k, i))];
    offset += view.extent;
  }
  // Different parts may have different denominators along the concat dim.
  out.uniform = out.degree.den == 0 ? kAllBits : out.uniform & ~(1u << dim);
  return out;
}

std::vector<FTensor> split(int dim, const FTensor& x, const std::vector<TensorType>& out_types) {
  std::vector<FTensor> outs;
  const AxisView in_view(x.type.dims, dim);
  int64_t offset = 0;
  for (const TensorType& type : out_types) {
    FTensor part = same_kind(x, type);
    const AxisView view(type.dims, dim);
    for (int64_t o = 0; o < view.outer; ++o)
      for (int64_t k = 0; k < view.extent; ++k)
        for (int64_t i = 0; i < view.inner; ++i)
          part.v[size_t(view.index(o, k, i))] = x.v[size_t(in_view.index(o, offset + k, i))];
    offset += view.extent;
    outs.push_back(std::move(part));
  }
  return outs;
}

FTensor reshape(const FTensor& x, const TensorType& out_type) {
  FTensor out = same_kind(x, out_type);
  out.v = x.v;
  out.uniform = x.degree.den == 0 ? kAllBits : reshape_bits(x.type.dims, x.uniform, out_type.dims);
  return out;
}

FTensor permute(const std::vector<int>& perm, const FTensor& x, const TensorType& out_type) {
  const Dims in_strides = ir::row_major_strides(x.type.dims);
  Dims stride(perm.size());
  uint32_t uniform = 0;
  for (size_t j = 0; j < perm.size(); ++j) {
    stride[j] = in_strides[size_t(perm[j])];
    if (bit(x.uniform, perm[j])) uniform |= 1u << j;
  }
  FTensor out = same_kind(x, out_type);
  const std::vector<int64_t> from = strided_map(out_type.dims, stride);
  for (size_t i = 0; i < from.size(); ++i) out.v[i] = x.v[size_t(from[i])];
  out.uniform = x.degree.den == 0 ? kAllBits : uniform;
  return out;
}

FTensor embedding(const FTensor& table, const FTensor& ids, const TensorType& out_type) {
  const int64_t vocab = table.type.dims[0], width = table.type.dims[1];
  FTensor out = same_kind(table, out_type);
  for (int64_t t = 0; t < ids.size(); ++t) {
    const uint64_t id = ids.v[size_t(t)].p;  // drawn in [0, vocab) by the driver
    if (id >= uint64_t(vocab))
      fail("fingerprint: embedding id {} is outside the table's rows [0, {})", id, vocab);
    std::copy_n(&table.v[size_t(int64_t(id) * width)], width, &out.v[size_t(t * width)]);
  }
  if (table.degree.den != 0) {
    const int last = int(out_type.dims.size()) - 1;
    const uint32_t id_dims = (1u << last) - 1;
    out.uniform = (bit(table.uniform, 0) ? id_dims : 0) | (bit(table.uniform, 1) ? 1u << last : 0);
  }
  return out;
}

FTensor quant_matmul(const FTensor& x0, const FTensor& w0, const TensorType& out_type,
                     Trial& trial) {
  std::optional<FTensor> sx, sw;
  const FTensor &x = values_of(x0, sx, trial), &w = values_of(w0, sw, trial);
  const int64_t k = x.type.dims.back(), n = w.type.dims[0], row = w.type.dims[1];
  FTensor weight({out_type.dtype, {k, n}});
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j)
      weight.v[size_t(i * n + j)] =
          trial.uf(Uf::quant_weight, {w.v[size_t(j * row + i % row)].p, uint64_t(i)});
  mark_fresh(weight);
  trial.accounting().uf_calls += double(weight.size());
  return matmul(uf_map(Uf::quant_activation, x, trial), weight, out_type, trial);
}

std::vector<FTensor> paged_attention(const std::vector<const FTensor*>& in,
                                     const std::vector<TensorType>& out, Trial& trial) {
  uint64_t digest = 0;
  Accounting& acc = trial.accounting();
  for (const FTensor* x0 : in) {
    std::optional<FTensor> storage;
    const FTensor& x = values_of(*x0, storage, trial);
    for (const Pair& e : x.v) digest = ir::splitmix64(digest ^ e.p);
    acc.uf_arg_degree = std::max(acc.uf_arg_degree, x.degree.num + x.degree.den);
  }
  std::vector<FTensor> results;
  for (size_t o = 0; o < out.size(); ++o) {
    FTensor& r = results.emplace_back(out[o]);
    for (size_t i = 0; i < r.v.size(); ++i)
      r.v[i] = trial.uf(Uf::paged_attention, {digest, uint64_t(o), uint64_t(i)});
    mark_fresh(r);
    acc.uf_calls += double(r.size());
  }
  return results;
}

FTensor rope(const ir::RopeOp& op, const FTensor& x0, const FTensor& positions, Trial& trial) {
  std::optional<FTensor> storage;
  const FTensor& x = values_of(x0, storage, trial);
  const Dims& d = x.type.dims;
  const int r = x.rank();
  const int64_t seq = d[size_t(r - 3)], heads = d[size_t(r - 2)], head_dim = d.back();
  const int64_t half = head_dim / 2, outer = x.size() / (seq * heads * head_dim);
  const uint64_t theta = std::bit_cast<uint64_t>(op.theta);
  FTensor out = same_kind(x, x.type);
  for (int64_t s = 0; s < seq; ++s) {
    const uint64_t pos = positions.v[size_t(s)].p;
    for (int64_t i = 0; i < half; ++i) {
      // The angle pos·theta^(-2i/D), named exactly: the exponent 2i/D in lowest terms.
      const int64_t g = std::gcd(2 * i, head_dim);
      const uint64_t num = uint64_t(2 * i / g), den = uint64_t(head_dim / g);
      const Pair cos = trial.uf(Uf::rope_angle, {pos, theta, num, den, 0});
      const Pair sin = trial.uf(Uf::rope_angle, {pos, theta, num, den, 1});
      const int64_t ia = op.style == ir::RopeStyle::interleaved ? 2 * i : i;
      const int64_t ib = op.style == ir::RopeStyle::interleaved ? 2 * i + 1 : i + half;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = size_t(((o * seq + s) * heads + h) * head_dim);
          const Pair a = x.v[base + size_t(ia)], b = x.v[base + size_t(ib)];
          out.v[base + size_t(ia)] = field::sub(field::mul(a, cos), field::mul(b, sin));
          out.v[base + size_t(ib)] = field::add(field::mul(a, sin), field::mul(b, cos));
        }
    }
  }
  trial.accounting().uf_calls += double(seq * half * 2);
  const Degree term{x.degree.num + 1, x.degree.den};
  if (uniform_along(x, r - 1)) {
    out.degree = term;
  } else {  // a and b may have different denominators
    out.degree = add_degree(term, term);
    out.uniform &= ~(1u << (r - 1));
  }
  return out;
}

}  // namespace yirage::verify::fp
