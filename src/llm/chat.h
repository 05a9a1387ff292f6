// Chat templates: turn a conversation into the prompt text a chat model was trained on. GGUF files
// carry the template as Jinja source (tokenizer.chat_template); rather than embedding a Jinja
// engine, we recognise the template family from its text and render it natively.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "llm/gguf.h"

namespace yirage::llm {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  enum class Family { ChatML };

  // Recognises `source`; fails on a template family we cannot render.
  static ChatTemplate detect(std::string_view source);
  // From tokenizer.chat_template; fails when the file has none.
  static ChatTemplate from_gguf(const GgufFile& file);

  Family family() const { return family_; }
  // The system message the template inserts when a conversation does not start with one
  // (SmolLM2's does), if any.
  const std::optional<std::string>& default_system_prompt() const { return default_system_; }

  // The prompt for `messages`; with `add_generation_prompt` it ends by opening the assistant's
  // turn.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  Family family_ = Family::ChatML;
  std::optional<std::string> default_system_;
};

}  // namespace yirage::llm
