// Checking and profiling candidates in worker processes. Internal to src/tune.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tune/evaluate.h"
#include "tune/tune.h"

namespace yirage::tune {

// Checks candidates[i] for each i of `indices`, in order, then profiles those that pass, in workers
// started with `command`; returns an evaluation for each. `on_profiling` is called once, with the
// number that passed, as the profiles begin. A worker that dies of a signal or runs past
// options.candidate_seconds_limit on a candidate costs that candidate ("crashed", "timed_out"),
// and a new worker goes on with the rest. One that fails before its first candidate (cannot start,
// another build) makes every remaining one a run_error with its message.
std::map<size_t, Evaluation> evaluate_in_workers(const std::vector<std::string>& command,
                                                 backend::Backend& backend,
                                                 const ir::KernelGraph& original,
                                                 const std::vector<Candidate>& candidates,
                                                 const std::vector<size_t>& indices,
                                                 const OptimizeOptions& options,
                                                 const std::function<void(size_t)>& on_profiling);

}  // namespace yirage::tune
