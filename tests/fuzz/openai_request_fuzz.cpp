// libFuzzer target: arbitrary bytes as the body of /v1/completions and /v1/chat/completions.
// parse_request must return either a request whose fields are in the ranges the scheduler relies
// on, or a 400 naming a one-line reason; an exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "serve/openai_api.h"

namespace {

void check(const std::string& body, yirage::serve::Endpoint endpoint) {
  yirage::serve::ApiRequest r;
  if (const auto e = yirage::serve::parse_request(body, endpoint, r)) {
    if (e->status != 400 || e->message.empty() || e->message.find('\n') != std::string::npos)
      __builtin_trap();
    return;
  }
  const bool has_input = endpoint == yirage::serve::Endpoint::chat
                             ? !r.messages.empty()
                             : !r.prompt.empty() || !r.prompt_ids.empty();
  const auto& s = r.sampling;
  if (!has_input || !(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p > 0 && s.top_p <= 1) ||
      s.top_k < 0 || !(s.repeat_penalty > 0) || (r.max_tokens && *r.max_tokens < 1) ||
      r.stop.size() > 4 || r.logprobs < -1 || r.logprobs > 20)
    __builtin_trap();
  for (const std::string& stop : r.stop)
    if (stop.empty()) __builtin_trap();
  for (int id : r.prompt_ids)
    if (id < 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  check(body, yirage::serve::Endpoint::completions);
  check(body, yirage::serve::Endpoint::chat);
  return 0;
}
