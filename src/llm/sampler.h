// Picks the next token from the logits: greedy, or llama.cpp's chain of repetition penalty,
// top-k, top-p and temperature, drawn with a seeded generator so that runs are reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "llm/tokenizer.h"

namespace yirage::llm {

struct SamplerOptions {
  float temperature = 0.0f;  // ≤ 0: greedy (the first maximum)
  int top_k = 40;            // ≤ 0: keep all
  float top_p = 0.95f;       // ≥ 1: keep all
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;  // how many recent tokens the penalty looks at
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // `history` is the sequence so far (prompt and generated); only its last repeat_last_n
  // tokens are penalized.
  TokenId sample(std::span<const float> logits, std::span<const TokenId> history);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<float> logits_;
  std::vector<TokenId> order_;
};

}  // namespace yirage::llm
