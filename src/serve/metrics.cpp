#include "serve/metrics.h"

#include <fmt/format.h>

namespace yirage::serve {

void Histogram::observe(double seconds) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < kBounds.size(); ++i)
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts_[i]);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                     sum_, name, count_);
  return out;
}

namespace {

template <typename T>
std::string metric(const char* name, const char* type, const char* help, T value) {
  return fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string render_metrics(const llm::SchedulerCounters& s, const ServerMetrics& m,
                           std::span<const llm::BlockTime> blocks) {
  std::string out;
  out += metric("yirage_queue_depth", "gauge", "Requests waiting for KV blocks or a batch slot.",
                s.waiting.load());
  out += metric("yirage_running_sequences", "gauge", "Sequences in the running batch.",
                s.running.load());
  out += metric("yirage_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
                s.kv_blocks_used.load());
  out += metric("yirage_kv_blocks_free", "gauge", "KV cache blocks free in the pool.",
                s.kv_blocks_free.load());
  out += metric("yirage_kv_blocks_cached", "gauge",
                "Free KV blocks still holding a cached prompt prefix (evicted as needed).",
                s.kv_blocks_cached.load());
  out += metric("yirage_prefix_cache_lookup_blocks_total", "counter",
                "Full prompt blocks looked up in the prefix cache.", s.prefix_lookup_blocks.load());
  out += metric("yirage_prefix_cache_hit_blocks_total", "counter",
                "Prompt blocks taken from the prefix cache instead of computed.",
                s.prefix_hit_blocks.load());
  const uint64_t lookups = s.prefix_lookup_blocks.load();
  out += metric("yirage_prefix_cache_hit_rate", "gauge",
                "Hit blocks over looked-up blocks since the start (0 before any lookup).",
                lookups == 0 ? 0.0 : double(s.prefix_hit_blocks.load()) / double(lookups));
  out += metric("yirage_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
                s.prompt_tokens.load());
  out += metric("yirage_generated_tokens_total", "counter", "Tokens generated.",
                s.generated_tokens.load());
  out += metric("yirage_steps_total", "counter", "Batched forward steps.", s.steps.load());
  out += metric("yirage_step_seconds_total", "counter",
                "Time in steps: admission, the forward pass and sampling.",
                double(s.step_microseconds.load()) / 1e6);
  out += metric("yirage_forward_seconds_total", "counter",
                "Time in the steps' forward passes (the model on its backend).",
                double(s.forward_microseconds.load()) / 1e6);
  out += metric("yirage_decode_rows_total", "counter",
                "Decode rows the steps ran (one per generating sequence per step).",
                s.decode_rows.load());
  out += metric("yirage_requests_total", "counter", "Generation requests accepted.",
                m.requests.load());
  out += metric("yirage_requests_rejected_busy_total", "counter",
                "Requests answered 429 because the queue was full.", m.rejected_busy.load());
  out += metric("yirage_requests_rejected_invalid_total", "counter", "Requests answered 400.",
                m.rejected_invalid.load());
  out += metric("yirage_requests_cancelled_total", "counter",
                "Requests cancelled by a client disconnect or shutdown.", m.cancelled.load());
  out += m.time_to_first_token.render("yirage_time_to_first_token_seconds",
                                      "Time from a request's arrival to its first token.");
  out += m.inter_token_latency.render("yirage_inter_token_latency_seconds",
                                      "Time between a request's consecutive tokens.");
  if (!blocks.empty()) {
    out +=
        "# HELP yirage_block_seconds_total Time in a hot block's launches (--time-blocks).\n"
        "# TYPE yirage_block_seconds_total counter\n";
    for (const llm::BlockTime& b : blocks)
      out += fmt::format("yirage_block_seconds_total{{block=\"{}\"}} {}\n", b.block, b.seconds);
    out +=
        "# HELP yirage_block_launches_total Launches of a hot block (--time-blocks).\n"
        "# TYPE yirage_block_launches_total counter\n";
    for (const llm::BlockTime& b : blocks)
      out += fmt::format("yirage_block_launches_total{{block=\"{}\"}} {}\n", b.block, b.launches);
  }
  return out;
}

}  // namespace yirage::serve
