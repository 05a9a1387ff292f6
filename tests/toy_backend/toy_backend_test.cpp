// A backend from one folder plus one registration line: the registry lists it, every entry of the
// pipeline takes it by name, and nothing outside this folder knows it exists.
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "ir/serialize.h"
#include "support/error.h"
#include "test_util.h"
#include "toy_backend.h"
#include "tune/tune.h"
#include "verify/verify.h"

namespace yirage {
namespace {

using ::testing::HasSubstr;

backend::Backend& toy() {
  static const bool registered = [] {
    backend::register_backend("toy", toy::make_toy_backend);  // the one registration line
    return true;
  }();
  (void)registered;
  return backend::get_backend("toy");
}

// x·w then relu: two kernels unfused, one fused.
ir::KernelGraph linear_relu() {
  ir::KernelGraph g;
  auto x = g.input("x", {4, 64}, ir::DType::f32);
  auto w = g.input("w", {64, 32}, ir::DType::f32);
  g.mark_output(g.relu(g.matmul(x, w)), "out");
  return g;
}

TEST(ToyBackend, TheRegistryListsItAfterTheBuiltInOnes) {
  toy();
  const std::vector<std::string> names = backend::backend_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "toy");
  std::vector<std::string> described;
  for (const backend::BackendInfo& info : backend::describe_backends())
    if (info.name.starts_with("toy") && info.availability.available &&
        info.device.fingerprint == "toy-1")
      described.push_back(fmt::format("{} {} {}", info.name, info.device_index, info.device.name));
  EXPECT_EQ(described, (std::vector<std::string>{"toy 0 toy device 0", "toy:1 1 toy device 1"}));
  // "auto" still prefers a built-in backend.
  EXPECT_NE(backend::default_backend_name(), "toy");
  EXPECT_EQ(backend::create_backend("toy", {})->name(), "toy");
}

TEST(ToyBackend, EachDeviceIsAnInstanceOfItsOwnNamedBackendColonIndex) {
  toy();
  backend::Backend& second = backend::get_backend("toy:1");
  EXPECT_EQ(second.options().device, 1);
  EXPECT_EQ(second.device().name, "toy device 1");
  EXPECT_EQ(&second, &backend::get_backend("toy:1"));
  EXPECT_NE(&second, &toy());
  EXPECT_EQ(&toy(), &backend::get_backend("toy:0"));
  EXPECT_EQ(backend::create_backend("toy:1", {})->options().device, 1);
  EXPECT_EQ(backend::create_backend("toy", {.device = 1})->options().device, 1);
  EXPECT_EQ(backend::device_name("toy", 0), "toy");
  EXPECT_EQ(backend::device_name("toy", 1), "toy:1");
}

TEST(ToyBackend, ADeviceTheMachineLacksIsAOneLineError) {
  toy();
  EXPECT_THAT(test_util::error_of([] { backend::get_backend("toy:2"); }),
              HasSubstr("backend 'toy:2': this machine has 2 toy devices (indices 0 to 1)"));
  EXPECT_THAT(test_util::error_of([] { backend::create_backend("toy", {.device = 5}); }),
              HasSubstr("backend 'toy': this machine has 2 toy devices"));
  EXPECT_THAT(test_util::error_of([] { backend::get_backend("cpu:1"); }),
              HasSubstr("backend 'cpu:1': this machine has 1 cpu device (indices 0 to 0)"));
  for (const char* bad : {"toy:", "toy:x", "toy:-1", "toy:1x"})
    EXPECT_THAT(test_util::error_of([&] { backend::find_backend(bad); }),
                HasSubstr("is no device index"));
  EXPECT_THAT(test_util::error_of([] { backend::get_backend("nope:1"); }),
              HasSubstr("unknown backend 'nope:1'"));
  EXPECT_THAT(test_util::error_of([] { backend::register_backend("a:b", toy::make_toy_backend); }),
              HasSubstr("has a ':', which names a device"));
}

TEST(ToyBackend, ANameIsRegisteredOnce) {
  toy();
  EXPECT_THROW(backend::register_backend("toy", toy::make_toy_backend), Error);
  EXPECT_THROW(backend::register_backend("cpu", toy::make_toy_backend), Error);
  EXPECT_THROW(backend::register_backend("", toy::make_toy_backend), Error);
  EXPECT_THROW(backend::register_backend("empty", nullptr), Error);
}

TEST(ToyBackend, RunsGraphsLikeTheReferenceExecutor) {
  const ir::KernelGraph g = linear_relu();
  const std::vector<ir::HostTensor> inputs = test_util::random_inputs(g, 7);
  const std::vector<ir::HostTensor> got = backend::run_on(toy(), g, inputs);
  const std::vector<ir::HostTensor> want = verify::run_reference(g, inputs);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes, want[0].bytes);
}

TEST(ToyBackend, TheOneOrchestrationSearchesProfilesAndCachesOnIt) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("yirage-toy-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  tune::OptimizeOptions options;
  options.cache_path = dir / "tuning.sqlite";
  options.search.budget_seconds = 20;
  options.profile.min_seconds = 0;
  const tune::OptimizeResult first = tune::optimize(linear_relu(), toy(), options);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_EQ(first.entry.key.backend, "toy");
  EXPECT_EQ(first.entry.key.fingerprint, "toy-1");
  bool searched = false;
  for (const tune::CandidateRecord& c : first.entry.candidates)
    searched |= c.label != "unfused" && c.status == "ok";
  EXPECT_TRUE(searched) << "the search found no fused candidate on the toy device";
  const tune::OptimizeResult second = tune::optimize(linear_relu(), toy(), options);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(ir::structural_hash_hex(second.chosen), ir::structural_hash_hex(first.chosen));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yirage
