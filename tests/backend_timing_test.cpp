// Backend::time's default (the host's steady clock), the devices' tunable flags, and
// check_timing_plan. The profiler's use of Backend::time is in tests/cpu/profile_test.cpp.
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

// A module that records which input buffer each launch got.
class RecordingModule final : public Module {
 public:
  void launch(std::span<Buffer* const> inputs, std::span<Buffer* const>) override {
    launched.push_back(inputs.empty() ? nullptr : inputs[0]);
  }
  std::vector<const Buffer*> launched;
};

// Counts synchronize() calls; everything else is the reference backend's.
class CountingBackend final : public Backend {
 public:
  std::string_view name() const override { return "counting"; }
  Availability availability() const override { return {true, {}}; }
  DeviceDescription device() const override { return {}; }
  std::unique_ptr<Buffer> allocate(size_t bytes) override {
    return get_backend("reference").allocate(bytes);
  }
  std::unique_ptr<Module> compile(const ir::KernelGraph&) override {
    return std::make_unique<RecordingModule>();
  }
  void synchronize() override { ++synchronized; }
  int synchronized = 0;
};

TEST(BackendTime, TheDefaultRotatesTheSetsAndSynchronizesEachSample) {
  CountingBackend backend;
  RecordingModule module;
  std::unique_ptr<Buffer> a = backend.allocate(4), b = backend.allocate(4);
  std::vector<Buffer*> set_a{a.get()}, set_b{b.get()};
  const std::vector<LaunchBuffers> sets{{set_a, {}}, {set_b, {}}};
  const Timings t =
      backend.time(module, sets, {.warmup = 1, .repetitions = 2, .launches_per_repetition = 3});
  // Launch k runs on set k % 2, warm-up included.
  const std::vector<const Buffer*> expected{a.get(), b.get(), a.get(), b.get(),
                                            a.get(), b.get(), a.get()};
  EXPECT_EQ(module.launched, expected);
  EXPECT_EQ(backend.synchronized, 3);  // after the warm-up launch and after each sample
  EXPECT_EQ(t.launches_per_repetition, 3);
  ASSERT_EQ(t.seconds_per_launch.size(), 2u);
  for (double s : t.seconds_per_launch) EXPECT_GE(s, 0);
}

TEST(BackendTime, TheDefaultTakesOneLaunchPerSampleUnlessTold) {
  CountingBackend backend;
  RecordingModule module;
  const std::vector<LaunchBuffers> sets(1);
  const Timings t = backend.time(module, sets, {.warmup = 0, .repetitions = 4});
  EXPECT_EQ(t.launches_per_repetition, 1);
  EXPECT_EQ(t.seconds_per_launch.size(), 4u);
  EXPECT_EQ(module.launched.size(), 4u);
}

TEST(BackendTime, RefusesNoBuffersAndNegativeCounts) {
  CountingBackend backend;
  RecordingModule module;
  EXPECT_THROW(backend.time(module, {}, {}), Error);
  const std::vector<LaunchBuffers> sets(1);
  EXPECT_THROW(backend.time(module, sets, {.warmup = -1}), Error);
  EXPECT_THROW(backend.time(module, sets, {.launches_per_repetition = -2}), Error);
  EXPECT_TRUE(module.launched.empty());
}

// The reference backend is the literal executor: searched for, never tuned or cached.
TEST(BackendTime, OnlyTheReferenceBackendIsNotWorthTuning) {
  EXPECT_FALSE(get_backend("reference").device().tunable);
  for (const BackendInfo& info : describe_backends()) {
    if (info.availability.available && info.name != "reference") {
      EXPECT_TRUE(info.device.tunable) << info.name;
    }
  }
}

}  // namespace
}  // namespace yirage::backend
