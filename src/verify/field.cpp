#include "verify/field.h"

#include <bit>
#include <cmath>

namespace yirage::verify::field {

uint64_t pow_mod(uint64_t base, uint64_t exponent, uint64_t m) {
  uint64_t result = 1 % m;
  base %= m;
  while (exponent > 0) {
    if (exponent & 1) result = mul_mod(result, base, m);
    base = mul_mod(base, base, m);
    exponent >>= 1;
  }
  return result;
}

uint64_t inv_mod(uint64_t a, uint64_t m) {
  return pow_mod(a, m - 2, m);
}

bool is_prime(uint64_t n) {
  constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (uint64_t b : kBases)
    if (n % b == 0) return n == b;
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (uint64_t a : kBases) {
    uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool witness = true;  // a proves n composite unless a square on the way is n - 1
    for (int r = 1; r < s && witness; ++r) {
      x = mul_mod(x, x, n);
      if (x == n - 1) witness = false;
    }
    if (witness) return false;
  }
  return true;
}

uint64_t residue_of_int(int64_t value, uint64_t m) {
  const uint64_t magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  const uint64_t r = magnitude % m;
  return value < 0 ? sub_mod(0, r, m) : r;
}

std::optional<uint64_t> residue_of(double value, uint64_t m) {
  if (!std::isfinite(value)) return std::nullopt;
  if (value == 0.0) return 0;
  // value = mantissa · 2^exponent with |mantissa| in [0.5, 1); 53 bits of it make an integer.
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);
  const int64_t integer = int64_t(std::ldexp(mantissa, 53));
  exponent -= 53;
  const uint64_t two_power = exponent >= 0 ? pow_mod(2, uint64_t(exponent), m)
                                           : pow_mod(inv_mod(2, m), uint64_t(-exponent), m);
  return mul_mod(residue_of_int(integer, m), two_power, m);
}

PowerTable::PowerTable(uint64_t omega) {
  uint64_t base = omega;  // ω^(256^i)
  for (auto& row : table_) {
    row[0] = 1;
    for (int b = 1; b < 256; ++b) row[b] = reduce_p(u128(row[b - 1]) * base);
    base = reduce_p(u128(row[255]) * base);
  }
}

uint64_t PowerTable::pow(uint64_t exponent) const {
  uint64_t result = 1;
  for (const auto& row : table_) {
    result = reduce_p(u128(result) * row[exponent & 0xff]);
    exponent >>= 8;
  }
  return result;
}

namespace {

struct SipState {
  uint64_t v0, v1, v2, v3;

  void round() {
    v0 += v1;
    v1 = std::rotl(v1, 13) ^ v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16) ^ v2;
    v0 += v3;
    v3 = std::rotl(v3, 21) ^ v0;
    v2 += v1;
    v1 = std::rotl(v1, 17) ^ v2;
    v2 = std::rotl(v2, 32);
  }

  void absorb(uint64_t block) {
    v3 ^= block;
    round();
    round();
    v0 ^= block;
  }
};

}  // namespace

uint64_t siphash(const HashKey& key, const uint64_t* words, size_t count) {
  SipState s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
             key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull};
  for (size_t i = 0; i < count; ++i) s.absorb(words[i]);
  // The message is whole words, so the last block holds only the length byte.
  s.absorb(uint64_t(count * 8 & 0xff) << 56);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace yirage::verify::field
