#include "llm/chat.h"

#include "support/error.h"

namespace yirage::llm {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

std::string excerpt(std::string_view source) {
  constexpr size_t kMax = 60;
  std::string s(source.substr(0, kMax));
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return source.size() > kMax ? s + "..." : s;
}

// ChatML templates such as SmolLM2's open with
//   {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n...<|im_end|>\n'
//   }}
// The literal between "system\n" and <|im_end|> is the default system prompt.
std::optional<std::string> chatml_default_system(std::string_view source) {
  const size_t condition = source.find("!= 'system'");
  if (condition == std::string_view::npos) return std::nullopt;
  const std::string opening = fmt::format("{}system\n", kImStart);
  const size_t start = source.find(opening, condition);
  if (start == std::string_view::npos) return std::nullopt;
  const size_t text_start = start + opening.size();
  const size_t end = source.find(kImEnd, text_start);
  if (end == std::string_view::npos) return std::nullopt;
  const std::string_view text = source.substr(text_start, end - text_start);
  if (text.find_first_of("'\"\\{}") != std::string_view::npos) {
    // Escapes or expressions would need a Jinja evaluator; refuse rather than misrender.
    fail("chat template: cannot read the default system prompt '{}'", excerpt(text));
  }
  return std::string(text);
}

}  // namespace

ChatTemplate ChatTemplate::detect(std::string_view source) {
  if (source.find(kImStart) != std::string_view::npos &&
      source.find(kImEnd) != std::string_view::npos) {
    ChatTemplate t;
    t.family_ = Family::ChatML;
    t.default_system_ = chatml_default_system(source);
    return t;
  }
  fail("unsupported chat template (only ChatML is recognised): '{}'", excerpt(source));
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  const GgufValue* value = file.find("tokenizer.chat_template");
  if (value == nullptr) fail("{}: no tokenizer.chat_template", file.source());
  return detect(value->as_string());
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
  std::string out;
  const auto turn = [&](std::string_view role, std::string_view content) {
    out += fmt::format("{}{}\n{}{}\n", kImStart, role, content, kImEnd);
  };
  if (default_system_ && !messages.empty() && messages.front().role != "system") {
    turn("system", *default_system_);
  }
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += fmt::format("{}assistant\n", kImStart);
  return out;
}

}  // namespace yirage::llm
