// The OpenAI request parser (serve/openai_api.h): what it accepts, the field each refusal names,
// and the shapes of the responses and stream chunks the openai client reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "serve/openai_api.h"

namespace yirage::serve {
namespace {

using nlohmann::json;

// The refused field, or "accepted".
std::string refusal(const std::string& body, Endpoint endpoint = Endpoint::completions) {
  ApiRequest request;
  const std::optional<ApiError> e = parse_request(body, endpoint, request);
  if (!e) return "accepted";
  EXPECT_EQ(e->status, 400);
  EXPECT_FALSE(e->message.empty());
  EXPECT_EQ(e->message.find('\n'), std::string::npos);
  return e->param.empty() ? "(body)" : e->param;
}

TEST(OpenAiRequest, ACompletionTakesItsFieldsAndOpenAiDefaults) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"model": "m", "prompt": "hi", "max_tokens": 5, "seed": -3,
                                 "stop": "x", "stream": true,
                                 "stream_options": {"include_usage": true}})",
                             Endpoint::completions, r));
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's defaults, not the CLI's greedy
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  ApiRequest ids;
  ASSERT_FALSE(parse_request(R"({"prompt": [1, 2, 3]})", Endpoint::completions, ids));
  EXPECT_EQ(ids.prompt_ids, (std::vector<int>{1, 2, 3}));
}

TEST(OpenAiRequest, ChatMessagesTakeStringsOrTextParts) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]}],
                                 "max_completion_tokens": 7})",
                             Endpoint::chat, r));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 7);
}

TEST(OpenAiRequest, EachRefusalNamesTheField) {
  EXPECT_EQ(refusal("{"), "(body)");
  EXPECT_EQ(refusal("[1]"), "(body)");
  EXPECT_EQ(refusal(R"({})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt": ""})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, "a"]})"), "prompt");
  EXPECT_EQ(refusal(R"({"prompt": "x", "model": 3})"), "model");
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})"), "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": 2.5})"), "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_p": 0})"), "top_p");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_k": -1})"), "top_k");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_k": 1.5})"), "top_k");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 18446744073709551615})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "seed": "s"})"), "seed");
  EXPECT_EQ(refusal(R"({"prompt": "x", "seed": 18446744073709551615})"), "seed");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})"), "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": [""]})"), "stop");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream": 1})"), "stream");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": "y"}})"),
            "stream_options.include_usage");
  EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2})"), "n");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 6})"), "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": true})"), "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "top_logprobs": 2})"), "top_logprobs");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                    Endpoint::chat),
            "top_logprobs");
  EXPECT_EQ(
      refusal(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", Endpoint::chat),
      "logprobs");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                        "top_logprobs": 21})",
                    Endpoint::chat),
            "top_logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x", "response_format": {"type": "json_object"}})"),
            "response_format");
  EXPECT_EQ(refusal(R"({"prompt": "x", "presence_penalty": 0.5})"), "presence_penalty");
  EXPECT_EQ(refusal(R"({"prompt": "x", "n": 1, "logprobs": null, "presence_penalty": 0})"),
            "accepted");
  EXPECT_EQ(refusal(R"({"messages": []})", Endpoint::chat), "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "robot", "content": "x"}]})", Endpoint::chat),
            "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": 5}]})", Endpoint::chat),
            "messages");
}

TEST(OpenAiRequest, LogprobsAreCountsOfAlternatives) {
  ApiRequest completion, chat, chat_plain, none;
  ASSERT_FALSE(
      parse_request(R"({"prompt": "x", "logprobs": 2})", Endpoint::completions, completion));
  EXPECT_EQ(completion.logprobs, 2);
  ASSERT_FALSE(parse_request(R"({"messages": [{"role": "user", "content": "x"}],
                                 "logprobs": true, "top_logprobs": 3})",
                             Endpoint::chat, chat));
  EXPECT_EQ(chat.logprobs, 3);
  ASSERT_FALSE(parse_request(R"({"messages": [{"role": "user", "content": "x"}],
                                 "logprobs": true})",
                             Endpoint::chat, chat_plain));
  EXPECT_EQ(chat_plain.logprobs, 0);
  ASSERT_FALSE(parse_request(R"({"prompt": "x"})", Endpoint::completions, none));
  EXPECT_EQ(none.logprobs, -1);
}

TEST(OpenAiResponse, LogprobsInBothFormats) {
  const std::vector<TokenLogprob> tokens = {{"He", -0.5f, {{"He", -0.5f}, {"I", -1.5f}}},
                                            {"llo", -0.25f, {{"llo", -0.25f}}}};
  const json chat = logprobs_json(Endpoint::chat, tokens);
  EXPECT_EQ(chat["content"][1]["token"], "llo");
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "I");
  EXPECT_EQ(chat["content"][0]["bytes"], json({72, 101}));
  const json completion = logprobs_json(Endpoint::completions, tokens);
  EXPECT_EQ(completion["tokens"], json({"He", "llo"}));
  EXPECT_EQ(completion["token_logprobs"][1], -0.25);
  EXPECT_EQ(completion["top_logprobs"][0]["I"], -1.5);
  EXPECT_EQ(completion["text_offset"], json({0, 2}));
}

TEST(OpenAiResponse, ObjectsHaveTheShapesTheClientReads) {
  const ResponseHead chat{Endpoint::chat, "chatcmpl-1", "m", 7};
  const json full = full_response(chat, "hi", "stop", 3, 2);
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(full["usage"]["total_tokens"], 5);
  const json first = stream_chunk(chat, "", "", true);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const ResponseHead completion{Endpoint::completions, "cmpl-1", "m", 7};
  EXPECT_EQ(stream_chunk(completion, "a", "length", false)["choices"][0]["text"], "a");
  const json usage = usage_chunk(completion, 3, 2);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  const json error = ApiError{400, "bad", "top_p"}.body();
  EXPECT_EQ(error["error"]["param"], "top_p");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_TRUE((ApiError{429, "busy", ""}.body()["error"]["param"].is_null()));
}

}  // namespace
}  // namespace yirage::serve
