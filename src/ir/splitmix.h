// splitmix64 (Steele, Lea and Flood, 2014), written here once: the structural hash mixes with its
// step (the key must be stable across builds and platforms, which std::hash does not promise), and
// fill_random draws test and tuning inputs from its generator.
#pragma once

#include <cstdint>

namespace yirage::ir {

// One step of splitmix64 from state `z`: a bijection with full avalanche.
constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// splitmix64 as a generator, seeded by one draw of a std::mt19937_64 where fill_random uses it:
// filling full-shape inputs drew billions of values, and one mt19937_64 draw per value (with
// std::uniform_*_distribution on top) was a quarter of those tests' time; this is several times
// faster, and its statistical quality is more than inputs need.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    const uint64_t z = state_;
    state_ += 0x9e3779b97f4a7c15ull;
    return splitmix64(z);
  }

 private:
  uint64_t state_;
};

}  // namespace yirage::ir
