// `yirage backends`: what each backend is and whether it can run here.
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "tools/commands.h"
#include "tune/tune.h"

namespace yirage::tools {
namespace {

// The calibration of the named backend's device, if the tuning cache holds one: null when not.
nlohmann::json calibration_json(const std::string& name) {
  try {
    if (std::optional<std::string> created = calibrated_on(backend::find_backend(name)))
      return {{"created", *created}};
  } catch (const std::exception&) {
    // A backend that cannot describe itself, or a cache that cannot be read: not calibrated.
  }
  return nullptr;
}

nlohmann::json backends_json() {
  nlohmann::json list = nlohmann::json::array();
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    list.push_back({
        {"name", info.name},
        {"device_index", info.device_index},
        {"available", info.availability.available},
        {"reason", info.availability.reason},
        {"calibrated", calibration_json(info.name)},
        {"device",
         {{"name", info.device.name},
          {"fingerprint", info.device.fingerprint},
          {"capabilities", info.device.capabilities}}},
    });
  }
  return list;
}

void print_table() {
  constexpr std::string_view kRow = "{:<10} {:<9} {:<32} {}\n";
  fmt::print(kRow, "NAME", "AVAILABLE", "DEVICE", "FINGERPRINT");
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    const backend::DeviceDescription& device = info.device;
    fmt::print(kRow, info.name, info.availability.available ? "yes" : "no", device.name,
               device.fingerprint.empty() ? "-" : device.fingerprint);
    if (!info.availability.available) fmt::print("  reason: {}\n", info.availability.reason);
    if (device.tunable) {
      const nlohmann::json c = calibration_json(info.name);
      fmt::print("  calibrated: {}\n",
                 c.is_null()
                     ? fmt::format("no (rough rates; yirage calibrate --backend {})", info.name)
                     : fmt::format("yes ({})", c["created"].get<std::string>()));
    }
    fmt::print("  capabilities: {}\n", device.capabilities.dump());
  }
}

}  // namespace

backend::Backend& select_backend(const std::string& name) {
  return backend::get_backend(name == "auto" ? backend::default_backend_name() : name);
}

std::optional<std::string> calibrated_on(const backend::Backend& backend) {
  const std::filesystem::path path = tune::TuningCache::default_path();
  if (!std::filesystem::exists(path)) return std::nullopt;
  tune::TuningCache cache(path);
  const std::optional<tune::Calibration> c =
      cache.lookup_calibration(backend.name(), backend.device().fingerprint);
  if (!c) return std::nullopt;
  return c->created;
}

std::string describe_backend(backend::Backend& backend) {
  backend::DeviceDescription device = backend.device();
  return fmt::format("{} ({}, fingerprint {})", backend.name(), device.name, device.fingerprint);
}

void add_backends_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("backends", "List the backends and their devices");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print a JSON array instead of a table");
  command->callback([json] {
    if (*json)
      fmt::print("{}\n", backends_json().dump(2));
    else
      print_table();
  });
}

}  // namespace yirage::tools
