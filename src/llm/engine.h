// The generation API: `Llm` opens a model (a GGUF file or a Hugging Face directory with
// safetensors weights), and turns a prompt into text. This is the surface
// the CLI (`yirage generate`, `yirage chat`) and the Python package (`yr.LLM`) bind; the model,
// kernels and sampler underneath are reachable through `model()` for tests and tools.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llm/chat.h"
#include "llm/tokenizer.h"

namespace yirage::backend {
class Backend;  // backend/backend.h
}

namespace yirage::llm {

class LlamaModel;

struct LlmOptions {
  int threads = 2;
  // Tokens the KV cache holds; 0 means the model's training context, capped at 4096.
  int context_length = 0;
  // Bytes the model may take (weights and KV cache); a larger one is refused at open with the
  // numbers, not left to the OOM killer. 0: the memory available now.
  uint64_t memory_budget_bytes = 0;
  // The hot blocks as superoptimized kernel graphs where the weights allow, on `backend`
  // (ModelOptions). The front ends create it by name (backend::create_backend); without one every
  // block runs on the hand-written kernels.
  bool fused_blocks = true;
  std::shared_ptr<backend::Backend> backend = {};
  // RoPE, the KV cache and attention on the backend as well (ModelOptions); unset: where the
  // backend's buffers are not host memory.
  std::optional<bool> attention_on_backend = {};  // attention_placement() reads it from a name
  // Time each hot block's launches (ModelOptions::time_blocks; LlamaModel::block_times).
  bool time_blocks = false;
  // Lines shown while the block graphs are optimized the first time; may be empty.
  std::function<void(const std::string&)> progress = {};
  // The tuning pipeline's lines (candidates, compile times, profiles); may be empty.
  std::function<void(const std::string&)> detail = {};
};

// LlmOptions::attention_on_backend from the front ends' names for it: "auto" (unset), "host" or
// "backend"; anything else is an error naming the valid ones.
std::optional<bool> attention_placement(std::string_view name);

struct GenerateOptions {
  int max_tokens = 128;
  float temperature = 0.0f;     // 0: greedy
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float repeat_penalty = 1.0f;  // 1: off; llama.cpp's definition over the last `repeat_last_n`
  int repeat_last_n = 64;
  uint64_t seed = 0;
  // Wrap the prompt in the model's chat template as one user message (with the template's
  // default system prompt) and open the assistant's turn.
  bool chat = false;
  // Stop at EOS or an end-of-turn token (the stop token is not part of the text).
  bool stop_at_end_of_generation = true;
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // every forward pass after the prefill
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
};

// What one generate() call produced, beyond the text.
struct GenerateResult {
  std::string text;
  std::vector<TokenId> prompt_ids;
  std::vector<TokenId> ids;         // generated ids, stop token excluded
  std::vector<float> first_logits;  // the logits after the prompt, over the vocabulary
  GenerateStats stats;
};

class Llm {
 public:
  // Maps `path`, validates the model and builds the tokenizer; errors name the file. `path` is a
  // GGUF file or a directory holding config.json, model.safetensors (or shards and
  // model.safetensors.index.json) and tokenizer.json.
  static Llm open(const std::string& path, const LlmOptions& options = {});

  Llm(Llm&&) noexcept;
  Llm& operator=(Llm&&) noexcept;
  ~Llm();

  // Generates a continuation of `prompt` and returns it as text. `on_text` receives the text as
  // it becomes complete UTF-8, token by token. Each call starts from an empty KV cache.
  std::string generate(const std::string& prompt, const GenerateOptions& options = {},
                       const std::function<void(std::string_view)>& on_text = {});
  // The same, returning ids, first-step logits and timings as well.
  GenerateResult generate_detailed(const std::string& prompt, const GenerateOptions& options = {},
                                   const std::function<void(std::string_view)>& on_text = {});

  // Continues a conversation: renders `messages` with the chat template, reusing the KV cache
  // for the prefix it already holds from the previous call, and returns the assistant's reply.
  std::string chat(std::span<const ChatMessage> messages, const GenerateOptions& options = {},
                   const std::function<void(std::string_view)>& on_text = {});

  // The model's chat template; an error naming the model when it has none.
  const ChatTemplate& chat_template() const;
  const GenerateStats& last_stats() const;
  const Tokenizer& tokenizer() const;
  LlamaModel& model();

 private:
  struct Impl;
  explicit Llm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace yirage::llm
