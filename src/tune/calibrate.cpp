// Calibration: the cost model's rates measured on the device, through the Backend interface only
// (small kernel graphs compiled by the backend and timed with its own clock by the profiler).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "support/error.h"
#include "tune/tune.h"

namespace yirage::tune {
namespace {

// The profiler's median, with the inputs kept in place (not rotated) so that a working set sized
// to a cache level is read from that level.
double median_seconds(backend::Backend& backend, const ir::KernelGraph& graph,
                      const CalibrateOptions& options) {
  std::unique_ptr<backend::Module> module = backend.compile(graph);
  ProfileOptions p;
  p.rotate_inputs = false;
  p.min_seconds = options.seconds_per_measurement;
  p.min_repetitions = 5;
  p.max_repetitions = 100;
  return profile(backend, *module, graph, p).median_seconds;
}

// y = -x over `elements` f32: 8 bytes moved per element.
ir::KernelGraph stream_graph(int64_t elements) {
  ir::KernelGraph g;
  g.mark_output(g.neg(g.input("x", {elements}, ir::DType::f32)), "y");
  return g;
}

ir::KernelGraph matmul_graph(int64_t n, ir::DType dtype) {
  ir::KernelGraph g;
  const ir::TensorRef a = g.input("a", {n, n}, dtype);
  const ir::TensorRef b = g.input("b", {n, n}, dtype);
  g.mark_output(g.matmul(a, b), "c");
  return g;
}

std::string human_bytes(double b) {
  return b >= 1 << 30   ? fmt::format("{:.1f} GiB", b / (1 << 30))
         : b >= 1 << 20 ? fmt::format("{:.1f} MiB", b / (1 << 20))
                        : fmt::format("{:.1f} KiB", b / 1024);
}

std::optional<int64_t> capability_bytes(const nlohmann::json& caps, const char* key) {
  if (caps.contains(key) && caps[key].is_number_integer() && caps[key].get<int64_t>() > 0)
    return caps[key].get<int64_t>();
  return std::nullopt;
}

}  // namespace

Calibration calibrate(backend::Backend& backend, const CalibrateOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const backend::DeviceDescription device = backend.device();
  // The rough rates first: whatever is not measured below keeps them (parallel units, dependent
  // launch, and any level or dtype that fails to run).
  Calibration c;
  c.backend = std::string(backend.name());
  c.fingerprint = device.fingerprint;
  c.device_name = device.name;
  c.rates = cost::device_from_capabilities(device.capabilities, device.name);
  c.rates.source = "calibration";
  c.rates.levels.clear();
  nlohmann::json measured = nlohmann::json::object();

  // 1. Launch overhead: the smallest kernel there is.
  const double launch = median_seconds(backend, stream_graph(16), options);
  c.rates.launch_seconds = launch;
  measured["launch_seconds"] = launch;
  say(fmt::format("launch overhead: {:.2f} µs", launch * 1e6));

  // 2. Bandwidth per level: a stream whose input and output together take half the level, so that
  // both stay in it; DRAM: four times the largest cache, at least 64 MiB, within an eighth of the
  // device's memory.
  const nlohmann::json& caps = device.capabilities;
  struct Level {
    std::string name;
    int64_t capacity;
  };
  std::vector<Level> levels;
  for (const auto& [key, name] :
       {std::pair{"l1d_bytes", "l1"}, std::pair{"l2_bytes", "l2"}, std::pair{"l3_bytes", "l3"}})
    if (auto bytes = capability_bytes(caps, key)) levels.push_back({name, *bytes});
  int64_t largest = 0;
  for (const Level& l : levels) largest = std::max(largest, l.capacity);
  int64_t dram = std::max<int64_t>(4 * largest, int64_t(64) << 20);
  if (auto memory = capability_bytes(caps, "memory_bytes")) dram = std::min(dram, *memory / 8);
  dram = std::min(dram, options.max_dram_bytes);
  levels.push_back({"dram", dram});
  nlohmann::json bandwidth = nlohmann::json::object();
  for (const Level& l : levels) {
    const int64_t working_set = l.name == "dram" ? l.capacity : l.capacity / 2;
    const int64_t elements = std::max<int64_t>(working_set / 8, 16);
    const double seconds = median_seconds(backend, stream_graph(elements), options);
    // The launch is the model's own term: the bandwidth is what is left.
    const double rate = double(elements * 8) / std::max(seconds - launch, seconds * 0.05);
    bandwidth[l.name] = {
        {"working_set_bytes", elements * 8}, {"seconds", seconds}, {"bytes_per_second", rate}};
    say(fmt::format("bandwidth {} ({} working set): {:.1f} GB/s", l.name,
                    human_bytes(double(elements * 8)), rate / 1e9));
    if (l.name == "dram")
      c.rates.dram_bytes_per_second = rate;
    else
      c.rates.levels.push_back({l.name, l.capacity, rate});
  }
  measured["bandwidth"] = bandwidth;
  // A cache level measured slower than DRAM (launch-bound at its small size) would only mislead.
  std::erase_if(c.rates.levels, [&](const cost::MemoryLevel& l) {
    return l.bytes_per_second <= c.rates.dram_bytes_per_second;
  });

  // 3. Peak FLOP rate per dtype: square generated matmuls, doubled in size until one takes
  // long enough to time well, for each dtype the backend compiles.
  nlohmann::json flops = nlohmann::json::object();
  for (ir::DType dtype : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    double best = 0;
    int64_t at = 0;
    try {
      for (int64_t n = 128; n <= options.max_matmul_dim; n *= 2) {
        const double seconds = median_seconds(backend, matmul_graph(n, dtype), options);
        const double rate =
            2.0 * double(n) * double(n) * double(n) / std::max(seconds - launch, seconds * 0.05);
        if (rate > best) best = rate, at = n;
        if (seconds > options.long_enough_seconds) break;
      }
    } catch (const std::exception& e) {
      say(fmt::format("flops {}: not measured ({})", ir::dtype_name(dtype), e.what()));
      continue;
    }
    if (best <= 0) continue;
    flops[std::string(ir::dtype_name(dtype))] = {{"flops_per_second", best}, {"matmul_dim", at}};
    c.rates.flops_per_second_by_dtype[dtype] = best;
    if (dtype == ir::DType::f32) c.rates.flops_per_second = best;
    say(fmt::format("flops {} ({}³ matmul): {:.1f} GFLOP/s", ir::dtype_name(dtype), at,
                    best / 1e9));
  }
  measured["flops"] = flops;
  c.measurements = measured;
  return c;
}

std::optional<cost::Device> calibrated_rates(const backend::Backend& backend,
                                             const std::filesystem::path& cache_path) {
  const std::filesystem::path path = cache_path.empty() ? TuningCache::default_path() : cache_path;
  if (!std::filesystem::exists(path)) return std::nullopt;  // never creates the cache
  TuningCache cache(path);
  std::optional<Calibration> c =
      cache.lookup_calibration(backend.name(), backend.device().fingerprint);
  if (!c) return std::nullopt;
  return c->rates;
}

}  // namespace yirage::tune
