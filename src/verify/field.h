// Arithmetic in the two prime fields of the fingerprint verifier, and its keyed hash.
//
// A fingerprint element is a pair (x mod p, x mod q) with q | p - 1, after Mirage (Wu et al.,
// OSDI'25, §5): polynomial arithmetic and division run in both fields at once, and exp(x) is
// ω^(x mod q) in Z_p, for ω an element of order q. That is a group homomorphism from (Z_q, +) into
// (Z_p^*, ·), so exp(a + b) = exp(a)·exp(b) holds exactly, which is what makes a max-subtracted
// or online-rescaled softmax fingerprint like the plain one.
//
// We take p = 2q + 1, a safe prime just below 2^62, so that q is as large as p allows (q ≈ 2^61)
// and every Schwartz–Zippel term d/q is tiny; residues stay below 2^62, so a sum of two fits in
// 64 bits and a product in unsigned __int128. Since p - 1 = 2q, the elements of order q are
// exactly the squares other than 1, and -1 (of order 2) is never a power of ω: 1 + ω^t is never 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace yirage::verify::field {

inline constexpr uint64_t kP = 4611686018427377339ull;  // 2^62 - 10565 = 2q + 1
inline constexpr uint64_t kQ = 2305843009213688669ull;  // (kP - 1) / 2

using u128 = unsigned __int128;

constexpr uint64_t add_mod(uint64_t a, uint64_t b, uint64_t m) {
  uint64_t s = a + b;  // < 2^63: both operands are below m < 2^62
  return s >= m ? s - m : s;
}

constexpr uint64_t sub_mod(uint64_t a, uint64_t b, uint64_t m) {
  return a >= b ? a - b : a + m - b;
}

constexpr uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  return uint64_t(u128(a) * b % m);
}

// Both primes sit just below a power of two, p = 2^62 - 10565 and q = 2^61 - 5283, so a 128-bit
// value x = hi·2^k + lo reduces as hi·c + lo without a division (a u128 % m is a library call,
// and it dominated the matmuls). Two folds bring any x below 2^k + 2^32 < 2m, one subtraction
// finishes.
template <int Bits, uint64_t C>
constexpr uint64_t reduce_pseudo_mersenne(u128 x) {
  constexpr uint64_t kMod = (uint64_t(1) << Bits) - C;
  constexpr uint64_t kMask = (uint64_t(1) << Bits) - 1;
  x = (x >> Bits) * C + (x & kMask);  // < 2^80 + 2^k
  const uint64_t y = uint64_t(x >> Bits) * C + (uint64_t(x) & kMask);
  return y >= kMod ? y - kMod : y;
}

uint64_t pow_mod(uint64_t base, uint64_t exponent, uint64_t m);

// The inverse of a nonzero residue modulo the prime m (Fermat: a^(m-2)).
uint64_t inv_mod(uint64_t a, uint64_t m);

// Deterministic Miller–Rabin: the first twelve primes as bases decide every n < 3.3·10^24.
bool is_prime(uint64_t n);

// The residue of the exact value of a finite double modulo the prime m. Every finite double is
// a dyadic rational k·2^e, and 2 is invertible modulo an odd prime, so the map is exact and a
// field homomorphism on the dyadics: 0.5 becomes the inverse of 2, 1e-6 the exact binary value
// the double holds. Returns nullopt for NaN and infinities.
std::optional<uint64_t> residue_of(double value, uint64_t m);

// A residue of a signed integer.
uint64_t residue_of_int(int64_t value, uint64_t m);

// One element of a fingerprint: the value modulo p and modulo q.
struct Pair {
  uint64_t p = 0, q = 0;
  friend bool operator==(const Pair&, const Pair&) = default;
};

// Any 128-bit value modulo p or q; in particular a sum of up to 15 products of residues.
constexpr uint64_t reduce_p(u128 x) {
  return reduce_pseudo_mersenne<62, (uint64_t(1) << 62) - kP>(x);
}
constexpr uint64_t reduce_q(u128 x) {
  return reduce_pseudo_mersenne<61, (uint64_t(1) << 61) - kQ>(x);
}

inline Pair add(Pair a, Pair b) {
  return {add_mod(a.p, b.p, kP), add_mod(a.q, b.q, kQ)};
}
inline Pair sub(Pair a, Pair b) {
  return {sub_mod(a.p, b.p, kP), sub_mod(a.q, b.q, kQ)};
}
inline Pair mul(Pair a, Pair b) {
  return {reduce_p(u128(a.p) * b.p), reduce_q(u128(a.q) * b.q)};
}
inline Pair pair_of_int(int64_t v) {
  return {residue_of_int(v, kP), residue_of_int(v, kQ)};
}

// ω^e in Z_p for a fixed ω, by a table of ω^(b·256^i): eight multiplications per power.
class PowerTable {
 public:
  explicit PowerTable(uint64_t omega);
  uint64_t pow(uint64_t exponent) const;  // exponent is a residue mod q
  uint64_t omega() const { return table_[0][1]; }

 private:
  uint64_t table_[8][256];
};

// SipHash-2-4 (Aumasson & Bernstein) over whole 64-bit words, keyed per trial: the uninterpreted
// functions' outputs are this hash of their arguments, so equal arguments give equal outputs and
// distinct ones look independent and uniform (the random-oracle model of the bound).
struct HashKey {
  uint64_t k0 = 0, k1 = 0;
};
uint64_t siphash(const HashKey& key, const uint64_t* words, size_t count);

}  // namespace yirage::verify::field
