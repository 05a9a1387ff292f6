#include "llm/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <variant>

#include "llm/hf_model.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What a model is read from: a GGUF file, or a Hugging Face directory (config.json, safetensors,
// tokenizer.json). The weights borrow from its mapping.
using ModelSource = std::variant<GgufFile, HfModelDir>;

ModelSource open_source(const std::string& path) {
  if (std::filesystem::is_directory(path)) return HfModelDir::open(path);
  return GgufFile::open(path);
}

LlamaConfig config_of(const ModelSource& source) {
  if (const auto* dir = std::get_if<HfModelDir>(&source)) return dir->config();
  return LlamaConfig::from_gguf(std::get<GgufFile>(source));
}

LlamaWeights weights_of(const ModelSource& source) {
  if (const auto* dir = std::get_if<HfModelDir>(&source)) return dir->weights();
  const GgufFile& file = std::get<GgufFile>(source);
  return LlamaWeights::from_gguf(file, LlamaConfig::from_gguf(file));
}

Tokenizer tokenizer_of(const ModelSource& source) {
  if (const auto* dir = std::get_if<HfModelDir>(&source)) return dir->tokenizer();
  return Tokenizer::from_gguf(std::get<GgufFile>(source));
}

std::optional<ChatTemplate> chat_template_of(const ModelSource& source) {
  if (const auto* dir = std::get_if<HfModelDir>(&source)) return dir->chat_template();
  const GgufFile& file = std::get<GgufFile>(source);
  if (file.find("tokenizer.chat_template") == nullptr) return std::nullopt;
  return ChatTemplate::from_gguf(file);
}

}  // namespace

std::optional<bool> attention_placement(std::string_view name) {
  if (name == "auto") return std::nullopt;
  if (name == "host" || name == "backend") return name == "backend";
  fail("attention \"{}\" is not one of auto, host, backend", name);
}

double GenerateStats::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
}

double GenerateStats::decode_tokens_per_second() const {
  // The first generated token comes out of the prefill; the rest each cost one decode step.
  const int steps = std::max(generated_tokens - 1, 0);
  return decode_seconds > 0 ? steps / decode_seconds : 0;
}

struct Llm::Impl {
  Impl(const std::string& path_, const LlmOptions& options)
      : backend(options.backend),
        path(path_),
        source(open_source(path)),
        model(config_of(source), weights_of(source),
              ModelOptions{.threads = options.threads,
                           .context_length = options.context_length,
                           .memory_budget_bytes = options.memory_budget_bytes,
                           .fused_blocks = options.fused_blocks,
                           .backend = options.backend.get(),
                           .attention_on_backend = options.attention_on_backend,
                           .time_blocks = options.time_blocks,
                           .progress = options.progress,
                           .detail = options.detail}),
        tokenizer(tokenizer_of(source)),
        chat_template(chat_template_of(source)) {
    if (tokenizer.vocab_size() > static_cast<size_t>(model.config().n_vocab))
      fail("{}: the tokenizer has {} tokens but the model only {} embeddings", path,
           tokenizer.vocab_size(), model.config().n_vocab);
  }

  const ChatTemplate& require_template() const {
    if (!chat_template) fail("{}: the model has no chat template", path);
    return *chat_template;
  }

  // Feeds `ids` after reusing the longest prefix the cache already holds, then samples up to
  // max_tokens tokens.
  GenerateResult run(std::vector<TokenId> ids, const GenerateOptions& options,
                     const std::function<void(std::string_view)>& on_text) {
    if (ids.empty()) fail("the prompt is empty: nothing to continue from");
    if (options.max_tokens < 0) fail("max tokens {} is negative", options.max_tokens);
    SamplerOptions so;
    so.temperature = options.temperature;
    so.top_k = options.top_k;
    so.top_p = options.top_p;
    so.repeat_penalty = options.repeat_penalty;
    so.repeat_last_n = options.repeat_last_n;
    so.seed = options.seed;
    Sampler sampler(so);

    size_t common = 0;
    while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
    if (common == ids.size()) --common;  // at least one token must run to produce logits
    model.truncate(static_cast<int>(common));
    cached.assign(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(common));

    GenerateResult result;
    result.prompt_ids = ids;
    result.stats.prompt_tokens = static_cast<int>(ids.size());
    auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = model.forward(std::span(ids).subspan(common));
    cached.insert(cached.end(), ids.begin() + static_cast<ptrdiff_t>(common), ids.end());
    result.stats.prefill_seconds = seconds_since(t0);
    result.first_logits.assign(logits.begin(), logits.end());

    StreamingDecoder decoder(tokenizer);
    std::vector<TokenId> history = ids;
    t0 = std::chrono::steady_clock::now();
    while (static_cast<int>(result.ids.size()) < options.max_tokens) {
      const TokenId next = sampler.sample(logits, history);
      if (options.stop_at_end_of_generation && tokenizer.is_end_of_generation(next)) break;
      result.ids.push_back(next);
      history.push_back(next);
      const std::string piece = decoder.push(next);
      result.text += piece;
      if (on_text && !piece.empty()) on_text(piece);
      if (static_cast<int>(result.ids.size()) == options.max_tokens) break;
      if (model.position() >= model.context_length()) break;  // the context is full
      logits = model.forward(std::span(&next, 1));
      cached.push_back(next);
    }
    result.stats.decode_seconds = seconds_since(t0);
    const std::string tail = decoder.flush();
    result.text += tail;
    if (on_text && !tail.empty()) on_text(tail);
    result.stats.generated_tokens = static_cast<int>(result.ids.size());
    stats = result.stats;
    return result;
  }

  std::shared_ptr<backend::Backend> backend;  // outlives the model, whose modules it runs
  std::string path;
  ModelSource source;
  LlamaModel model;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::vector<TokenId> cached;  // the tokens whose keys and values the model's cache holds
  GenerateStats stats;
};

Llm::Llm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Llm::Llm(Llm&&) noexcept = default;
Llm& Llm::operator=(Llm&&) noexcept = default;
Llm::~Llm() = default;

Llm Llm::open(const std::string& path, const LlmOptions& options) {
  return Llm(std::make_unique<Impl>(path, options));
}

GenerateResult Llm::generate_detailed(const std::string& prompt, const GenerateOptions& options,
                                      const std::function<void(std::string_view)>& on_text) {
  std::string text = prompt;
  if (options.chat) {
    const ChatMessage message{"user", prompt};
    text = impl_->require_template().apply({&message, 1}, true);
  }
  // Control-token text in the prompt ("<|im_start|>") becomes the token, as in llama.cpp.
  std::vector<TokenId> ids =
      impl_->tokenizer.encode(text, EncodeOptions{.add_special = true, .parse_special = true});
  // Each call starts afresh, so that a call's result never depends on the one before.
  impl_->cached.clear();
  return impl_->run(std::move(ids), options, on_text);
}

std::string Llm::generate(const std::string& prompt, const GenerateOptions& options,
                          const std::function<void(std::string_view)>& on_text) {
  return generate_detailed(prompt, options, on_text).text;
}

std::string Llm::chat(std::span<const ChatMessage> messages, const GenerateOptions& options,
                      const std::function<void(std::string_view)>& on_text) {
  const std::string text = impl_->require_template().apply(messages, true);
  std::vector<TokenId> ids =
      impl_->tokenizer.encode(text, EncodeOptions{.add_special = true, .parse_special = true});
  return impl_->run(std::move(ids), options, on_text).text;
}

const ChatTemplate& Llm::chat_template() const {
  return impl_->require_template();
}
const GenerateStats& Llm::last_stats() const {
  return impl_->stats;
}
const Tokenizer& Llm::tokenizer() const {
  return impl_->tokenizer;
}
LlamaModel& Llm::model() {
  return impl_->model;
}

}  // namespace yirage::llm
