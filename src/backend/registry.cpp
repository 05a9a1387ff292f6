// The one list of backends: the built-in ones of this build, then any a program registers.
#include <exception>
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
  std::unique_ptr<Slot> slot = std::make_unique<Slot>();  // stable while the list grows
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
    if (!make) fail("register_backend: backend '{}' has no factory", name);
    std::lock_guard lock(mutex_);
    for (const RegistryEntry& e : entries_)
      if (e.name == name)
        fail("register_backend: a backend named '{}' is already registered", name);
    entries_.push_back({std::move(name), std::move(make)});
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
  Slot& slot(size_t index) const {
    std::lock_guard lock(mutex_);
    return *entries_.at(index).slot;
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const RegistryEntry& e : entries_) out.push_back(e.name);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<RegistryEntry> entries_;
};

Registry& registry() {
  static Registry r;
  return r;
}

Backend& instance(size_t index) {
  Slot& slot = registry().slot(index);
  std::call_once(slot.once, [&] { slot.backend = registry().factory(index)(BackendOptions{}); });
  return *slot.backend;
}

// The registry index of `name`; an unknown name is an error listing the known ones.
size_t entry_of(std::string_view name) {
  const std::vector<std::string> names = registry().names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  fail("unknown backend '{}'; known backends: {}", name, fmt::join(names, ", "));
}

void require_available(std::string_view name, const Backend& backend) {
  Availability availability = backend.availability();
  if (!availability.available) fail("backend '{}' is unavailable: {}", name, availability.reason);
}

BackendInfo describe(size_t index) {
  BackendInfo info;
  info.name = registry().name(index);
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
  return registry().names();
}

void register_backend(std::string name, BackendFactory make) {
  registry().add(std::move(name), std::move(make));
}

Backend& find_backend(std::string_view name) {
  return instance(entry_of(name));
}

nlohmann::json Backend::generated_source(const ir::KernelGraph&) const {
  fail("backend '{}' keeps no generated source of its own to show", name());
}

Backend& get_backend(std::string_view name) {
  Backend& backend = instance(entry_of(name));
  require_available(name, backend);
  return backend;
}

std::unique_ptr<Backend> create_backend(std::string_view name, const BackendOptions& options) {
  if (options.threads < 0) fail("backend '{}': {} threads", name, options.threads);
  std::unique_ptr<Backend> backend = registry().factory(entry_of(name))(options);
  require_available(name, *backend);
  return backend;
}

std::vector<BackendInfo> describe_backends() {
  std::vector<BackendInfo> infos;
  for (size_t i = 0, n = registry().size(); i < n; ++i) infos.push_back(describe(i));
  return infos;
}

std::string default_backend_name() {
  for (const BackendInfo& info : describe_backends())
    if (info.availability.available) return info.name;
  fail("no backend is available on this machine");
}

}  // namespace yirage::backend
