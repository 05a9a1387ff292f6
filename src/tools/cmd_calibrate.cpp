// `yirage calibrate --backend NAME`: measures the cost model's rates on the backend's device
// (tune::calibrate) and stores them in the tuning cache under the device's fingerprint, where
// the search's ranking then reads them.
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "support/error.h"
#include "tools/commands.h"
#include "tune/tune.h"

namespace yirage::tools {
namespace {

struct CalibrateCliOptions {
  std::string backend = "auto";
  std::string cache;
  bool json = false;
  bool quick = false;
  bool clear = false;
};

void run(const CalibrateCliOptions& o) {
  backend::Backend& backend = select_backend(o.backend);
  const std::filesystem::path path =
      o.cache.empty() ? tune::TuningCache::default_path() : std::filesystem::path(o.cache);
  tune::TuningCache cache(path);
  const backend::DeviceDescription device = backend.device();
  if (o.clear) {
    const bool removed = cache.clear_calibration(backend.name(), device.fingerprint);
    fmt::print("{} the calibration of {}\n", removed ? "removed" : "there was no",
               describe_backend(backend));
    return;
  }
  if (!device.tunable)
    fail("calibrate: backend '{}' is not tunable: its times rank nothing that runs elsewhere",
         backend.name());
  tune::CalibrateOptions options;
  if (o.quick) {
    options.seconds_per_measurement = 0.02;
    options.max_dram_bytes = int64_t(64) << 20;
    options.max_matmul_dim = 512;
  }
  // Progress on stderr, so that --json's stdout stays one object.
  options.progress = [](const std::string& line) { fmt::print(stderr, "  {}\n", line); };
  fmt::print(stderr, "calibrating {}\n", describe_backend(backend));
  tune::Calibration c = tune::calibrate(backend, options);
  cache.store_calibration(c);
  c = *cache.lookup_calibration(c.backend, c.fingerprint);
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"backend", c.backend},
                                      {"fingerprint", c.fingerprint},
                                      {"device", c.device_name},
                                      {"created", c.created},
                                      {"cache", path.string()},
                                      {"rates", cost::to_json(c.rates)},
                                      {"measurements", c.measurements}}
                           .dump());
    return;
  }
  fmt::print("stored the calibration of {} ({}, fingerprint {}) in {}\n", c.backend, c.device_name,
             c.fingerprint, path.string());
  fmt::print("rates: {}\n", cost::to_json(c.rates).dump());
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "calibrate",
      "Measure the cost model's rates (bandwidth per memory level, FLOP rate per dtype, launch "
      "overhead) on a backend's device and store them in the tuning cache");
  auto options = std::make_shared<CalibrateCliOptions>();
  command->add_option("--backend", options->backend, "Backend whose device to calibrate")
      ->capture_default_str();
  command->add_option("--cache", options->cache,
                      "Tuning database (default $YIRAGE_CACHE_DIR/tuning.sqlite, else the XDG "
                      "cache dir)");
  command->add_flag("--json", options->json, "Print one JSON object instead of text");
  command->add_flag("--quick", options->quick,
                    "Shorter measurements and smaller working sets (for tests; rougher rates)");
  command->add_flag("--clear", options->clear,
                    "Remove the device's calibration instead (the model then uses the "
                    "capabilities' rough rates)");
  command->callback([options] { run(*options); });
}

}  // namespace yirage::tools
