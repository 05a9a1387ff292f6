// Checking a µGraph that a user wrote against the kernel graph it should compute: the fingerprint
// proof the search gives its own candidates, then the float check on each input distribution.
// `yirage verify` and yirage.verify print this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/search.h"
#include "verify/verify.h"

namespace yirage::search {

struct DistributionCheck {
  std::string distribution;  // verify::distribution_name: "uniform", "large", ...
  verify::Comparison comparison;
};

struct MuGraphVerdict {
  bool verified = false;  // proved equivalent with the bound met, and every float check passed
  std::string reason;     // one line when not verified
  verify::EquivalenceResult proof;
  std::vector<DistributionCheck> float_checks;  // empty when the proof already failed

  nlohmann::json to_json() const;
  // "verified: yes", the trials, the bound, one line per assumption and per float check.
  std::string report() const;
};

// `graph` and `mugraph` take the same inputs (dtypes and shapes, in input order) and produce
// outputs of the same types; otherwise throws yirage::Error naming the first difference. A seed
// makes the proof's randomness reproducible; the float checks draw from `float_seed`.
MuGraphVerdict verify_mugraph(const ir::KernelGraph& graph, const ir::KernelGraph& mugraph,
                              std::optional<uint64_t> seed = std::nullopt, uint64_t float_seed = 0);

}  // namespace yirage::search
