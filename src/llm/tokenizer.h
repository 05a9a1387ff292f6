// Tokenizers built from GGUF metadata (or a Hugging Face tokenizer.json), matching llama.cpp token
// for token:
//  - byte-level BPE (tokenizer.ggml.model "gpt2"): GPT-2 byte-to-unicode mapping, the
//    pre-tokenizer named by tokenizer.ggml.pre, merges applied by rank;
//  - SentencePiece (tokenizer.ggml.model "llama"): "▁" for spaces, score-driven merges and
//    <0xXX> byte fallback.
// Special tokens (control and user-defined) are recognised in text on request, decoding
// reassembles bytes, and StreamingDecoder hands out only complete UTF-8 while generating.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llm/gguf.h"

namespace yirage::llm {

using TokenId = int32_t;

// tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

enum class TokenizerModel { BytePairGpt2, SentencePiece };

// Pre-tokenizer splitting text into words before byte-level BPE merges.
enum class PreTokenizer {
  Gpt2,        // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  DigitsGpt2,  // every \p{N} alone, then Gpt2 on the rest (llama.cpp's starcoder, smollm, ...)
};

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS as tokenizer.ggml.add_bos_token/add_eos_token say
  bool parse_special = false;  // turn control-token text such as "<|im_start|>" into its id
};

class Tokenizer {
 public:
  // Reads the tokenizer.* metadata; errors name the file and the offending key.
  static Tokenizer from_gguf(const GgufFile& file);
  // Reads a Hugging Face model directory's tokenizer.json (byte-level BPE only), with the special
  // tokens and add_bos_token/add_eos_token of tokenizer_config.json and config.json when present.
  // Ids run up to `n_vocab`, the model's embedding rows; ids no token uses become unused
  // placeholders, as llama.cpp's converter writes them. Errors name the file and the key.
  static Tokenizer from_hf(const std::string& dir, size_t n_vocab);

  TokenizerModel model() const { return model_; }
  size_t vocab_size() const { return tokens_.size(); }

  std::vector<TokenId> encode(std::string_view text, EncodeOptions options = {}) const;
  // Concatenated bytes of the tokens' pieces; may end inside a UTF-8 sequence.
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const;
  // The bytes one token stands for; control and unknown tokens render only with
  // `render_special`.
  std::string token_to_piece(TokenId id, bool render_special = false) const;

  const std::string& token_text(TokenId id) const;
  TokenType token_type(TokenId id) const;
  std::optional<TokenId> find_token(std::string_view text) const;

  std::optional<TokenId> bos_id() const { return bos_; }
  std::optional<TokenId> eos_id() const { return eos_; }
  std::optional<TokenId> unknown_id() const { return unknown_; }
  std::optional<TokenId> padding_id() const { return padding_; }
  bool adds_bos() const { return add_bos_; }
  bool adds_eos() const { return add_eos_; }
  // EOS and the end-of-turn tokens chat models stop on (<|im_end|>, <|eot_id|>, ...).
  bool is_end_of_generation(TokenId id) const;

 private:
  struct Fragment {
    std::string_view text;  // raw text, or empty for a special token
    TokenId token = -1;
  };

  Tokenizer() = default;
  void load_special_ids(const GgufFile& file);
  void add_merge(std::string_view left, std::string_view right, int rank);
  // Derives the end-of-generation and special-token lists once the vocabulary and the special
  // ids are in place; `source` names the file in errors.
  void finish(std::string_view source);
  void check_id(TokenId id, std::string_view what) const;
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
  void encode_bpe(std::string_view text, std::vector<TokenId>& out) const;
  void encode_bpe_word(std::string_view word, std::vector<TokenId>& out) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  TokenId spm_byte_token(uint8_t byte) const;
  int merge_rank(std::string_view left, std::string_view right) const;

  // Lets the maps be searched with a string_view, without building a std::string.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <typename Value>
  using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

  TokenizerModel model_ = TokenizerModel::BytePairGpt2;
  PreTokenizer pre_ = PreTokenizer::Gpt2;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  StringMap<TokenId> token_ids_;
  StringMap<int> merge_ranks_;           // key: merge_key(left, right)
  std::vector<TokenId> special_tokens_;  // longest text first
  std::vector<TokenId> end_of_generation_;
  std::optional<TokenId> bos_, eos_, unknown_, padding_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
};

// Turns a stream of token ids into text that is always valid UTF-8: bytes of a character split
// across tokens are held back until it completes; malformed bytes become U+FFFD.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  // The text that became complete with `id`; possibly empty.
  std::string push(TokenId id);
  // Ends the stream: an incomplete character still held back becomes one U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace yirage::llm
