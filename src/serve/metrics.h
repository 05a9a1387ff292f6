// The server's Prometheus metrics: gauges read from the scheduler's counters, and histograms of
// time to first token and inter-token latency, rendered in the Prometheus text format.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "llm/model.h"
#include "llm/scheduler.h"

namespace yirage::serve {

// Counts of observations at or below each bound, as Prometheus' cumulative buckets; thread-safe.
class Histogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1.0,  2.5,   5.0,  10., 30.};
  void observe(double seconds);
  // The histogram's lines under `name` (HELP and TYPE included).
  std::string render(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::array<uint64_t, kBounds.size()> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct ServerMetrics {
  Histogram time_to_first_token, inter_token_latency;
  std::atomic<uint64_t> requests{0}, rejected_busy{0}, rejected_invalid{0}, cancelled{0};
};

// `blocks`: each hot block's launches and seconds, where the server times them (--time-blocks).
std::string render_metrics(const llm::SchedulerCounters& scheduler, const ServerMetrics& server,
                           std::span<const llm::BlockTime> blocks = {});

}  // namespace yirage::serve
