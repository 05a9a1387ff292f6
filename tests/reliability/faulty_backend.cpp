#include "faulty_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "support/error.h"
#include "verify/verify.h"

namespace yirage::isolation_test {
namespace {

using backend::Buffer;

std::atomic<int> compiles_to_fail{0};

// Host memory whose last byte sits right before a PROT_NONE page.
class GuardedBuffer final : public Buffer {
 public:
  explicit GuardedBuffer(size_t bytes) : bytes_(bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes + page - 1) / page * page;
    mapped_ = body + page;
    void* base = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) fail("faulty: mmap of {} bytes failed", mapped_);
    base_ = static_cast<std::byte*>(base);
    if (mprotect(base_ + body, page, PROT_NONE) != 0) fail("faulty: mprotect failed");
    data_ = base_ + (body - bytes);
  }
  ~GuardedBuffer() override { munmap(base_, mapped_); }
  size_t size() const override { return bytes_; }
  void write(std::span<const std::byte> bytes) override {
    if (bytes.size() != bytes_) fail("faulty: write of {} bytes into {}", bytes.size(), bytes_);
    std::memcpy(data_, bytes.data(), bytes.size());
  }
  void read(std::span<std::byte> bytes) const override {
    if (bytes.size() != bytes_) fail("faulty: read of {} bytes from {}", bytes.size(), bytes_);
    std::memcpy(bytes.data(), data_, bytes.size());
  }
  void* host_address() override { return data_; }

 private:
  size_t bytes_;
  size_t mapped_ = 0;
  std::byte* base_ = nullptr;
  std::byte* data_ = nullptr;
};

enum class Fault { none, crash, abort, hang, out_of_bounds };

Fault planted_in(const ir::KernelGraph& graph) {
  for (const ir::Node& n : graph.nodes()) {
    if (n.name == kCrash) return Fault::crash;
    if (n.name == kAbort) return Fault::abort;
    if (n.name == kHang) return Fault::hang;
    if (n.name == kOutOfBounds) return Fault::out_of_bounds;
  }
  return Fault::none;
}

class FaultyModule final : public backend::Module {
 public:
  explicit FaultyModule(ir::KernelGraph graph) : graph_(std::move(graph)) {}
  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const> outputs) override {
    const std::vector<ir::TensorRef> refs = graph_.inputs();
    std::vector<ir::HostTensor> host;
    for (size_t i = 0; i < refs.size(); ++i)
      inputs[i]->read(host.emplace_back(graph_.type(refs[i])).bytes);
    std::vector<ir::HostTensor> results = verify::run_reference(graph_, host);
    for (size_t o = 0; o < results.size(); ++o) outputs[o]->write(results[o].bytes);
    commit(fault_, *outputs[0]);
  }

 private:
  static void commit(Fault fault, Buffer& output) {
    switch (fault) {
      case Fault::none: return;
      case Fault::crash: __builtin_trap();
      case Fault::abort: std::abort();
      case Fault::hang: {
        volatile bool forever = true;
        while (forever) {
        }
        return;
      }
      case Fault::out_of_bounds: {
        auto* end = static_cast<volatile std::byte*>(output.host_address()) + output.size();
        *end = std::byte{1};  // the guard page: SIGSEGV
        return;
      }
    }
  }

  ir::KernelGraph graph_;
  Fault fault_ = planted_in(graph_);
};

class FaultyBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "faulty"; }
  backend::Availability availability() const override { return {true, {}}; }
  backend::DeviceDescription device() const override {
    return {.name = "faulty test device",
            .fingerprint = "faulty-1",
            .capabilities = nlohmann::json::object()};
  }
  backend::BufferType buffer_type() const override {
    return {.host_visible = true, .alignment = 1};
  }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_unique<GuardedBuffer>(bytes);
  }
  std::unique_ptr<backend::Module> compile(const ir::KernelGraph& graph) override {
    int left = compiles_to_fail.load();
    while (left > 0 && !compiles_to_fail.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0) fail("faulty: the module's binary fails to load (planted by the test)");
    return std::make_unique<FaultyModule>(graph);
  }
};

}  // namespace

void fail_next_compiles(int count) {
  compiles_to_fail = count;
}

std::unique_ptr<backend::Backend> make_faulty_backend(const backend::BackendOptions&) {
  return std::make_unique<FaultyBackend>();
}

}  // namespace yirage::isolation_test
