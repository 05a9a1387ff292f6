#include "llm/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <queue>

#include "llm/unicode.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

// Texts llama.cpp treats as end of a turn, in addition to EOS.
constexpr std::array<std::string_view, 10> kEndOfTurnTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",      "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<end_of_utterance>", "<|return|>",
};

// GPT-2's reversible byte-to-unicode map: printable Latin-1 bytes stand for themselves, the rest
// are shifted to U+0100 and up so that every byte becomes a visible character.
struct ByteUnicodeTables {
  std::array<std::string, 256> byte_to_text;
  std::unordered_map<uint32_t, uint8_t> codepoint_to_byte;

  ByteUnicodeTables() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next++;
      unicode::append_utf8(byte_to_text[b], cp);
      codepoint_to_byte.emplace(cp, static_cast<uint8_t>(b));
    }
  }
};

const ByteUnicodeTables& byte_unicode() {
  static const ByteUnicodeTables tables;
  return tables;
}

std::string merge_key(std::string_view left, std::string_view right) {
  // Length-prefixed so that no pair of strings can collide.
  return fmt::format("{}:{}{}", left.size(), left, right);
}

// Character classes of the GPT-2 regex; None stands for "outside the current segment".
enum class CharClass { Letter, Number, Space, Other, None };

CharClass classify(uint32_t cp) {
  if (cp > 0x10FFFF) return CharClass::None;  // llama.cpp has no flags for these
  if (unicode::is_whitespace(cp)) return CharClass::Space;
  if (unicode::is_letter(cp)) return CharClass::Letter;
  if (unicode::is_number(cp)) return CharClass::Number;
  return CharClass::Other;
}

// Splits cps[begin, end) like 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
// \s+(?!\S)|\s+ , appending the end of each piece to `ends`. This is a hand-written matcher
// (as in llama.cpp) rather than a regex engine, since std::regex knows no Unicode classes.
void split_gpt2(const std::vector<uint32_t>& cps, size_t begin, size_t end,
                std::vector<size_t>& ends) {
  const auto at = [&](size_t p) -> uint32_t { return p < end ? cps[p] : 0xFFFFFFFF; };
  const auto cls = [&](size_t p) { return p < end ? classify(cps[p]) : CharClass::None; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cps[pos];
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n = at(pos + 1);
      if (n == 's' || n == 't' || n == 'm' || n == 'd') {
        ends.push_back(pos += 2);
        continue;
      }
      const uint32_t nn = at(pos + 2);
      if (pos + 2 < end &&
          ((n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l'))) {
        ends.push_back(pos += 3);
        continue;
      }
    }
    const CharClass first = c == ' ' ? cls(pos + 1) : cls(pos);
    if (first == CharClass::Letter || first == CharClass::Number || first == CharClass::Other) {
      pos += c == ' ' ? 1 : 0;
      while (cls(pos) == first) ++pos;
      ends.push_back(pos);
      continue;
    }
    size_t spaces = 0;
    while (cls(pos + spaces) == CharClass::Space) ++spaces;
    if (spaces > 1 && pos + spaces < end) {
      ends.push_back(pos += spaces - 1);  // \s+(?!\S): leave the last space to the next word
    } else if (spaces > 0) {
      ends.push_back(pos += spaces);
    } else {
      ends.push_back(++pos);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading.

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  Tokenizer t;
  const std::string_view model = file.get_string("tokenizer.ggml.model");
  if (model == "gpt2") {
    t.model_ = TokenizerModel::BytePairGpt2;
  } else if (model == "llama") {
    t.model_ = TokenizerModel::SentencePiece;
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (gpt2 and llama are)", file.source(),
         model);
  }
  const bool spm = t.model_ == TokenizerModel::SentencePiece;

  const GgufValue& tokens = file.get("tokenizer.ggml.tokens");
  const size_t n = tokens.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", file.source());
  if (n > static_cast<size_t>(std::numeric_limits<TokenId>::max())) {
    fail("{}: tokenizer.ggml.tokens has {} entries, too many for 32-bit ids", file.source(), n);
  }
  t.tokens_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    t.tokens_.emplace_back(tokens.string_at(i));
    t.token_ids_[t.tokens_.back()] =
        static_cast<TokenId>(i);  // later duplicates win, as in llama.cpp
  }

  t.scores_.assign(n, 0.0f);
  if (const GgufValue* scores = file.find("tokenizer.ggml.scores")) {
    if (scores->size() != n) {
      fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", file.source(), scores->size(),
           n);
    }
    t.scores_ = scores->to_f32_vector();
  }
  t.types_.assign(n, TokenType::Normal);
  if (const GgufValue* types = file.find("tokenizer.ggml.token_type")) {
    if (types->size() != n) {
      fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file.source(),
           types->size(), n);
    }
    const std::vector<int64_t> raw = types->to_i64_vector();
    for (size_t i = 0; i < n; ++i) {
      if (raw[i] < 1 || raw[i] > 6) {
        fail("{}: tokenizer.ggml.token_type[{}] is {} (1 to 6 allowed)", file.source(), i, raw[i]);
      }
      t.types_[i] = static_cast<TokenType>(raw[i]);
    }
  }

  if (!spm) {
    const std::string_view pre =
        file.find("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre") : "default";
    if (pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais") {
      t.pre_ = PreTokenizer::Gpt2;
    } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
               pre == "codeshell" || pre == "exaone" || pre == "minerva") {
      t.pre_ = PreTokenizer::DigitsGpt2;
    } else {
      fail(
          "{}: tokenizer.ggml.pre '{}' is not supported (gpt2, mpt, olmo, jais, smollm, "
          "starcoder, refact, command-r, codeshell, exaone, minerva are)",
          file.source(), pre);
    }
    const GgufValue& merges = file.get("tokenizer.ggml.merges");
    t.merge_ranks_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string_view merge = merges.string_at(i);
      // Split at the first space after the first character, as llama.cpp does.
      const size_t space = merge.empty() ? std::string_view::npos : merge.find(' ', 1);
      if (space == std::string_view::npos) {
        fail("{}: tokenizer.ggml.merges[{}] '{}' is not two parts separated by a space",
             file.source(), i, merge);
      }
      t.add_merge(merge.substr(0, space), merge.substr(space + 1), static_cast<int>(i));
    }
  }

  t.add_bos_ = file.get_bool_or("tokenizer.ggml.add_bos_token", spm);
  t.add_eos_ = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  t.add_space_prefix_ = file.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
  t.load_special_ids(file);

  for (size_t i = 0; spm && i < n; ++i) {
    const std::string& text = t.tokens_[i];
    if (t.types_[i] == TokenType::Byte &&
        (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>' ||
         !std::isxdigit(static_cast<unsigned char>(text[3])) ||
         !std::isxdigit(static_cast<unsigned char>(text[4])))) {
      fail("{}: byte token {} '{}' is not of the form <0xXX>", file.source(), i, text);
    }
  }
  t.finish(file.source());
  return t;
}

void Tokenizer::add_merge(std::string_view left, std::string_view right, int rank) {
  merge_ranks_.emplace(merge_key(left, right), rank);  // the first rank of a repeated pair wins
}

void Tokenizer::finish(std::string_view source) {
  if (eos_) end_of_generation_.push_back(*eos_);
  for (std::string_view text : kEndOfTurnTexts) {
    if (const auto id = find_token(text)) end_of_generation_.push_back(*id);
  }
  if (add_bos_ && !bos_) fail("{}: add_bos_token is set but there is no BOS", source);
  if (add_eos_ && !eos_) fail("{}: add_eos_token is set but there is no EOS", source);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const TokenType type = types_[i];
    const bool special =
        type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown;
    if (special && !tokens_[i].empty()) special_tokens_.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](TokenId a, TokenId b) { return tokens_[a].size() > tokens_[b].size(); });
}

void Tokenizer::load_special_ids(const GgufFile& file) {
  const auto load = [&](std::string_view key) -> std::optional<TokenId> {
    const GgufValue* value = file.find(key);
    if (value == nullptr) return std::nullopt;
    const uint32_t id = value->as_u32();
    if (id >= tokens_.size()) {
      fail("{}: {} is {} but the vocabulary has {} tokens", file.source(), key, id, tokens_.size());
    }
    return static_cast<TokenId>(id);
  };
  bos_ = load("tokenizer.ggml.bos_token_id");
  eos_ = load("tokenizer.ggml.eos_token_id");
  unknown_ = load("tokenizer.ggml.unknown_token_id");
  padding_ = load("tokenizer.ggml.padding_token_id");
  for (const auto& key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (const auto id = load(key)) end_of_generation_.push_back(*id);
  }
}

// ---------------------------------------------------------------------------------------------
// Lookup.

void Tokenizer::check_id(TokenId id, std::string_view what) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
    fail("{}: token id {} is outside the vocabulary of {} tokens", what, id, tokens_.size());
  }
}

const std::string& Tokenizer::token_text(TokenId id) const {
  check_id(id, "token_text");
  return tokens_[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(TokenId id) const {
  check_id(id, "token_type");
  return types_[static_cast<size_t>(id)];
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  const auto it = token_ids_.find(text);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
  return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) !=
         end_of_generation_.end();
}

int Tokenizer::merge_rank(std::string_view left, std::string_view right) const {
  const auto it = merge_ranks_.find(merge_key(left, right));
  return it == merge_ranks_.end() ? -1 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Encoding.

std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text,
                                                          bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({text});
  for (const TokenId id : special_tokens_) {
    const TokenType type = types_[static_cast<size_t>(id)];
    // User-defined tokens are always matched; control and unknown ones only when asked.
    if (!parse_special && type != TokenType::UserDefined) continue;
    const std::string& special = tokens_[static_cast<size_t>(id)];
    std::vector<Fragment> next;
    for (const Fragment& fragment : fragments) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (size_t pos; (pos = rest.find(special)) != std::string_view::npos;) {
        if (pos > 0) next.push_back({rest.substr(0, pos)});
        next.push_back({{}, id});
        rest.remove_prefix(pos + special.size());
      }
      if (!rest.empty()) next.push_back({rest});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  std::vector<TokenId> out;
  if (options.add_special && add_bos_) out.push_back(*bos_);
  bool previous_was_special = true;  // SentencePiece prefixes a space at the start of the text
  for (const Fragment& fragment : split_special(text, options.parse_special)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      previous_was_special = true;
      continue;
    }
    if (model_ == TokenizerModel::BytePairGpt2) {
      encode_bpe(fragment.text, out);
      continue;
    }
    std::string spm_text = add_space_prefix_ && previous_was_special ? " " : "";
    spm_text += fragment.text;
    encode_spm(spm_text, out);
    previous_was_special = false;
  }
  if (options.add_special && add_eos_) out.push_back(*eos_);
  return out;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  const std::vector<uint32_t> cps = unicode::decode_lenient(text);
  // Segment boundaries: with DigitsGpt2 every number character is a segment of its own.
  std::vector<size_t> segment_ends;
  if (pre_ == PreTokenizer::DigitsGpt2) {
    for (size_t i = 0; i < cps.size(); ++i) {
      if (classify(cps[i]) != CharClass::Number) continue;
      if (segment_ends.empty() ? i > 0 : segment_ends.back() < i) segment_ends.push_back(i);
      segment_ends.push_back(i + 1);
    }
  }
  if (segment_ends.empty() || segment_ends.back() < cps.size()) segment_ends.push_back(cps.size());

  std::vector<size_t> word_ends;
  size_t begin = 0;
  for (const size_t end : segment_ends) {
    split_gpt2(cps, begin, end, word_ends);
    begin = end;
  }
  std::vector<std::string> words;
  words.reserve(word_ends.size());
  begin = 0;
  for (const size_t end : word_ends) {
    std::string& word = words.emplace_back();
    for (size_t i = begin; i < end; ++i) unicode::append_utf8(word, cps[i]);
    begin = end;
  }
  return words;
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<TokenId>& out) const {
  const ByteUnicodeTables& tables = byte_unicode();
  for (const std::string& word : pre_tokenize(text)) {
    std::string encoded;
    for (const char c : word) encoded += tables.byte_to_text[static_cast<uint8_t>(c)];
    encode_bpe_word(encoded, out);
  }
}

namespace {

// A run of bytes in a doubly linked list of symbols being merged; n == 0 once merged away.
struct Symbol {
  size_t start;
  size_t n;
  int prev;
  int next;
};

struct Bigram {
  int left;
  int right;
  size_t size;      // combined byte length when queued; stale entries no longer match
  double priority;  // BPE: -rank; SentencePiece: score. Higher merges first.
  bool operator<(const Bigram& other) const {  // std::priority_queue pops the largest
    if (priority != other.priority) return priority < other.priority;
    return left > other.left;  // ties: leftmost first
  }
};

std::vector<Symbol> split_symbols(std::string_view text) {
  static constexpr std::array<uint8_t, 16> kLength = {1, 1, 1, 1, 1, 1, 1, 1,
                                                      1, 1, 1, 1, 2, 2, 3, 4};
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n =
        std::min<size_t>(kLength[static_cast<uint8_t>(text[pos]) >> 4], text.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, n, index - 1, index + 1});
    pos += n;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

// Repeatedly merges the queued bigram of highest priority. `make_bigram` queues the bigram of two
// adjacent symbols when the pair may merge.
template <typename MakeBigram>
void merge_symbols(std::vector<Symbol>& symbols, MakeBigram&& make_bigram) {
  std::priority_queue<Bigram> queue;
  const auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (auto bigram =
            make_bigram(symbols[static_cast<size_t>(left)], symbols[static_cast<size_t>(right)])) {
      bigram->left = left;
      bigram->right = right;
      queue.push(*bigram);
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    consider(static_cast<int>(i - 1), static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(bigram.left)];
    Symbol& right = symbols[static_cast<size_t>(bigram.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
    consider(left.prev, bigram.left);
    consider(bigram.left, left.next);
  }
}

}  // namespace

void Tokenizer::encode_bpe_word(std::string_view word, std::vector<TokenId>& out) const {
  std::vector<Symbol> symbols = split_symbols(word);
  merge_symbols(symbols, [&](const Symbol& a, const Symbol& b) -> std::optional<Bigram> {
    const int rank = merge_rank(word.substr(a.start, a.n), word.substr(b.start, b.n));
    if (rank < 0) return std::nullopt;
    return Bigram{0, 0, a.n + b.n, -static_cast<double>(rank)};
  });
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view text = word.substr(s.start, s.n);
    if (const auto id = find_token(text)) {
      out.push_back(*id);
      continue;
    }
    // No token for the merged text: fall back to single-byte tokens, skipping bytes without one
    // (llama.cpp does the same).
    for (const char c : text) {
      if (const auto id = find_token(std::string_view(&c, 1))) out.push_back(*id);
    }
  }
}

TokenId Tokenizer::spm_byte_token(uint8_t byte) const {
  if (const auto id = find_token(fmt::format("<0x{:02X}>", byte))) return *id;
  if (const auto id = find_token(std::string(1, static_cast<char>(byte)))) return *id;
  if (unknown_) return *unknown_;
  fail("SentencePiece vocabulary has no token for byte 0x{:02X} and no unknown token", byte);
}

void Tokenizer::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    if (c == ' ') {
      escaped += kSpmSpace;
    } else {
      escaped += c;
    }
  }
  std::vector<Symbol> symbols = split_symbols(escaped);
  merge_symbols(symbols, [&](const Symbol& a, const Symbol& b) -> std::optional<Bigram> {
    const auto id = find_token(std::string_view(escaped).substr(a.start, a.n + b.n));
    if (!id) return std::nullopt;
    return Bigram{0, 0, a.n + b.n, scores_[static_cast<size_t>(*id)]};
  });
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = std::string_view(escaped).substr(s.start, s.n);
    if (const auto id = find_token(piece)) {
      out.push_back(*id);
    } else {
      for (const char c : piece) out.push_back(spm_byte_token(static_cast<uint8_t>(c)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding.

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  check_id(id, "token_to_piece");
  const std::string& text = tokens_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::Control:
    case TokenType::Unknown: return render_special ? text : std::string();
    case TokenType::UserDefined: return text;
    case TokenType::Unused: return {};
    case TokenType::Byte:
      if (model_ == TokenizerModel::BytePairGpt2) return {};
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    case TokenType::Normal: break;
  }
  std::string piece;
  if (model_ == TokenizerModel::SentencePiece) {
    for (size_t pos = 0; pos < text.size();) {
      if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
        piece += ' ';
        pos += kSpmSpace.size();
      } else {
        piece += text[pos++];
      }
    }
    return piece;
  }
  const ByteUnicodeTables& tables = byte_unicode();
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = unicode::decode_lenient(text, pos);
    const auto it = tables.codepoint_to_byte.find(cp);
    if (it != tables.codepoint_to_byte.end()) {
      piece += static_cast<char>(it->second);
    } else {
      piece.append(text, start, pos - start);  // not a byte character: keep it as it is
    }
  }
  return piece;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string text;
  for (const TokenId id : ids) text += token_to_piece(id, render_special);
  return text;
}

std::string StreamingDecoder::push(TokenId id) {
  pending_ += tokenizer_.token_to_piece(id, render_special_);
  std::string ready;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const int length = unicode::valid_sequence_length(pending_, pos);
    if (length == 0) break;  // the character continues in a later token
    if (length < 0) {
      unicode::append_utf8(ready, unicode::kReplacement);
      ++pos;
      continue;
    }
    ready.append(pending_, pos, static_cast<size_t>(length));
    pos += static_cast<size_t>(length);
  }
  pending_.erase(0, pos);
  return ready;
}

std::string StreamingDecoder::flush() {
  std::string rest;
  if (!pending_.empty()) unicode::append_utf8(rest, unicode::kReplacement);
  pending_.clear();
  return rest;
}

}  // namespace yirage::llm
