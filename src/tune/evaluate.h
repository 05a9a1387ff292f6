// Checking and profiling one candidate: the step that runs generated code. Internal to src/tune;
// optimize() runs it in a worker process (worker.h) or, when none is available, in its own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ir/ir.h"
#include "tune/tune.h"
#include "verify/numerics.h"

namespace yirage::tune {

// What became of one candidate: status and message as in CandidateRecord; the profile when it
// passed the check and was timed.
struct Evaluation {
  std::string status = "ok";
  std::string message;
  std::optional<Profile> profile;
};

// Runs candidates on the inputs of every distribution of verify/numerics.h and compares their
// outputs with the reference's: the first candidate checked that runs on all of them (the
// unfused graph, normally). A candidate that overflows where the reference does not is
// non_finite, one off by more than the tolerance a mismatch; the message says what every
// distribution gave. Candidates that pass are profiled afterwards, all checks first, as the
// progress callback reports the stages.
class Evaluator {
 public:
  Evaluator(backend::Backend& backend, const ir::KernelGraph& original,
            const ProfileOptions& profile);

  // The check alone: the returned evaluation has no profile.
  Evaluation check(const ir::KernelGraph& candidate);
  Profile profile(const ir::KernelGraph& candidate, backend::Module& module);
  // Makes this candidate the reference without checking it: how a fresh worker takes over the
  // reference that an earlier one chose. Throws what running it throws.
  void set_reference(const ir::KernelGraph& candidate);
  bool has_reference() const { return !expected_.empty(); }

 private:
  // The original graph widened to f32 on distribution i's inputs (verify::widened_reference),
  // made the first time a candidate misses the formula's tolerance there.
  const std::optional<verify::WidenedReference>& widened(size_t i);

  backend::Backend& backend_;
  ir::KernelGraph original_;
  ProfileOptions profile_;
  int64_t reduction_length_;
  std::vector<std::vector<ir::HostTensor>> inputs_;    // per distribution
  std::vector<std::vector<ir::HostTensor>> expected_;  // per distribution; empty: no reference
  std::vector<std::optional<std::optional<verify::WidenedReference>>> widened_;
};

}  // namespace yirage::tune
