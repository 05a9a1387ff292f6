// The float check against the reference and the profile of one candidate.
#include "tune/evaluate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace yirage::tune {

Evaluator::Evaluator(backend::Backend& backend, const ir::KernelGraph& original,
                     const ProfileOptions& profile)
    : backend_(backend),
      original_(original),
      profile_(profile),
      reduction_length_(verify::reduction_length(original)) {
  for (verify::InputDistribution d : verify::kAllDistributions)
    inputs_.push_back(verify::make_inputs(original, d, profile.seed + 1));
  widened_.resize(inputs_.size());
}

const std::optional<verify::WidenedReference>& Evaluator::widened(size_t i) {
  if (!widened_[i]) {
    // Its error is the reference candidate's on this backend, against the original in f32.
    widened_[i] = verify::widened_reference(original_, inputs_[i], expected_[i]);
  }
  return *widened_[i];
}

void Evaluator::set_reference(const ir::KernelGraph& candidate) {
  expected_.clear();
  widened_.assign(inputs_.size(), std::nullopt);
  for (const std::vector<ir::HostTensor>& inputs : inputs_)
    expected_.push_back(backend::run_on(backend_, candidate, inputs));
}

Profile Evaluator::profile(const ir::KernelGraph& candidate, backend::Module& module) {
  return tune::profile(backend_, module, candidate, profile_);
}

Evaluation Evaluator::check(const ir::KernelGraph& candidate) {
  Evaluation result;
  std::vector<std::string> checks;
  bool reference = false;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const verify::InputDistribution d = verify::kAllDistributions[i];
    std::vector<ir::HostTensor> out;
    try {  // run_on compiles again: a hit in the backend's object cache, where it has one
      out = backend::run_on(backend_, candidate, inputs_[i]);
    } catch (const std::exception& e) {
      if (reference) {  // a reference must run on every distribution
        expected_.clear();
        widened_.assign(inputs_.size(), std::nullopt);
      }
      return {"run_error", fmt::format("{} inputs: {}", verify::distribution_name(d), e.what()),
              std::nullopt};
    }
    if (expected_.size() == i && (i == 0 || reference)) {
      reference = true;  // the first candidate that runs is the one the others must match
      expected_.push_back(std::move(out));
      continue;
    }
    // Where the original graph is ill-conditioned, the reference candidate in its dtype is no
    // oracle; both are then held to the original in f32.
    const verify::Comparison c = verify::compare_within_rounding(
        out, expected_[i], reduction_length_, d,
        [&]() -> const std::optional<verify::WidenedReference>& { return widened(i); });
    checks.push_back(fmt::format("{}: {}", verify::distribution_name(d), c.summary()));
    if (!c.passed) {
      result.status = c.new_overflow() ? "non_finite" : "mismatch";
      break;
    }
  }
  if (!checks.empty())
    result.message =
        fmt::format("float check against the unfused graph: {}", fmt::join(checks, "; "));
  return result;
}

}  // namespace yirage::tune
