// The one list of backends: the built-in ones of this build, then any a program registers.
#include <algorithm>
#include <charconv>
#include <deque>
#include <exception>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend.h"
#include "backend/backend_factories.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

// Backends are built on first use (the cuda one loads the driver) and then live for the whole
// process, so the references get_backend hands out stay valid.
struct Slot {
  std::once_flag once;
  std::unique_ptr<Backend> backend;
};

struct RegistryEntry {
  std::string name;
  BackendFactory make;
  // By device index; stable addresses while the map grows.
  std::map<int, std::unique_ptr<Slot>> slots;
};

// The built-in backends in order of preference ("auto" picks the first available one), then
// those added by register_backend. Entries are only ever appended, under the mutex.
class Registry {
 public:
  Registry() {
    add("cuda", make_cuda_backend);
    add("cpu", make_cpu_backend);
    add("opencl", make_opencl_backend);
    add("triton", make_triton_backend);
    add("reference", make_reference_backend);
  }

  void add(std::string name, BackendFactory make) {
    if (name.empty()) fail("register_backend: the backend's name is empty");
    if (name.find(':') != std::string::npos)
      fail("register_backend: backend name '{}' has a ':', which names a device", name);
    if (!make) fail("register_backend: backend '{}' has no factory", name);
    std::lock_guard lock(mutex_);
    for (const RegistryEntry& e : entries_)
      if (e.name == name)
        fail("register_backend: a backend named '{}' is already registered", name);
    entries_.push_back({std::move(name), std::move(make), {}});
  }

  size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }
  std::string name(size_t index) const {
    std::lock_guard lock(mutex_);
    return entries_.at(index).name;
  }
  BackendFactory factory(size_t index) const {
    std::lock_guard lock(mutex_);
    return entries_.at(index).make;
  }
  Slot& slot(size_t index, int device) {
    std::lock_guard lock(mutex_);
    std::unique_ptr<Slot>& slot = entries_.at(index).slots[device];
    if (!slot) slot = std::make_unique<Slot>();
    return *slot;
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const RegistryEntry& e : entries_) out.push_back(e.name);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::deque<RegistryEntry> entries_;
};

Registry& registry() {
  static Registry r;
  return r;
}

// The instance of the entry's device 0, whose count says which other devices exist.
Backend& instance(size_t index, int device = 0) {
  Slot& slot = registry().slot(index, device);
  std::call_once(slot.once, [&] {
    slot.backend = registry().factory(index)(BackendOptions{.device = device});
  });
  return *slot.backend;
}

// A name as the registry takes it: the entry, and the device after a ':' ("cuda:1").
struct ParsedName {
  size_t entry = 0;
  int device = 0;
};

ParsedName parse_name(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view base = name.substr(0, colon);
  const std::vector<std::string> names = registry().names();
  ParsedName parsed;
  auto known = std::find(names.begin(), names.end(), base);
  if (known == names.end())
    fail("unknown backend '{}'; known backends: {}", name, fmt::join(names, ", "));
  parsed.entry = size_t(known - names.begin());
  if (colon == std::string_view::npos) return parsed;
  const std::string_view index = name.substr(colon + 1);
  const auto [end, error] =
      std::from_chars(index.data(), index.data() + index.size(), parsed.device);
  if (index.empty() || error != std::errc() || end != index.data() + index.size() ||
      parsed.device < 0)
    fail("backend '{}': '{}' is no device index (a number from 0, as in '{}:1')", name, index,
         base);
  return parsed;
}

// Throws unless the machine has device `device` of the entry's kind.
void require_device(std::string_view name, size_t entry, int device) {
  if (device == 0) return;
  const int count = instance(entry).device_count();
  if (device >= count)
    fail("backend '{}': this machine has {} {} device{} (indices 0 to {})", name, count,
         registry().name(entry), count == 1 ? "" : "s", count - 1);
}

void require_available(std::string_view name, const Backend& backend) {
  Availability availability = backend.availability();
  if (!availability.available) fail("backend '{}' is unavailable: {}", name, availability.reason);
}

BackendInfo describe(size_t index, int device) {
  BackendInfo info;
  info.name = device_name(registry().name(index), device);
  info.device_index = device;
  Backend* backend = nullptr;
  try {
    backend = &instance(index, device);
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

// How many devices the entry has here: 1 where its device 0 cannot even be created.
int devices_of(size_t index) {
  try {
    return std::max(1, instance(index).device_count());
  } catch (const std::exception&) {
    return 1;
  }
}

}  // namespace

std::string device_name(std::string_view backend, int device) {
  return device == 0 ? std::string(backend) : fmt::format("{}:{}", backend, device);
}

std::vector<std::string> backend_names() {
  return registry().names();
}

void register_backend(std::string name, BackendFactory make) {
  registry().add(std::move(name), std::move(make));
}

Backend& find_backend(std::string_view name) {
  const ParsedName parsed = parse_name(name);
  require_device(name, parsed.entry, parsed.device);
  return instance(parsed.entry, parsed.device);
}

nlohmann::json Backend::generated_source(const ir::KernelGraph&) const {
  fail("backend '{}' keeps no generated source of its own to show", name());
}

Backend& get_backend(std::string_view name) {
  Backend& backend = find_backend(name);
  require_available(name, backend);
  return backend;
}

std::unique_ptr<Backend> create_backend(std::string_view name, const BackendOptions& options) {
  if (options.threads < 0) fail("backend '{}': {} threads", name, options.threads);
  const ParsedName parsed = parse_name(name);
  BackendOptions with_device = options;
  if (name.find(':') != std::string_view::npos) with_device.device = parsed.device;
  if (with_device.device < 0) fail("backend '{}': device index {}", name, with_device.device);
  require_device(name, parsed.entry, with_device.device);
  std::unique_ptr<Backend> backend = registry().factory(parsed.entry)(with_device);
  require_available(name, *backend);
  return backend;
}

std::vector<BackendInfo> describe_backends() {
  std::vector<BackendInfo> infos;
  for (size_t i = 0, n = registry().size(); i < n; ++i)
    for (int device = 0, count = devices_of(i); device < count; ++device)
      infos.push_back(describe(i, device));
  return infos;
}

std::string default_backend_name() {
  for (const BackendInfo& info : describe_backends())
    if (info.availability.available) return info.name;
  fail("no backend is available on this machine");
}

}  // namespace yirage::backend
