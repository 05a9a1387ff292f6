// Options shared by `yirage generate` and `yirage chat`.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "llm/llm.h"

namespace yirage::tools {

// The LLM's front ends run on the cpu backend unless told otherwise: its answers are the ones
// compared token for token with llama.cpp.
inline constexpr std::string_view kLlmDefaultBackend = "cpu";

// A backend of the LLM's own, with its thread count; "auto" is the first available one. An
// unavailable backend is an error with the reason.
inline std::shared_ptr<backend::Backend> create_llm_backend(const std::string& name, int threads) {
  return backend::create_backend(name == "auto" ? backend::default_backend_name() : name,
                                 {.threads = threads});
}

inline void add_backend_option(CLI::App& cmd, std::string& backend) {
  cmd.add_option("--backend", backend,
                 "Backend the block graphs run on (a name from `yirage backends`, or auto)")
      ->capture_default_str();
}

struct LlmCliOptions {
  std::string model;
  int threads = 2;
  std::string backend = std::string(kLlmDefaultBackend);
  int context = 0;
  bool hand_written = false;
  std::string attention = "auto";
  bool verbose = false;
  bool time_blocks = false;
  llm::GenerateOptions generate;
};

inline void add_llm_options(CLI::App& cmd, LlmCliOptions& o) {
  cmd.add_option("--model,-m", o.model,
                 "GGUF model file, or Hugging Face directory (config.json, safetensors, "
                 "tokenizer.json)")
      ->required();
  cmd.add_option("-n,--max-tokens", o.generate.max_tokens, "Tokens to generate")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--temperature", o.generate.temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--top-k", o.generate.top_k, "Keep the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--top-p", o.generate.top_p, "Keep the most likely tokens up to this mass")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", o.generate.repeat_penalty,
                 "Penalty for tokens among the last --repeat-last-n (1: off)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--repeat-last-n", o.generate.repeat_last_n, "Window of the repeat penalty")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--seed", o.generate.seed, "Sampling seed");
  cmd.add_option("--threads,-t", o.threads, "Threads")->check(CLI::Range(1, 1024));
  add_backend_option(cmd, o.backend);
  cmd.add_option("--context", o.context, "KV cache size in tokens (0: the model's, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--hand-written", o.hand_written,
               "Run every block on the hand-written kernels instead of the superoptimized graphs");
  cmd.add_option("--attention", o.attention,
                 "Where RoPE, the KV cache and attention run: on the host's hand-written kernels, "
                 "as a kernel graph on the backend, or auto (the backend where its memory is not "
                 "the host's)")
      ->check(CLI::IsMember({"auto", "host", "backend"}))
      ->capture_default_str();
  cmd.add_flag("--verbose", o.verbose,
               "Show the superoptimizer's candidates and timings while the blocks are optimized");
  cmd.add_flag("--time-blocks", o.time_blocks,
               "Time each hot block's launches, waiting for the backend around each (slower "
               "steps), and print where the time went");
}

// Optimization progress goes to stderr, as the statistics do, so stdout stays the text.
inline llm::Llm open_llm(const LlmCliOptions& o) {
  llm::LlmOptions options{.threads = o.threads, .context_length = o.context};
  options.fused_blocks = !o.hand_written;
  options.backend = create_llm_backend(o.backend, o.threads);
  options.attention_on_backend = llm::attention_placement(o.attention);
  options.time_blocks = o.time_blocks;
  options.progress = [](const std::string& line) { fmt::print(stderr, "optimizing {}\n", line); };
  if (o.verbose) options.detail = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  llm::Llm model = llm::Llm::open(o.model, options);
  fmt::print(stderr, "hot blocks: {}\n", model.model().hot_path());
  return model;
}

inline void print_stats(const llm::GenerateStats& s) {
  fmt::print(stderr, "prefill: {} tokens, {:.1f} tokens/s; decode: {} tokens, {:.1f} tokens/s\n",
             s.prompt_tokens, s.prefill_tokens_per_second(), s.generated_tokens,
             s.decode_tokens_per_second());
}

// Where the steps' time went, by block, the most first (--time-blocks).
inline void print_block_times(const llm::LlamaModel& model) {
  std::vector<llm::BlockTime> times = model.block_times();
  if (times.empty()) {
    fmt::print(stderr, "block times: none, no block was launched\n");
    return;
  }
  std::ranges::sort(times, [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  double total = 0;
  for (const llm::BlockTime& t : times) total += t.seconds;
  fmt::print(stderr, "block times ({:.1f} ms in all, the backend waited for around each):\n",
             total * 1e3);
  fmt::print(stderr, "  {:>10} {:>8} {:>12} {:>6}  {}\n", "ms", "launches", "ms/launch", "share",
             "block");
  for (const llm::BlockTime& t : times)
    fmt::print(stderr, "  {:10.2f} {:8} {:12.4f} {:5.1f}%  {}\n", t.seconds * 1e3, t.launches,
               t.seconds * 1e3 / double(t.launches), 100 * t.seconds / total, t.block);
}

}  // namespace yirage::tools
