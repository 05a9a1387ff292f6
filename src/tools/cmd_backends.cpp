// `yirage backends`: what each backend is and whether it can run here.
#include <memory>

#include <fmt/format.h>

#include "tools/commands.h"

namespace yirage::tools {
namespace {

nlohmann::json backends_json() {
  nlohmann::json list = nlohmann::json::array();
  for (const backend::BackendInfo& info : backend::describe_backends()) {
    list.push_back({
        {"name", info.name},
        {"available", info.availability.available},
        {"reason", info.availability.reason},
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
    fmt::print("  capabilities: {}\n", device.capabilities.dump());
  }
}

}  // namespace

backend::Backend& select_backend(const std::string& name) {
  return backend::get_backend(name == "auto" ? backend::default_backend_name() : name);
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
