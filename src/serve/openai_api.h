// The OpenAI wire format: request bodies of /v1/completions and /v1/chat/completions checked and
// turned into what the scheduler runs, and the response and stream-chunk objects built back. Pure
// functions of JSON text, so that the parser can be tested (and fuzzed) without a socket.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/chat.h"
#include "llm/sampler.h"

namespace yirage::serve {

// A request the API refuses: HTTP 400 with an OpenAI-shaped error naming `param`.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, or empty
  std::string type = "invalid_request_error";
  nlohmann::json body() const;
};

enum class Endpoint { completions, chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  std::string prompt;                      // completions: the text to continue
  std::vector<int> prompt_ids;             // completions: a prompt given as token ids
  std::vector<llm::ChatMessage> messages;  // chat
  std::optional<int> max_tokens;           // absent: 16 for completions, the context for chat
  llm::SamplerOptions sampling;
  bool seeded = false;  // seed given; else the server draws one
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions' `logprobs` (0 to 5), or chat's `top_logprobs` (0 to 20) under `logprobs: true`:
  // how many alternatives to report beside each token's log-probability; -1: none.
  int logprobs = -1;
};

// One generated token's log-probability and its most likely alternatives', as text.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Parses and checks a request body; the error names the first field that is wrong.
std::optional<ApiError> parse_request(const std::string& body, Endpoint endpoint, ApiRequest& out);

// The response objects. `id` is "cmpl-..." or "chatcmpl-...".
struct ResponseHead {
  Endpoint endpoint;
  std::string id;
  std::string model;
  long long created = 0;
};
nlohmann::json usage_json(int prompt_tokens, int completion_tokens);
// The choice's "logprobs" object for `tokens` in the endpoint's format (null when not asked for).
nlohmann::json logprobs_json(Endpoint endpoint, std::span<const TokenLogprob> tokens);
nlohmann::json full_response(const ResponseHead& head, const std::string& text,
                             const std::string& finish_reason, int prompt_tokens,
                             int completion_tokens, const nlohmann::json& logprobs = nullptr);
// One stream chunk: `text` as the delta (the chat's first chunk also carries the role), and the
// finish reason once known (null before).
nlohmann::json stream_chunk(const ResponseHead& head, const std::string& text,
                            const std::string& finish_reason, bool first,
                            const nlohmann::json& logprobs = nullptr);
nlohmann::json usage_chunk(const ResponseHead& head, int prompt_tokens, int completion_tokens);

}  // namespace yirage::serve
