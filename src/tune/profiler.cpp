// The profiler: warm-up, repetitions until enough time is measured, the median.
#include <algorithm>
#include <chrono>
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
  // stress distributions; ids start at 0.
  std::mt19937_64 rng(options.seed);
  std::vector<std::vector<std::unique_ptr<backend::Buffer>>> inputs(static_cast<size_t>(sets));
  for (auto& set : inputs)
    for (ir::TensorRef in : input_refs) {
      ir::HostTensor host(graph.type(in));
      ir::fill_random(host, rng, -0.25f, 0.25f);
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

  int next = 0;
  auto launch = [&] {
    module.launch(in_ptrs[size_t(next)], out_ptrs);
    backend.synchronize();
    next = (next + 1) % sets;
  };
  for (int i = 0; i < std::max(options.warmup, sets); ++i) launch();

  std::vector<double> times;
  double total = 0;
  while (int(times.size()) < options.min_repetitions ||
         (total < options.min_seconds && int(times.size()) < options.max_repetitions)) {
    const auto start = std::chrono::steady_clock::now();
    launch();
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    times.push_back(t);
    total += t;
  }
  Profile p;
  p.repetitions = int(times.size());
  p.input_sets = sets;
  p.mean_seconds = total / double(times.size());
  std::sort(times.begin(), times.end());
  p.min_seconds = times.front();
  const size_t mid = times.size() / 2;
  p.median_seconds = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
  return p;
}

}  // namespace yirage::tune
