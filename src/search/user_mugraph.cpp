#include "search/user_mugraph.h"

#include <fmt/format.h>

#include "support/error.h"

namespace yirage::search {
namespace {

// One entry per input distribution of verify/numerics.h that the float check ran: it stops at
// the first that fails, which is then the last entry.
std::vector<DistributionCheck> float_checks(const ir::KernelGraph& graph,
                                            const ir::KernelGraph& mugraph, uint64_t seed) {
  std::vector<DistributionCheck> checks;
  for (const auto& [distribution, comparison] :
       float_check(graph, mugraph, seed, /*parallel=*/false).distributions)
    checks.push_back({verify::distribution_name(distribution), comparison});
  return checks;
}

}  // namespace

MuGraphVerdict verify_mugraph(const ir::KernelGraph& graph, const ir::KernelGraph& mugraph,
                              std::optional<uint64_t> seed, uint64_t float_seed) {
  verify::FingerprintOptions options;
  options.seed = seed;
  MuGraphVerdict v;
  try {
    v.proof = verify::check_equivalent(graph, mugraph, options);
  } catch (const Error& e) {
    fail("the µGraph does not fit the graph (first program: the graph, second: the µGraph): {}",
         e.what());
  }
  if (!v.proof.equivalent) {
    v.reason = v.proof.summary();
    return v;
  }
  v.float_checks = float_checks(graph, mugraph, float_seed);
  v.verified = v.proof.bound_met;
  if (!v.proof.bound_met)
    v.reason = fmt::format("the false-accept bound {:.3g} is above the target {:.0e}",
                           v.proof.false_accept_bound, verify::FingerprintOptions{}.target_bound);
  for (const DistributionCheck& d : v.float_checks)
    if (v.verified && !d.comparison.passed) {
      v.verified = false;
      v.reason = fmt::format("{} ({})", d.comparison.summary(), d.distribution);
    }
  return v;
}

nlohmann::json MuGraphVerdict::to_json() const {
  nlohmann::json checks = nlohmann::json::array();
  for (const DistributionCheck& d : float_checks)
    checks.push_back({{"distribution", d.distribution},
                      {"passed", d.comparison.passed},
                      {"max_error", d.comparison.max_error},
                      {"tolerance", d.comparison.tolerance},
                      // Held to the input graph widened to f32 (verify::widened_reference),
                      // and the input graph's own error there; else null.
                      {"input_graph_error_from_f32",
                       d.comparison.rounding_error > 0 ? nlohmann::json(d.comparison.rounding_error)
                                                       : nlohmann::json(nullptr)},
                      {"summary", d.comparison.summary()}});
  nlohmann::json mismatch = nullptr;
  if (proof.mismatch)
    mismatch = {{"output", proof.mismatch->output},
                {"name", proof.mismatch->name},
                {"coords", proof.mismatch->coords},
                {"trial", proof.mismatch->trial}};
  return {{"verified", verified},
          {"reason", verified ? nlohmann::json(nullptr) : nlohmann::json(reason)},
          {"equivalent", proof.equivalent},
          {"trials", proof.trials},
          {"per_trial_bound", proof.per_trial_bound},
          {"false_accept_bound", proof.false_accept_bound},
          {"bound_met", proof.bound_met},
          {"assumptions", proof.assumptions},
          {"mismatch", mismatch},
          {"float_checks", checks}};
}

std::string MuGraphVerdict::report() const {
  std::string text = fmt::format("verified: {}\n", verified ? "yes" : "no");
  if (!verified) text += fmt::format("reason: {}\n", reason);
  text += fmt::format("trials: {}\n", proof.trials);
  if (proof.equivalent)
    text += fmt::format("bound: P[false accept] <= {:.3g} (per trial {:.3g})\n",
                        proof.false_accept_bound, proof.per_trial_bound);
  for (const std::string& a : proof.assumptions) text += fmt::format("assumes: {}\n", a);
  for (const DistributionCheck& d : float_checks)
    text += fmt::format("float check, inputs {}: {}\n", d.distribution, d.comparison.summary());
  return text;
}

}  // namespace yirage::search
