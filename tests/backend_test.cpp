// The backend registry, run_on, the reference backend and the honest cpu and cuda backends.
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/backend_factories.h"
#include "support/error.h"
#include "test_util.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

using test_util::error_of;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

bool is_fingerprint(const std::string& text) {
  return text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

const BackendInfo& info_of(const std::vector<BackendInfo>& infos, std::string_view name) {
  for (const BackendInfo& info : infos)
    if (info.name == name) return info;
  throw std::runtime_error("backend not described: " + std::string(name));
}

// x[2,3] @ w[3,2], then exp: small enough to check against the reference executor directly.
ir::KernelGraph small_graph() {
  ir::KernelGraph g;
  auto x = g.input("x", {2, 3}, ir::DType::f32);
  auto w = g.input("w", {3, 2}, ir::DType::f32);
  g.mark_output(g.exp(g.matmul(x, w)), "y");
  g.mark_output(x, "x_again");
  return g;
}

TEST(BackendRegistry, ListsBackendsInOrderOfPreference) {
  EXPECT_THAT(backend_names(), ElementsAre("cuda", "cpu", "opencl", "triton", "reference"));
  std::vector<BackendInfo> infos = describe_backends();
  ASSERT_EQ(infos.size(), 5u);
  EXPECT_EQ(infos[0].name, "cuda");
  EXPECT_EQ(infos[1].name, "cpu");
  EXPECT_EQ(infos[2].name, "opencl");
  EXPECT_EQ(infos[3].name, "triton");
  EXPECT_EQ(infos[4].name, "reference");
}

TEST(BackendRegistry, UnknownNameListsTheKnownOnes) {
  EXPECT_EQ(error_of([] { get_backend("nope"); }),
            "unknown backend 'nope'; known backends: cuda, cpu, opencl, triton, reference");
}

TEST(BackendRegistry, UnavailableBackendIsAnErrorWithItsReason) {
  for (const BackendInfo& info : describe_backends()) {
    if (info.availability.available) {
      EXPECT_NO_THROW(get_backend(info.name)) << info.name;
      continue;
    }
    EXPECT_EQ(error_of([&] { get_backend(info.name); }),
              fmt::format("backend '{}' is unavailable: {}", info.name, info.availability.reason));
  }
}

TEST(BackendRegistry, ReferenceIsAvailableAndCreatedOnce) {
  Backend& first = get_backend("reference");
  Backend& second = get_backend("reference");
  EXPECT_EQ(&first, &second);
  EXPECT_EQ(first.name(), "reference");
  EXPECT_TRUE(first.availability().available);
}

TEST(BackendRegistry, DefaultIsTheFirstAvailable) {
  std::string expected;
  for (const BackendInfo& info : describe_backends())
    if (info.availability.available && expected.empty()) expected = info.name;
  EXPECT_EQ(default_backend_name(), expected);
  EXPECT_NO_THROW(get_backend(default_backend_name()));
}

TEST(BackendRegistry, DescriptionsCarryDevicesAndReasons) {
  std::vector<BackendInfo> infos = describe_backends();
  const BackendInfo& cpu = info_of(infos, "cpu");
  const BackendInfo& reference = info_of(infos, "reference");
  const BackendInfo& cuda = info_of(infos, "cuda");
  EXPECT_NE(cpu.availability.available, !cpu.availability.reason.empty());
  EXPECT_TRUE(is_fingerprint(cpu.device.fingerprint)) << cpu.device.fingerprint;
  EXPECT_TRUE(cpu.device.capabilities.contains("isa"));
  EXPECT_TRUE(reference.availability.available);
  EXPECT_TRUE(reference.availability.reason.empty());
  EXPECT_EQ(reference.device.name, "reference (host CPU)");
  EXPECT_TRUE(is_fingerprint(reference.device.fingerprint));
  EXPECT_NE(reference.device.fingerprint, cpu.device.fingerprint);
  // The reference backend runs on the host CPU and describes it as the cpu backend does; the cpu
  // backend adds what only its code generator uses (its thread count).
  for (const auto& [key, value] : reference.device.capabilities.items())
    EXPECT_EQ(cpu.device.capabilities.value(key, nlohmann::json()), value) << key;
  // Unavailable without a GPU, and then it says why.
  EXPECT_NE(cuda.availability.available, !cuda.availability.reason.empty());
}

TEST(BackendRegistry, CpuFingerprintIsStable) {
  std::string first = info_of(describe_backends(), "cpu").device.fingerprint;
  std::string second = info_of(describe_backends(), "cpu").device.fingerprint;
  std::string fresh = make_cpu_backend({})->device().fingerprint;
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, fresh);
}

// A backend created with options is the caller's own; the shared one keeps its settings.
TEST(BackendRegistry, CreatedBackendsKeepTheirOwnOptions) {
  EXPECT_EQ(error_of([] { create_backend("tpu", {}); }),
            "unknown backend 'tpu'; known backends: cuda, cpu, opencl, triton, reference");
  EXPECT_EQ(error_of([] { create_backend("cpu", {-1}); }), "backend 'cpu': -1 threads");
  if (Availability cuda = make_cuda_backend({})->availability(); !cuda.available) {
    EXPECT_EQ(error_of([] { create_backend("cuda", {}); }),
              "backend 'cuda' is unavailable: " + cuda.reason);
  }
  if (!make_cpu_backend({})->availability().available) GTEST_SKIP() << "no cpu backend here";
  const nlohmann::json shared = get_backend("cpu").device().capabilities["threads"];
  std::unique_ptr<Backend> three = create_backend("cpu", {3});
  EXPECT_NE(three.get(), &get_backend("cpu"));
  EXPECT_EQ(three->device().capabilities["threads"], 3);
  EXPECT_EQ(create_backend("cpu", {1})->device().capabilities["threads"], 1);
  EXPECT_EQ(get_backend("cpu").device().capabilities["threads"], shared);
  EXPECT_NE(three->compile(small_graph()), nullptr);
}

// Available wherever a working C++ compiler is (the code generator's JIT needs one); otherwise
// every entry refuses with the reason. tests/cpu checks what it computes.
TEST(CpuBackend, RunsWhenAvailableAndRefusesWithItsReasonOtherwise) {
  std::unique_ptr<Backend> cpu = make_cpu_backend({});
  Availability availability = cpu->availability();
  if (availability.available) {
    EXPECT_TRUE(availability.reason.empty());
    EXPECT_EQ(cpu->allocate(16)->size(), 16u);
    EXPECT_NE(cpu->compile(small_graph()), nullptr);
    return;
  }
  EXPECT_FALSE(availability.reason.empty());
  EXPECT_EQ(error_of([&] { cpu->allocate(16); }),
            "backend 'cpu' is unavailable: " + availability.reason);
  EXPECT_EQ(error_of([&] { cpu->compile(small_graph()); }),
            "backend 'cpu' is unavailable: " + availability.reason);
}

TEST(CudaBackend, DescribesWhatItFoundAndRefusesToRun) {
  std::unique_ptr<Backend> cuda = make_cuda_backend({});
  Availability availability = cuda->availability();
  DeviceDescription device = cuda->device();
  if (availability.available) {
    // A GPU machine: tests/cuda runs the backend; here only the description is checked.
    EXPECT_TRUE(is_fingerprint(device.fingerprint));
    EXPECT_TRUE(device.capabilities.contains("multiprocessors"));
    return;
  }
  if (availability.reason.starts_with("found ")) {
    EXPECT_THAT(availability.reason, HasSubstr(device.name));
    EXPECT_THAT(availability.reason, HasSubstr("cannot compile kernels"));
    EXPECT_TRUE(is_fingerprint(device.fingerprint));
    EXPECT_TRUE(device.capabilities.contains("multiprocessors"));
  } else {
    EXPECT_EQ(device.name, "no CUDA device");
    EXPECT_EQ(device.capabilities, nlohmann::json::object());
  }
  EXPECT_EQ(error_of([&] { cuda->allocate(16); }),
            "backend 'cuda' is unavailable: " + availability.reason);
}

TEST(RunOn, ReferenceBackendMatchesTheReferenceExecutor) {
  ir::KernelGraph graph = small_graph();
  std::vector<ir::HostTensor> inputs = test_util::random_inputs(graph, 7);
  std::vector<ir::HostTensor> expected = verify::run_reference(graph, inputs);
  std::vector<ir::HostTensor> got = run_on(get_backend("reference"), graph, inputs);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].type, expected[i].type);
    EXPECT_EQ(got[i].bytes, expected[i].bytes);
  }
}

TEST(RunOn, ChecksInputsFirst) {
  ir::KernelGraph graph = small_graph();
  std::vector<ir::HostTensor> inputs = test_util::random_inputs(graph, 7);
  inputs.pop_back();
  EXPECT_THROW(run_on(get_backend("reference"), graph, inputs), Error);
}

// A backend whose modules write nothing, to see what run_on hands back then.
class LazyBackend final : public Backend {
 public:
  std::string_view name() const override { return "lazy"; }
  Availability availability() const override { return {true, {}}; }
  DeviceDescription device() const override { return {}; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return get_backend("reference").allocate(bytes);
  }
  std::unique_ptr<Module> compile(const ir::KernelGraph&) override {
    struct Idle final : Module {
      void launch(std::span<Buffer* const>, std::span<Buffer* const>) override {}
    };
    return std::make_unique<Idle>();
  }
};

TEST(RunOn, UnwrittenOutputsReadBackAsNaN) {
  LazyBackend lazy;
  ir::KernelGraph graph = small_graph();
  std::vector<ir::HostTensor> outputs = run_on(lazy, graph, test_util::random_inputs(graph, 7));
  ASSERT_EQ(outputs.size(), 2u);
  for (const ir::HostTensor& output : outputs)
    for (int64_t i = 0; i < output.size(); ++i) EXPECT_TRUE(std::isnan(output.get(i)));
}

// Each buffer type's promises hold for the buffers allocate() returns; host-memory backends say
// so, and the cuda backend, whose memory is on the device, says it is not.
TEST(BufferType, AllocateKeepsTheTypesPromises) {
  EXPECT_TRUE(get_backend("reference").buffer_type().host_visible);
  EXPECT_FALSE(make_cuda_backend({})->buffer_type().host_visible);
  for (const BackendInfo& info : describe_backends()) {
    if (!info.availability.available) continue;
    Backend& backend = get_backend(info.name);
    const BufferType type = backend.buffer_type();
    EXPECT_GE(type.alignment, 1u) << info.name;
    for (size_t bytes : {size_t(1), size_t(100), size_t(5) << 20}) {
      std::unique_ptr<Buffer> buffer = backend.allocate(bytes);
      void* address = buffer->host_address();
      EXPECT_EQ(address != nullptr, type.host_visible) << info.name << " " << bytes;
      if (address) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(address) % type.alignment, 0u) << info.name;
      }
    }
  }
}

// buffer_from_host_ptr: on every available backend whose buffers are host memory, a buffer over
// the caller's bytes themselves (modules then read and write them in place; a read-only one
// refuses writes, naming the memory); elsewhere none, and the caller copies.
TEST(BufferType, BufferFromHostPointerIsTheCallersMemoryOrNone) {
  EXPECT_EQ(make_cuda_backend({})->buffer_from_host_ptr(nullptr, 0, HostAccess::read_only, "x"),
            nullptr);
  for (const BackendInfo& info : describe_backends()) {
    if (!info.availability.available) continue;
    Backend& backend = get_backend(info.name);
    std::vector<float> memory = {1.5f, -2.0f, 3.25f};
    const size_t bytes = memory.size() * sizeof(float);
    std::unique_ptr<Buffer> view =
        backend.buffer_from_host_ptr(memory.data(), bytes, HostAccess::read_write, "the test's");
    if (!backend.buffer_type().host_visible) {
      EXPECT_EQ(view, nullptr) << info.name;
      continue;
    }
    ASSERT_NE(view, nullptr) << info.name;
    EXPECT_EQ(view->host_address(), memory.data()) << info.name;
    EXPECT_EQ(view->size(), bytes);
    const std::vector<float> written = {4.0f, 5.0f, 6.0f};
    view->write(std::as_bytes(std::span(written)));
    EXPECT_EQ(memory, written) << info.name;
    std::unique_ptr<Buffer> read_only =
        backend.buffer_from_host_ptr(memory.data(), bytes, HostAccess::read_only, "the weights");
    EXPECT_THAT(test_util::error_of([&] { read_only->write(std::as_bytes(std::span(written))); }),
                ::testing::HasSubstr("the weights is the caller's memory"));
    std::vector<float> back(2);
    EXPECT_THAT(
        test_util::error_of([&] { read_only->read(std::as_writable_bytes(std::span(back))); }),
        ::testing::HasSubstr("8 bytes given for a buffer of 12 bytes"));
  }
}

TEST(ReferenceBackend, BuffersCheckSizes) {
  std::unique_ptr<Buffer> buffer = get_backend("reference").allocate(8);
  EXPECT_EQ(buffer->size(), 8u);
  EXPECT_NE(buffer->host_address(), nullptr);
  std::vector<std::byte> bytes(8, std::byte{0x5a});
  buffer->write(bytes);
  std::vector<std::byte> back(8);
  buffer->read(back);
  EXPECT_EQ(back, bytes);
  std::vector<std::byte> wrong(4);
  EXPECT_EQ(error_of([&] { buffer->write(wrong); }),
            "reference buffer write: 4 bytes given for a buffer of 8 bytes");
  EXPECT_THROW(buffer->read(wrong), Error);
}

TEST(ReferenceBackend, LaunchChecksBufferCountsAndSizes) {
  Backend& reference = get_backend("reference");
  std::unique_ptr<Module> module = reference.compile(small_graph());
  auto x = reference.allocate(6 * 4), w = reference.allocate(6 * 4);
  auto y = reference.allocate(4 * 4), x_again = reference.allocate(6 * 4);
  auto short_y = reference.allocate(4);
  std::vector<Buffer*> inputs{x.get(), w.get()};
  std::vector<Buffer*> one_output{y.get()};
  EXPECT_EQ(error_of([&] { module->launch(inputs, one_output); }),
            "reference launch: 1 output buffers given, the graph has 2");
  std::vector<Buffer*> bad_output{short_y.get(), x_again.get()};
  EXPECT_EQ(error_of([&] { module->launch(inputs, bad_output); }),
            "reference launch: output 'y' of type f32[2, 2] needs 16 bytes, its buffer has 4");
  std::vector<Buffer*> swapped_inputs{y.get(), w.get()};
  std::vector<Buffer*> outputs{y.get(), x_again.get()};
  EXPECT_EQ(error_of([&] { module->launch(swapped_inputs, outputs); }),
            "reference launch: input 'x' of type f32[2, 3] needs 24 bytes, its buffer has 16");
}

}  // namespace
}  // namespace yirage::backend
