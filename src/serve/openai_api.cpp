#include "serve/openai_api.h"

#include <cmath>
#include <limits>
#include <string_view>

#include <fmt/format.h>

namespace yirage::serve {
namespace {

using nlohmann::json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError{400, message, param};
}

std::string type_name(const json& v) {
  return v.type_name();
}

// Whether object[key] is the string `value` (json::value() would throw for another type).
bool is_string_equal(const json& object, const char* key, std::string_view value) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == value;
}

// Each reader leaves `out` alone when the field is absent or null, and returns the error when the
// field has the wrong type or range.
std::optional<ApiError> read_number(const json& body, const char* key, double low, double high,
                                    float& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    return bad(key, fmt::format("'{}' must be a number, not {}", key, type_name(*it)));
  const double v = it->get<double>();
  if (!(v >= low && v <= high))
    return bad(key, fmt::format("'{}' is {}; it must be between {} and {}", key, v, low, high));
  out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& body, const char* key, long long low, long long high,
                                 std::optional<long long>& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer())
    return bad(key, fmt::format("'{}' must be an integer, not {}", key, type_name(*it)));
  const auto range_error = [&](const std::string& value) {
    return bad(key, fmt::format("'{}' is {}; it must be between {} and {}", key, value, low, high));
  };
  if (it->is_number_unsigned() &&
      it->get<unsigned long long>() > static_cast<unsigned long long>(high))
    return range_error(std::to_string(it->get<unsigned long long>()));
  const long long v = it->get<long long>();
  if (v < low || v > high) return range_error(std::to_string(v));
  out = v;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& body, const char* key, bool& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return bad(key, fmt::format("'{}' must be a boolean, not {}", key, type_name(*it)));
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_stop(const json& body, std::vector<std::string>& out) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    out = {it->get<std::string>()};
  } else if (it->is_array() && it->size() <= 4) {
    for (const json& s : *it) {
      if (!s.is_string()) return bad("stop", "'stop' must be a string or up to 4 strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    return bad("stop", "'stop' must be a string or up to 4 strings");
  }
  for (const std::string& s : out)
    if (s.empty()) return bad("stop", "'stop' strings must not be empty");
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const json& body, ApiRequest& out) {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad("prompt", "'prompt' is required");
  if (it->is_string()) {
    out.prompt = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    out.prompt = (*it)[0].get<std::string>();
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<long long>() < 0 ||
          t.get<long long>() > std::numeric_limits<int>::max())
        return bad("prompt", "'prompt' token ids must be non-negative integers");
      out.prompt_ids.push_back(t.get<int>());
    }
  } else {
    return bad("prompt", "'prompt' must be a string, one string in a list, or a list of token ids");
  }
  if (out.prompt.empty() && out.prompt_ids.empty()) return bad("prompt", "'prompt' is empty");
  return std::nullopt;
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
std::optional<ApiError> read_content(const json& content, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return bad("messages", "a message's 'content' must be a string");
  for (const json& part : content) {
    if (!part.is_object() || !is_string_equal(part, "type", "text") || !part.contains("text") ||
        !part["text"].is_string())
      return bad("messages", "a message's content parts must be {\"type\": \"text\", \"text\"}");
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& body, ApiRequest& out) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    return bad("messages", "'messages' must be a non-empty list of messages");
  for (const json& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad("messages", "each message must be an object with a string 'role'");
    llm::ChatMessage message{m["role"].get<std::string>(), {}};
    // The role is not echoed: an error message stays one line whatever the client sent.
    if (message.role != "system" && message.role != "user" && message.role != "assistant")
      return bad("messages", "a message's 'role' must be system, user or assistant");
    if (!m.contains("content")) return bad("messages", "each message needs a 'content'");
    if (auto e = read_content(m["content"], message.content)) return e;
    out.messages.push_back(std::move(message));
  }
  return std::nullopt;
}

// Fields this server does not implement are refused rather than ignored, so that a client never
// takes a response for what it did not ask.
std::optional<ApiError> refuse_unsupported(const json& body) {
  if (const auto n = body.find("n"); n != body.end() && !n->is_null() && *n != 1)
    return bad("n", "'n' other than 1 is not supported");
  for (const char* key : {"echo", "best_of", "suffix", "tools", "functions", "logit_bias"}) {
    const auto it = body.find(key);
    if (it != body.end() && !it->is_null() && *it != false && *it != 0)
      return bad(key, fmt::format("'{}' is not supported", key));
  }
  if (const auto f = body.find("response_format"); f != body.end() && !f->is_null()) {
    if (!f->is_object() || !is_string_equal(*f, "type", "text"))
      return bad("response_format", "only 'response_format' {\"type\": \"text\"} is supported");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    const auto it = body.find(key);
    if (it != body.end() && !it->is_null() && (!it->is_number() || it->get<double>() != 0))
      return bad(key, fmt::format("'{}' is not supported (use repeat_penalty)", key));
  }
  return std::nullopt;
}

// Completions: "logprobs": 0 to 5 alternatives. Chat: "logprobs": true, with "top_logprobs": 0 to
// 20 alternatives.
std::optional<ApiError> read_logprobs(const json& body, ApiRequest& out) {
  std::optional<long long> top;
  if (out.endpoint == Endpoint::completions) {
    if (const auto t = body.find("top_logprobs"); t != body.end() && !t->is_null())
      return bad("top_logprobs", "'top_logprobs' is for chat; completions take 'logprobs': 0 to 5");
    if (auto e = read_int(body, "logprobs", 0, 5, top)) return e;
    if (top) out.logprobs = static_cast<int>(*top);
    return std::nullopt;
  }
  bool wanted = false;
  if (auto e = read_bool(body, "logprobs", wanted)) return e;
  if (auto e = read_int(body, "top_logprobs", 0, 20, top)) return e;
  if (top && !wanted) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (wanted) out.logprobs = static_cast<int>(top.value_or(0));
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const json& body, ApiRequest& out) {
  llm::SamplerOptions& s = out.sampling;
  // OpenAI's defaults: temperature 1, top-p 1, no top-k.
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  if (auto e = read_number(body, "temperature", 0, 2, s.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0, 1, s.top_p)) return e;
  if (s.top_p <= 0) return bad("top_p", "'top_p' must be greater than 0");
  if (auto e = read_number(body, "repeat_penalty", 0, 10, s.repeat_penalty)) return e;
  if (s.repeat_penalty <= 0) return bad("repeat_penalty", "'repeat_penalty' must be positive");
  std::optional<long long> top_k, seed;
  if (auto e = read_int(body, "top_k", 0, 1 << 30, top_k)) return e;
  if (top_k) s.top_k = static_cast<int>(*top_k);
  if (auto e = read_int(body, "seed", std::numeric_limits<long long>::min(),
                        std::numeric_limits<long long>::max(), seed))
    return e;
  if (seed) {
    s.seed = static_cast<uint64_t>(*seed);
    out.seeded = true;
  }
  return std::nullopt;
}

}  // namespace

nlohmann::json ApiError::body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", nullptr}}}};
}

std::optional<ApiError> parse_request(const std::string& text, Endpoint endpoint, ApiRequest& out) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return bad("", "the request body is not valid JSON");
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  out.endpoint = endpoint;
  if (const auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return bad("model", "'model' must be a string");
    out.model = m->get<std::string>();
  }
  if (auto e = endpoint == Endpoint::chat ? read_messages(body, out) : read_prompt(body, out))
    return e;
  if (auto e = refuse_unsupported(body)) return e;
  std::optional<long long> max_tokens;
  const char* max_key = endpoint == Endpoint::chat && body.contains("max_completion_tokens")
                            ? "max_completion_tokens"
                            : "max_tokens";
  if (auto e = read_int(body, max_key, 1, 1 << 24, max_tokens)) return e;
  if (max_tokens) out.max_tokens = static_cast<int>(*max_tokens);
  if (auto e = read_sampling(body, out)) return e;
  if (auto e = read_logprobs(body, out)) return e;
  if (auto e = read_stop(body, out.stop)) return e;
  if (auto e = read_bool(body, "stream", out.stream)) return e;
  if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (auto e = read_bool(*so, "include_usage", out.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  return std::nullopt;
}

nlohmann::json usage_json(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

json head_json(const ResponseHead& head, const char* object) {
  return {{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model}};
}

json finish_json(const std::string& reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

}  // namespace

nlohmann::json logprobs_json(Endpoint endpoint, std::span<const TokenLogprob> tokens) {
  const auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (endpoint == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      json top = json::array();
      for (const auto& [token, logprob] : t.top)
        top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", bytes(token)}});
      content.push_back({{"token", t.token},
                         {"logprob", t.logprob},
                         {"bytes", bytes(t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json r = {{"tokens", json::array()},
            {"token_logprobs", json::array()},
            {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  size_t offset = 0;
  for (const TokenLogprob& t : tokens) {
    r["tokens"].push_back(t.token);
    r["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& [token, logprob] : t.top) top[token] = logprob;
    r["top_logprobs"].push_back(top);
    r["text_offset"].push_back(offset);
    offset += t.token.size();
  }
  return r;
}

nlohmann::json full_response(const ResponseHead& head, const std::string& text,
                             const std::string& finish_reason, int prompt_tokens,
                             int completion_tokens, const nlohmann::json& logprobs) {
  const bool chat = head.endpoint == Endpoint::chat;
  json r = head_json(head, chat ? "chat.completion" : "text_completion");
  json choice = {
      {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish_reason)}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  r["choices"] = json::array({choice});
  r["usage"] = usage_json(prompt_tokens, completion_tokens);
  return r;
}

nlohmann::json stream_chunk(const ResponseHead& head, const std::string& text,
                            const std::string& finish_reason, bool first,
                            const nlohmann::json& logprobs) {
  const bool chat = head.endpoint == Endpoint::chat;
  json r = head_json(head, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {
      {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish_reason)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  r["choices"] = json::array({choice});
  return r;
}

nlohmann::json usage_chunk(const ResponseHead& head, int prompt_tokens, int completion_tokens) {
  const bool chat = head.endpoint == Endpoint::chat;
  json r = head_json(head, chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = usage_json(prompt_tokens, completion_tokens);
  return r;
}

}  // namespace yirage::serve
