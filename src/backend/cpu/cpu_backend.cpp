// The "cpu" backend: generated C++ with SIMD for the host. Only its device description exists so
// far; until the code generator lands it says so instead of pretending to run anything.
#include "backend/backend_factories.h"
#include "backend/cpu/cpu_device.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

constexpr std::string_view kNotBuilt =
    "the cpu backend's code generator is not built yet (it lands with the CPU backend issue); "
    "use --backend reference";

class CpuBackend final : public Backend {
 public:
  CpuBackend() : device_(cpu::describe_cpu(cpu::read_host_cpu())) {}

  std::string_view name() const override { return "cpu"; }
  Availability availability() const override { return {false, std::string(kNotBuilt)}; }
  DeviceDescription device() const override { return device_; }

  std::unique_ptr<Buffer> allocate(size_t) override { unavailable(); }
  std::unique_ptr<Module> compile(const ir::KernelGraph&) override { unavailable(); }

 private:
  [[noreturn]] static void unavailable() { fail("backend 'cpu' is unavailable: {}", kNotBuilt); }

  DeviceDescription device_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace yirage::backend
