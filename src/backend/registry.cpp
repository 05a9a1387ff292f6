// The one list of backends this build knows.
#include <array>
#include <exception>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend.h"
#include "backend/backend_factories.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

struct RegistryEntry {
  std::string_view name;
  std::unique_ptr<Backend> (*make)(const BackendOptions&);
};

// In order of preference: "auto" picks the first available one.
constexpr std::array kRegistry = {
    RegistryEntry{"cuda", make_cuda_backend},
    RegistryEntry{"cpu", make_cpu_backend},
    RegistryEntry{"reference", make_reference_backend},
};

// Backends are built on first use (the cuda one loads the driver) and then live for the whole
// process, so the references get_backend hands out stay valid.
struct Slot {
  std::once_flag once;
  std::unique_ptr<Backend> backend;
};

Backend& instance(size_t index) {
  static std::array<Slot, kRegistry.size()> slots;
  Slot& slot = slots[index];
  std::call_once(slot.once, [&] { slot.backend = kRegistry[index].make(BackendOptions{}); });
  return *slot.backend;
}

// The registry index of `name`; an unknown name is an error listing the known ones.
size_t entry_of(std::string_view name) {
  for (size_t i = 0; i < kRegistry.size(); ++i)
    if (kRegistry[i].name == name) return i;
  fail("unknown backend '{}'; known backends: {}", name, fmt::join(backend_names(), ", "));
}

void require_available(std::string_view name, const Backend& backend) {
  Availability availability = backend.availability();
  if (!availability.available) fail("backend '{}' is unavailable: {}", name, availability.reason);
}

BackendInfo describe(size_t index) {
  BackendInfo info;
  info.name = std::string(kRegistry[index].name);
  Backend* backend = nullptr;
  try {
    backend = &instance(index);
  } catch (const std::exception& e) {
    info.availability.reason = fmt::format("creating the backend failed: {}", e.what());
    return info;
  }
  info.availability = backend->availability();
  try {
    info.device = backend->device();
  } catch (const std::exception& e) {
    std::string failure = fmt::format("describing the device failed: {}", e.what());
    info.availability.reason = info.availability.reason.empty()
                                   ? failure
                                   : fmt::format("{}; {}", info.availability.reason, failure);
  }
  return info;
}

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const RegistryEntry& entry : kRegistry) names.emplace_back(entry.name);
  return names;
}

Backend& get_backend(std::string_view name) {
  Backend& backend = instance(entry_of(name));
  require_available(name, backend);
  return backend;
}

std::unique_ptr<Backend> create_backend(std::string_view name, const BackendOptions& options) {
  if (options.threads < 0) fail("backend '{}': {} threads", name, options.threads);
  std::unique_ptr<Backend> backend = kRegistry[entry_of(name)].make(options);
  require_available(name, *backend);
  return backend;
}

std::vector<BackendInfo> describe_backends() {
  std::vector<BackendInfo> infos;
  for (size_t i = 0; i < kRegistry.size(); ++i) infos.push_back(describe(i));
  return infos;
}

std::string default_backend_name() {
  for (const BackendInfo& info : describe_backends())
    if (info.availability.available) return info.name;
  fail("no backend is available on this machine");
}

}  // namespace yirage::backend
