#include "llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "support/error.h"

namespace yirage::llm {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (!std::isfinite(options.temperature))
    fail("temperature {} is not finite", options.temperature);
  if (!(options.top_p > 0.0f)) fail("top-p {} must be greater than 0", options.top_p);
  if (!(options.repeat_penalty > 0.0f) || !std::isfinite(options.repeat_penalty))
    fail("repeat penalty {} must be a positive number", options.repeat_penalty);
  if (options.repeat_last_n < 0) fail("repeat-last-n {} is negative", options.repeat_last_n);
}

TokenId Sampler::sample(std::span<const float> logits, std::span<const TokenId> history) {
  if (logits.empty()) fail("sampler: no logits");
  logits_.assign(logits.begin(), logits.end());
  const int n = static_cast<int>(logits_.size());
  if (options_.repeat_penalty != 1.0f) {
    // llama.cpp's penalty: each distinct recent token once, positive logits divided, negative
    // ones multiplied, so that the token always becomes less likely.
    const size_t window = std::min(history.size(), static_cast<size_t>(options_.repeat_last_n));
    std::unordered_set<TokenId> seen(history.end() - static_cast<ptrdiff_t>(window), history.end());
    for (TokenId t : seen) {
      if (t < 0 || t >= n) continue;
      float& l = logits_[t];
      l = l > 0 ? l / options_.repeat_penalty : l * options_.repeat_penalty;
    }
  }
  if (options_.temperature <= 0.0f)
    return static_cast<TokenId>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());

  // Candidates sorted by logit, highest first (ties by id, for determinism).
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  const int k = options_.top_k > 0 ? std::min(options_.top_k, n) : n;
  auto by_logit = [&](TokenId a, TokenId b) {
    return logits_[a] != logits_[b] ? logits_[a] > logits_[b] : a < b;
  };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  order_.resize(static_cast<size_t>(k));

  // Softmax over the kept candidates for top-p (before temperature, as llama.cpp's chain does).
  std::vector<double> p(order_.size());
  const float max = logits_[order_[0]];
  double sum = 0;
  for (size_t i = 0; i < order_.size(); ++i)
    sum += p[i] = std::exp(double{logits_[order_[i]]} - max);
  size_t keep = order_.size();
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      cumulative += p[i] / sum;
      if (cumulative >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // Temperature, then a draw from the renormalized distribution.
  std::vector<double> weights(keep);
  for (size_t i = 0; i < keep; ++i)
    weights[i] = std::exp((double{logits_[order_[i]]} - max) / options_.temperature);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  return order_[pick(rng_)];
}

}  // namespace yirage::llm
