// Backend::time's default: the host's steady clock, for backends whose launches run on the host.
#include <chrono>

#include "backend/backend.h"
#include "support/error.h"

namespace yirage::backend {

void check_timing_plan(std::span<const LaunchBuffers> sets, const TimingPlan& plan) {
  if (sets.empty()) fail("time: no buffers to launch the module on");
  if (plan.warmup < 0 || plan.repetitions < 0 || plan.launches_per_repetition < 0)
    fail("time: a negative count in the plan (warm-up {}, repetitions {}, launches {})",
         plan.warmup, plan.repetitions, plan.launches_per_repetition);
}

// A sample is its launches and a synchronize() after the last, so that a backend whose launches
// return early still has its work counted; one launch per sample unless the plan says more.
Timings Backend::time(Module& module, std::span<const LaunchBuffers> sets, const TimingPlan& plan) {
  check_timing_plan(sets, plan);
  size_t next = 0;
  auto launch = [&] {
    module.launch(sets[next].inputs, sets[next].outputs);
    next = (next + 1) % sets.size();
  };
  for (int i = 0; i < plan.warmup; ++i) {
    launch();
    synchronize();
  }
  Timings timings;
  timings.launches_per_repetition =
      plan.launches_per_repetition > 0 ? plan.launches_per_repetition : 1;
  for (int r = 0; r < plan.repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < timings.launches_per_repetition; ++i) launch();
    synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timings.seconds_per_launch.push_back(seconds / timings.launches_per_repetition);
  }
  return timings;
}

}  // namespace yirage::backend
