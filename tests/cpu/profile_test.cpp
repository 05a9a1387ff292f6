// The profiler measures with the backend's own clock (Backend::time): a backend whose clock is a
// counter shows which numbers the profile reports, how it asks for more samples, and that the
// input rotation carries on from one request to the next.
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "support/error.h"
#include "tune/tune.h"

namespace yirage {
namespace {

// Sample k (counting from 1 over the backend's life) takes k ms per launch; each sample is
// `launches` launches. It records every request and launches nothing.
class CounterClockBackend final : public backend::Backend {
 public:
  struct Request {
    backend::TimingPlan plan;
    std::vector<const backend::Buffer*> first_inputs;  // each set's first input, in given order
  };

  std::string_view name() const override { return "counter-clock"; }
  backend::Availability availability() const override { return {true, {}}; }
  // 64 bytes of last-level cache: the profiler rotates enough sets to cover twice that.
  backend::DeviceDescription device() const override {
    backend::DeviceDescription d;
    d.name = d.fingerprint = "counter";
    d.capabilities = {{"l3_bytes", 64}};
    return d;
  }
  std::unique_ptr<backend::Buffer> allocate(size_t bytes) override {
    return backend::get_backend("reference").allocate(bytes);
  }
  std::unique_ptr<backend::Module> compile(const ir::KernelGraph& graph) override {
    return backend::get_backend("reference").compile(graph);
  }
  backend::Timings time(backend::Module&, std::span<const backend::LaunchBuffers> sets,
                        const backend::TimingPlan& plan) override {
    Request& r = requests.emplace_back(Request{plan, {}});
    for (const backend::LaunchBuffers& set : sets) r.first_inputs.push_back(set.inputs[0]);
    backend::Timings t;
    t.launches_per_repetition = launches;
    for (int i = 0; i < plan.repetitions; ++i) t.seconds_per_launch.push_back(1e-3 * ++ticks);
    return t;
  }

  int launches = 4;
  int ticks = 0;
  std::vector<Request> requests;
};

// One f32[2, 8] input: 64 bytes, so 2 sets cover twice the 64-byte cache.
ir::KernelGraph one_input_graph() {
  ir::KernelGraph g;
  g.mark_output(g.exp(g.input("x", {2, 8}, ir::DType::f32)), "y");
  return g;
}

TEST(ProfileClock, TheReportedTimesAreTheBackendsClock) {
  CounterClockBackend backend;
  const ir::KernelGraph g = one_input_graph();
  std::unique_ptr<backend::Module> module = backend.compile(g);
  tune::ProfileOptions options;
  options.warmup = 3;
  options.min_repetitions = 3;
  // The first request's samples (1, 2, 3 ms of 4 launches) measure 24 ms; at their mean of
  // 8 ms a sample, ten more reach 100 ms.
  options.min_seconds = 0.1;
  const tune::Profile p = tune::profile(backend, *module, g, options);

  ASSERT_EQ(backend.requests.size(), 2u);
  EXPECT_EQ(backend.requests[0].plan.warmup, 3);
  EXPECT_EQ(backend.requests[0].plan.repetitions, 3);
  EXPECT_EQ(backend.requests[0].plan.launches_per_repetition, 0);  // the backend's choice
  EXPECT_EQ(backend.requests[1].plan.warmup, 0);
  EXPECT_EQ(backend.requests[1].plan.repetitions, 10);
  EXPECT_EQ(p.repetitions, 13);
  EXPECT_EQ(p.launches_per_repetition, 4);
  EXPECT_EQ(p.input_sets, 2);
  EXPECT_NEAR(p.min_seconds, 1e-3, 1e-12);
  EXPECT_NEAR(p.median_seconds, 7e-3, 1e-12);
  EXPECT_NEAR(p.mean_seconds, 7e-3, 1e-12);

  // The first request ran 3 + 3 * 4 = 15 launches, an odd number over 2 sets: the second starts
  // on the other set.
  const std::vector<const backend::Buffer*>& first = backend.requests[0].first_inputs;
  ASSERT_EQ(first.size(), 2u);
  EXPECT_NE(first[0], first[1]);
  EXPECT_EQ(backend.requests[1].first_inputs,
            (std::vector<const backend::Buffer*>{first[1], first[0]}));
}

TEST(ProfileClock, TheWarmUpIsTheOptionsAndNoMoreThanMaxRepetitions) {
  CounterClockBackend backend;
  const ir::KernelGraph g = one_input_graph();
  std::unique_ptr<backend::Module> module = backend.compile(g);
  tune::ProfileOptions options;
  options.warmup = 1;
  options.min_repetitions = 2;
  options.max_repetitions = 5;
  options.min_seconds = 1e9;
  options.launches_per_repetition = 7;
  const tune::Profile p = tune::profile(backend, *module, g, options);
  ASSERT_EQ(backend.requests.size(), 2u);
  EXPECT_EQ(backend.requests[0].plan.warmup, 1);  // not one per input set (2 here)
  EXPECT_EQ(backend.requests[0].plan.launches_per_repetition, 7);
  EXPECT_EQ(backend.requests[1].plan.repetitions, 3);
  EXPECT_EQ(p.repetitions, 5);
  EXPECT_NEAR(p.median_seconds, 3e-3, 1e-12);
}

// A backend that returns the wrong number of samples is an error, not a short profile.
class ShortClockBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "short-clock"; }
  backend::Availability availability() const override { return {true, {}}; }
  backend::DeviceDescription device() const override { return {}; }
  std::unique_ptr<backend::Buffer> allocate(size_t bytes) override {
    return backend::get_backend("reference").allocate(bytes);
  }
  std::unique_ptr<backend::Module> compile(const ir::KernelGraph& graph) override {
    return backend::get_backend("reference").compile(graph);
  }
  backend::Timings time(backend::Module&, std::span<const backend::LaunchBuffers>,
                        const backend::TimingPlan&) override {
    return {{1e-3}, 1};
  }
};

TEST(ProfileClock, TooFewSamplesAreAnError) {
  ShortClockBackend backend;
  const ir::KernelGraph g = one_input_graph();
  std::unique_ptr<backend::Module> module = backend.compile(g);
  EXPECT_THROW(tune::profile(backend, *module, g), Error);
}

}  // namespace
}  // namespace yirage
