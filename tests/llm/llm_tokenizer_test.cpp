#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "llm/llm.h"
#include "llm/unicode.h"
#include "llm_gguf_writer.h"
#include "llm_model_path.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

using ::testing::ElementsAre;
using testing::GgufWriter;
using ::testing::HasSubstr;

// Parsed file and tokenizer built from writer output that the test keeps alive.
struct Loaded {
  explicit Loaded(const GgufWriter& w)
      : bytes(w.finish()),
        file(GgufFile::from_memory(bytes)),
        tokenizer(Tokenizer::from_gguf(file)) {}
  std::vector<std::byte> bytes;
  GgufFile file;
  Tokenizer tokenizer;
};

std::string tokenizer_error(const GgufWriter& w) {
  const std::vector<std::byte> bytes = w.finish();
  try {
    Tokenizer::from_gguf(GgufFile::from_memory(bytes));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

GgufWriter tiny_gpt2() {
  GgufWriter w;
  testing::add_tiny_gpt2_tokenizer(w);
  return w;
}

// Ids in the tiny vocabulary: 3 specials, then the 256 byte characters, then the merges.
constexpr TokenId kByte0 = 3;
constexpr TokenId kHello = 262;
constexpr TokenId kSpaceHello = 263;
constexpr TokenId kTwoSpaces = 264;
TokenId byte_id(char c) {
  return kByte0 + static_cast<uint8_t>(c);
}

TEST(BpeTokenizer, MergesByRank) {
  const Loaded t(tiny_gpt2());
  EXPECT_EQ(t.tokenizer.model(), TokenizerModel::BytePairGpt2);
  EXPECT_EQ(t.tokenizer.vocab_size(), 265u);
  EXPECT_THAT(t.tokenizer.encode("hello hello"), ElementsAre(kHello, kSpaceHello));
  EXPECT_THAT(t.tokenizer.encode("helo"), ElementsAre(259, byte_id('l'), byte_id('o')));
  EXPECT_TRUE(t.tokenizer.encode("").empty());
}

TEST(BpeTokenizer, PreTokenizesLikeGpt2WithSingleDigits) {
  const Loaded t(tiny_gpt2());
  // "   hello": \s+(?!\S) leaves the last space to " hello"; "ĠĠ" merges the first two.
  EXPECT_THAT(t.tokenizer.encode("   hello"), ElementsAre(kTwoSpaces, kSpaceHello));
  // smollm splits numbers into digits, so " 12" is " ", "1", "2".
  EXPECT_THAT(t.tokenizer.encode("a 12"),
              ElementsAre(byte_id('a'), byte_id(' '), byte_id('1'), byte_id('2')));
  // Contractions are their own words: "'s" never merges with what precedes it.
  EXPECT_THAT(t.tokenizer.encode("hello's"), ElementsAre(kHello, byte_id('\''), byte_id('s')));
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAsked) {
  const Loaded t(tiny_gpt2());
  const std::string text = "<|im_start|>hello<|im_end|>";
  EXPECT_THAT(t.tokenizer.encode(text, {.add_special = true, .parse_special = true}),
              ElementsAre(1, kHello, 2));
  const std::vector<TokenId> plain = t.tokenizer.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(t.tokenizer.decode(plain), text);
  EXPECT_FALSE(t.tokenizer.adds_bos());
  EXPECT_EQ(t.tokenizer.bos_id(), 1);
  EXPECT_TRUE(t.tokenizer.is_end_of_generation(2));
  EXPECT_TRUE(t.tokenizer.is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(t.tokenizer.is_end_of_generation(1));
}

TEST(BpeTokenizer, DecodesBytesBackAndHidesControlTokens) {
  const Loaded t(tiny_gpt2());
  for (const std::string text :
       {"hello, world", "  tabs\tand\nnewlines  ", "é ü 中文 😀", "don't 12345", "\x01\x7f"}) {
    EXPECT_EQ(t.tokenizer.decode(t.tokenizer.encode(text)), text) << text;
  }
  EXPECT_EQ(t.tokenizer.token_to_piece(1), "");
  EXPECT_EQ(t.tokenizer.token_to_piece(1, /*render_special=*/true), "<|im_start|>");
  EXPECT_EQ(t.tokenizer.token_to_piece(kSpaceHello), " hello");
  // Invalid UTF-8 becomes U+FFFD before tokenization, as in llama.cpp.
  EXPECT_EQ(t.tokenizer.decode(t.tokenizer.encode("a\xff")), "a\xEF\xBF\xBD");
}

TEST(StreamingDecoder, HoldsBackSplitCharacters) {
  const Loaded t(tiny_gpt2());
  const std::vector<TokenId> ids = t.tokenizer.encode("é😀!");
  ASSERT_EQ(ids.size(), 7u);  // one token per byte: 2 + 4 + 1
  StreamingDecoder stream(t.tokenizer);
  std::vector<std::string> outputs;
  for (TokenId id : ids) outputs.push_back(stream.push(id));
  EXPECT_THAT(outputs, ElementsAre("", "é", "", "", "", "😀", "!"));
  EXPECT_EQ(stream.flush(), "");

  StreamingDecoder broken(t.tokenizer);
  EXPECT_EQ(broken.push(byte_id('\xff')), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(broken.push(byte_id('\xe4')), "");
  EXPECT_EQ(broken.push(byte_id('a')),
            "\xEF\xBF\xBD"
            "a");  // the sequence was cut short
  EXPECT_EQ(broken.push(byte_id('\xf0')), "");
  EXPECT_EQ(broken.flush(), "\xEF\xBF\xBD");
}

TEST(BpeTokenizer, RejectsBadMetadata) {
  GgufWriter model;
  model.string("tokenizer.ggml.model", "bert");
  EXPECT_EQ(tokenizer_error(model),
            "<memory>: tokenizer.ggml.model 'bert' is not supported (gpt2 and llama are)");

  GgufWriter pre = tiny_gpt2();
  pre.string("tokenizer.ggml.pre", "qwen2");  // a second key: rejected as a duplicate
  EXPECT_THAT(tokenizer_error(pre), HasSubstr("duplicate metadata key 'tokenizer.ggml.pre'"));

  GgufWriter missing;
  missing.string("tokenizer.ggml.model", "gpt2");
  EXPECT_EQ(tokenizer_error(missing), "<memory>: missing GGUF metadata 'tokenizer.ggml.tokens'");

  GgufWriter unknown_pre;
  unknown_pre.string("tokenizer.ggml.model", "gpt2").string("tokenizer.ggml.pre", "qwen2");
  unknown_pre.string_array("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT(tokenizer_error(unknown_pre),
              HasSubstr("tokenizer.ggml.pre 'qwen2' is not supported"));

  GgufWriter types;
  types.string("tokenizer.ggml.model", "llama").string_array("tokenizer.ggml.tokens", {"a", "b"});
  types.array<int32_t>("tokenizer.ggml.token_type", GgufWriter::I32, {1, 9});
  EXPECT_EQ(tokenizer_error(types), "<memory>: tokenizer.ggml.token_type[1] is 9 (1 to 6 allowed)");

  GgufWriter scores;
  scores.string("tokenizer.ggml.model", "llama").string_array("tokenizer.ggml.tokens", {"a", "b"});
  scores.array<float>("tokenizer.ggml.scores", GgufWriter::F32, {0.0f});
  EXPECT_EQ(tokenizer_error(scores), "<memory>: tokenizer.ggml.scores has 1 entries for 2 tokens");

  GgufWriter bos;
  bos.string("tokenizer.ggml.model", "llama").string_array("tokenizer.ggml.tokens", {"a"});
  bos.scalar<uint32_t>("tokenizer.ggml.bos_token_id", GgufWriter::U32, 5);
  EXPECT_EQ(tokenizer_error(bos),
            "<memory>: tokenizer.ggml.bos_token_id is 5 but the vocabulary has 1 tokens");

  GgufWriter merges;
  merges.string("tokenizer.ggml.model", "gpt2").string("tokenizer.ggml.pre", "gpt2");
  merges.string_array("tokenizer.ggml.tokens", {"a"}).string_array("tokenizer.ggml.merges", {"ab"});
  EXPECT_EQ(tokenizer_error(merges),
            "<memory>: tokenizer.ggml.merges[0] 'ab' is not two parts separated by a space");
}

// ------------------------------------------------------------------------------------------------
// SentencePiece.

GgufWriter tiny_spm() {
  GgufWriter w;
  testing::add_tiny_spm_tokenizer(w);
  return w;
}

constexpr TokenId kSpmSpace = 259;
constexpr TokenId kSpmH = 260;
constexpr TokenId kSpmSpaceHello = 268;
TokenId spm_byte(uint8_t b) {
  return 3 + b;
}

TEST(SpmTokenizer, MergesByScoreWithSpacePrefixAndBos) {
  const Loaded t(tiny_spm());
  EXPECT_EQ(t.tokenizer.model(), TokenizerModel::SentencePiece);
  EXPECT_TRUE(t.tokenizer.adds_bos());
  EXPECT_THAT(t.tokenizer.encode("hello"), ElementsAre(1, kSpmSpaceHello));
  EXPECT_THAT(t.tokenizer.encode("hello hello", {.add_special = false}),
              ElementsAre(kSpmSpaceHello, kSpmSpaceHello));
  // "i" has no piece: byte fallback.
  EXPECT_THAT(t.tokenizer.encode("hi", {.add_special = false}),
              ElementsAre(kSpmSpace, kSpmH, spm_byte('i')));
  EXPECT_THAT(t.tokenizer.encode("é", {.add_special = false}),
              ElementsAre(kSpmSpace, spm_byte(0xC3), spm_byte(0xA9)));
}

TEST(SpmTokenizer, SpecialTokensAndDecoding) {
  const Loaded t(tiny_spm());
  EXPECT_THAT(t.tokenizer.encode("<s>hello", {.add_special = false, .parse_special = true}),
              ElementsAre(1, kSpmSpaceHello));
  const std::vector<TokenId> ids = t.tokenizer.encode("hello hi é", {.add_special = false});
  EXPECT_EQ(t.tokenizer.decode(ids), " hello hi é");
  EXPECT_EQ(t.tokenizer.token_to_piece(0), "");
  EXPECT_EQ(t.tokenizer.token_to_piece(0, true), "<unk>");
}

// ------------------------------------------------------------------------------------------------
// Chat templates.

constexpr std::string_view kSmolLM2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplate, RendersChatMLWithTheTemplatesDefaultSystemPrompt) {
  const ChatTemplate t = ChatTemplate::detect(kSmolLM2Template);
  EXPECT_EQ(t.family(), ChatTemplate::Family::ChatML);
  ASSERT_TRUE(t.default_system_prompt().has_value());
  const std::vector<ChatMessage> user_only = {{"user", "Hi"}};
  EXPECT_EQ(t.apply(user_only, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}};
  EXPECT_EQ(t.apply(with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n");
  EXPECT_EQ(t.apply({}, false), "");
}

TEST(ChatTemplate, RejectsUnknownTemplates) {
  const Loaded tiny(tiny_gpt2());
  EXPECT_FALSE(ChatTemplate::from_gguf(tiny.file).default_system_prompt().has_value());
  try {
    ChatTemplate::detect("{{ bos_token }}[INST] {{ message['content'] }} [/INST]");
    ADD_FAILURE() << "Llama-2 template accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unsupported chat template (only ChatML is recognised)"));
  }
}

// ------------------------------------------------------------------------------------------------
// The real SmolLM2 vocabulary; expected ids come from llama.cpp (llama-cpp-python 0.3.x).

TEST(SmolLM2Tokenizer, MatchesLlamaCpp) {
  const std::optional<std::string> path = testing::smollm2_path();
  if (!path) GTEST_SKIP() << testing::kModelSkipReason;
  const GgufFile file = GgufFile::open(*path);
  const Tokenizer t = Tokenizer::from_gguf(file);
  EXPECT_EQ(t.vocab_size(), 49152u);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_THAT(t.encode("Hello world! 123"), ElementsAre(19556, 905, 17, 216, 33, 34, 35));
  EXPECT_THAT(t.encode("Hello, we can use"), ElementsAre(19556, 28, 392, 416, 722));
  EXPECT_THAT(t.encode("  multiple   spaces"), ElementsAre(216, 2701, 256, 5600));
  EXPECT_THAT(t.encode("Café déjà vu."),
              ElementsAre(51, 1939, 2756, 32564, 90, 16739, 386, 101, 30));
  EXPECT_THAT(t.encode("<|im_start|>user\nHi<|im_end|>", {.parse_special = true}),
              ElementsAre(1, 4093, 198, 26843, 2));
  const std::vector<TokenId> ids = t.encode("Streaming: é, 中文, 😀.");
  StreamingDecoder stream(t);
  std::string streamed;
  for (TokenId id : ids) streamed += stream.push(id);
  EXPECT_EQ(streamed + stream.flush(), "Streaming: é, 中文, 😀.");
}

}  // namespace
}  // namespace yirage::llm
