// The fast paths the search's proofs run on: pseudo-Mersenne reductions and the blocked
// fingerprint matmul, each against the plain definition.
#include <random>

#include <gtest/gtest.h>

#include "verify/field.h"
#include "verify/fingerprint_ops.h"

namespace yirage::verify {
namespace {

using field::kP;
using field::kQ;
using field::u128;

TEST(FastField, ReductionsMatchTheRemainder) {
  std::mt19937_64 rng(11);
  std::vector<u128> values = {0,
                              1,
                              kP - 1,
                              kP,
                              kP + 1,
                              kQ - 1,
                              kQ,
                              kQ + 1,
                              u128(kP) * kP - 1,
                              ~u128(0),
                              ~u128(0) - kP,
                              u128(1) << 62,
                              (u128(1) << 62) - 1};
  for (int i = 0; i < 10000; ++i) values.push_back((u128(rng()) << 64) | rng());
  for (int i = 0; i < 10000; ++i) values.push_back(u128(rng() % kP) * (rng() % kP));
  for (u128 x : values) {
    EXPECT_EQ(field::reduce_p(x), uint64_t(x % kP));
    EXPECT_EQ(field::reduce_q(x), uint64_t(x % kQ));
  }
}

// Shapes that cross the row blocks (4, 2, 1), the 15-term chunks and the 64-column blocks, with
// residues near the top of each field so the 128-bit sums run close to overflow.
TEST(FastField, MatmulMatchesTheDefinition) {
  std::mt19937_64 rng(5);
  for (const auto& [m, k, n] :
       {std::array<int64_t, 3>{7, 31, 131}, {1, 15, 64}, {4, 16, 65}, {2, 1, 3}, {3, 0, 5}}) {
    fp::FTensor a(ir::TensorType{ir::DType::f32, {m, k}}), b({ir::DType::f32, {k, n}});
    for (fp::Pair& e : a.v) e = {kP - 1 - rng() % 8, kQ - 1 - rng() % 8};
    for (fp::Pair& e : b.v) e = {rng() % kP, rng() % kQ};
    std::seed_seq seed{1, 2};
    fp::Trial trial(seed);
    const fp::FTensor c = fp::matmul(a, b, {ir::DType::f32, {m, n}}, trial);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        uint64_t p = 0, q = 0;
        for (int64_t t = 0; t < k; ++t) {
          const fp::Pair x = a.v[size_t(i * k + t)], y = b.v[size_t(t * n + j)];
          p = uint64_t((u128(p) + u128(x.p) * y.p) % kP);
          q = uint64_t((u128(q) + u128(x.q) * y.q) % kQ);
        }
        ASSERT_EQ(c.v[size_t(i * n + j)], (fp::Pair{p, q})) << m << "x" << k << "x" << n;
      }
  }
}

}  // namespace
}  // namespace yirage::verify
