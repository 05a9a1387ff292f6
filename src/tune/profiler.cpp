// The profiler: warm-up, repetitions until enough time is measured, the median; the backend's
// own clock (Backend::time) measures.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "support/error.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

int64_t last_level_cache(const backend::DeviceDescription& device) {
  const nlohmann::json& caps = device.capabilities;
  for (const char* key : {"l3_bytes", "l2_bytes"})
    if (caps.contains(key) && caps[key].is_number_integer()) return caps[key].get<int64_t>();
  return int64_t(32) << 20;
}

// The samples, from the backend's own clock. The first round warms up (options.warmup launches)
// and takes the minimum repetitions; later rounds take as many more as the mean so far says
// reach min_seconds. Each round starts where the last one stopped in the rotation, so no set is
// timed while still in the caches from its previous launch. The warm-up does not visit every
// set: their pages were touched when the inputs were written, a backend warms its own per-set
// state (cuda replays each set's graph once untimed), and at 256 sets of a 16 ms kernel a visit
// each cost 4 s a candidate.
backend::Timings take_samples(backend::Backend& backend, backend::Module& module,
                              std::vector<backend::LaunchBuffers> launches,
                              const ProfileOptions& options) {
  const int64_t sets = int64_t(launches.size());
  backend::TimingPlan plan{.warmup = options.warmup,
                           .repetitions = std::max(options.min_repetitions, 1),
                           .launches_per_repetition = options.launches_per_repetition};
  backend::Timings all;
  double total = 0;  // seconds measured: every launch of every sample
  while (true) {
    const backend::Timings round = backend.time(module, launches, plan);
    if (int(round.seconds_per_launch.size()) != plan.repetitions ||
        round.launches_per_repetition < 1)
      fail("profile: backend '{}' returned {} times of {} launches for {} repetitions",
           backend.name(), round.seconds_per_launch.size(), round.launches_per_repetition,
           plan.repetitions);
    all.launches_per_repetition = round.launches_per_repetition;
    for (double t : round.seconds_per_launch) {
      all.seconds_per_launch.push_back(t);
      total += t * round.launches_per_repetition;
    }
    const int64_t launched =
        int64_t(plan.warmup) + int64_t(plan.repetitions) * round.launches_per_repetition;
    std::rotate(launches.begin(), launches.begin() + std::ptrdiff_t(launched % sets),
                launches.end());
    const int room = options.max_repetitions - int(all.seconds_per_launch.size());
    if (total >= options.min_seconds || room <= 0) return all;
    const double per_sample = total / double(all.seconds_per_launch.size());
    const double wanted =
        per_sample > 0 ? std::ceil((options.min_seconds - total) / per_sample) : double(room);
    plan.warmup = 0;
    plan.repetitions = int(std::clamp(wanted, 1.0, double(room)));
  }
}

}  // namespace

Profile profile(backend::Backend& backend, backend::Module& module, const ir::KernelGraph& graph,
                const ProfileOptions& options) {
  const std::vector<ir::TensorRef> input_refs = graph.inputs();
  int64_t input_bytes = 0;
  for (ir::TensorRef in : input_refs) {
    const ir::TensorType& t = graph.type(in);
    input_bytes += ir::num_elements(t.dims) * int64_t(ir::dtype_size(t.dtype));
  }
  int sets = 1;
  if (options.rotate_inputs && input_bytes > 0) {
    const int64_t want = 2 * last_level_cache(backend.device());
    sets = int(std::clamp<int64_t>((want + input_bytes - 1) / input_bytes, 1,
                                   std::max(options.max_input_sets, 1)));
    sets =
        int(std::max<int64_t>(1, std::min<int64_t>(sets, options.max_rotation_bytes /
                                                             std::max<int64_t>(input_bytes, 1))));
  }

  // Values are uniform in [-0.25, 0.25): timing needs ordinary values, not the float check's
  // stress distributions; ids start at 0. Every set holds the same values: the rotation needs
  // distinct addresses, not distinct values, and drawing each set anew cost most of a model's
  // tuning where the last-level cache is large (1 GiB of draws per candidate at 480 MiB of L3).
  std::mt19937_64 rng(options.seed);
  std::vector<ir::HostTensor> values;
  for (ir::TensorRef in : input_refs) {
    values.emplace_back(graph.type(in));
    ir::fill_random(values.back(), rng, -0.25f, 0.25f);
  }
  ir::make_paged_attention_indices_valid(graph, values);
  std::vector<std::vector<std::unique_ptr<backend::Buffer>>> inputs(static_cast<size_t>(sets));
  for (auto& set : inputs)
    for (const ir::HostTensor& host : values) {
      set.push_back(backend.allocate(host.bytes.size()));
      set.back()->write(host.bytes);
    }
  std::vector<std::unique_ptr<backend::Buffer>> outputs;
  for (const ir::GraphOutput& out : graph.outputs()) {
    const ir::TensorType& t = graph.type(out.tensor);
    outputs.push_back(backend.allocate(size_t(ir::num_elements(t.dims)) * ir::dtype_size(t.dtype)));
  }
  std::vector<backend::Buffer*> out_ptrs;
  for (auto& b : outputs) out_ptrs.push_back(b.get());
  std::vector<std::vector<backend::Buffer*>> in_ptrs(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s)
    for (auto& b : inputs[size_t(s)]) in_ptrs[size_t(s)].push_back(b.get());

  std::vector<backend::LaunchBuffers> launches;
  for (const std::vector<backend::Buffer*>& set : in_ptrs) launches.push_back({set, out_ptrs});

  const backend::Timings samples = take_samples(backend, module, launches, options);
  std::vector<double> times = samples.seconds_per_launch;
  Profile p;
  p.repetitions = int(times.size());
  p.input_sets = sets;
  p.launches_per_repetition = samples.launches_per_repetition;
  p.mean_seconds = std::accumulate(times.begin(), times.end(), 0.0) / double(times.size());
  std::sort(times.begin(), times.end());
  p.min_seconds = times.front();
  const size_t mid = times.size() / 2;
  p.median_seconds = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
  return p;
}

}  // namespace yirage::tune
