// The "opencl" backend of a build without the OpenCL headers: it describes itself and says why
// it cannot run.
#include "backend/backend_factories.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

class UnbuiltOpenclBackend final : public Backend {
 public:
  std::string_view name() const override { return "opencl"; }
  Availability availability() const override {
    return {false,
            "this build has no OpenCL support: its headers (opencl-c-headers) were not found when "
            "it was configured"};
  }
  DeviceDescription device() const override {
    return {
        .name = "no OpenCL device", .fingerprint = "", .capabilities = nlohmann::json::object()};
  }
  std::unique_ptr<Buffer> allocate(size_t) override { unavailable(); }
  std::unique_ptr<Module> compile(const ir::KernelGraph&) override { unavailable(); }

 private:
  [[noreturn]] void unavailable() const {
    fail("backend 'opencl' is unavailable: {}", availability().reason);
  }
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const BackendOptions&) {
  return std::make_unique<UnbuiltOpenclBackend>();
}

}  // namespace yirage::backend
