// Tokenizer::from_hf: a Hugging Face tokenizer.json read into the same tables from_gguf fills, the
// way llama.cpp's convert_hf_to_gguf.py would write them into a GGUF file, so that both paths
// tokenize alike.
#include <filesystem>
#include <limits>

#include "llm/hf_json.h"
#include "llm/tokenizer.h"
#include "support/error.h"

namespace yirage::llm {
namespace {

using hf::json;
using hf::JsonObject;
using hf::path_in;

// The pre-tokenizers llama.cpp's byte-level BPE reproduces: GPT-2's regex (ByteLevel with
// use_regex), optionally after splitting every digit off (SmolLM2, StarCoder).
PreTokenizer read_pre_tokenizer(const JsonObject& top) {
  const JsonObject pre = top.object("pre_tokenizer");
  const auto byte_level = [](const JsonObject& o) {
    return o.optional_string("type") == "ByteLevel" && !o.boolean_or("add_prefix_space", true) &&
           o.boolean_or("use_regex", true);
  };
  if (byte_level(pre)) return PreTokenizer::Gpt2;
  if (pre.optional_string("type") == "Sequence") {
    const json& steps = pre.at("pretokenizers");
    if (steps.is_array() && steps.size() == 2 && steps[0].is_object() && steps[1].is_object()) {
      const JsonObject digits(steps[0], top.file(), "pre_tokenizer.pretokenizers[0]");
      const JsonObject bytes(steps[1], top.file(), "pre_tokenizer.pretokenizers[1]");
      if (digits.optional_string("type") == "Digits" &&
          digits.boolean_or("individual_digits", false) && byte_level(bytes)) {
        return PreTokenizer::DigitsGpt2;
      }
    }
  }
  pre.fail_key("type",
               "not supported: the pre-tokenizer must be ByteLevel (add_prefix_space false, "
               "use_regex true), or a Sequence of Digits (individual_digits) and that ByteLevel");
}

// A special token as tokenizer_config.json names it: a string or an AddedToken {"content": ...}.
std::optional<std::string> special_text(const JsonObject& config, std::string_view key) {
  const json* v = config.find(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object())
    return JsonObject(*v, config.file(), config.key_path(key)).optional_string("content");
  config.fail_key(key, "expected a string or an object with \"content\"");
}

// The special tokens the post-processor puts around a single sequence: Hugging Face's fast
// tokenizers add BOS and EOS this way (TemplateProcessing) rather than through
// tokenizer_config.json.
struct Surrounding {
  std::optional<std::string> prefix, suffix;
};

Surrounding read_post_processor(const json& value, const std::string& file, const std::string& path,
                                int depth = 0) {
  const JsonObject pp(value, file, path);
  if (depth > 4) pp.fail_key("type", "post-processors nested too deeply");
  const std::optional<std::string> type = pp.optional_string("type");
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    const json& processors = pp.at("processors");
    if (!processors.is_array()) pp.fail_key("processors", "expected an array");
    Surrounding all;
    for (size_t i = 0; i < processors.size(); ++i) {
      const Surrounding s = read_post_processor(
          processors[i], file, fmt::format("{}.processors[{}]", path, i), depth + 1);
      if (s.prefix) all.prefix = s.prefix;
      if (s.suffix) all.suffix = s.suffix;
    }
    return all;
  }
  if (type != "TemplateProcessing") {
    pp.fail_key("type", fmt::format("'{}' is not supported (ByteLevel, TemplateProcessing and a "
                                    "Sequence of them are)",
                                    type.value_or("")));
  }
  const json& single = pp.at("single");
  if (!single.is_array()) pp.fail_key("single", "expected an array");
  Surrounding s;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonObject item(single[i], file, fmt::format("{}.single[{}]", path, i));
    if (item.find("Sequence") != nullptr) {
      seen_sequence = true;
      continue;
    }
    std::optional<std::string>& slot = seen_sequence ? s.suffix : s.prefix;
    if (slot) item.fail_key("SpecialToken", "more than one token on a side is not supported");
    slot = item.object("SpecialToken").optional_string("id");
    if (!slot) item.fail_key("SpecialToken.id", "missing");
  }
  return s;
}

}  // namespace

Tokenizer Tokenizer::from_hf(const std::string& dir, size_t n_vocab) {
  const std::string path = path_in(dir, "tokenizer.json");
  const json root = hf::read_json_file(path);
  const JsonObject top(root, path);
  const JsonObject model = top.object("model");
  if (const auto type = model.optional_string("type"); type != "BPE") {
    model.fail_key(
        "type", fmt::format("'{}' is not supported (only byte-level BPE is)", type.value_or("")));
  }
  // These change how words are split into pieces in ways the GGUF byte-level BPE does not model.
  if (model.boolean_or("byte_fallback", false)) {
    model.fail_key("byte_fallback", "SentencePiece-style BPE is not supported");
  }
  if (model.boolean_or("ignore_merges", false)) model.fail_key("ignore_merges", "not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.optional_string(key).value_or("").empty()) model.fail_key(key, "not supported");
  }
  if (top.find("normalizer") != nullptr)
    top.fail_key("normalizer", "normalizers are not supported");

  Tokenizer t;
  t.model_ = TokenizerModel::BytePairGpt2;
  t.pre_ = read_pre_tokenizer(top);
  if (n_vocab == 0 || n_vocab > static_cast<size_t>(std::numeric_limits<TokenId>::max())) {
    fail("{}: a vocabulary of {} tokens is out of range", path, n_vocab);
  }
  t.tokens_.assign(n_vocab, "");
  t.types_.assign(n_vocab, TokenType::Unused);
  t.scores_.assign(n_vocab, 0.0f);
  std::vector<bool> used(n_vocab);
  const auto place = [&](const JsonObject& where, std::string_view key, const json& id_value,
                         const std::string& text, TokenType type) {
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 ||
        id_value.get<uint64_t>() >= n_vocab) {
      where.fail_key(key, fmt::format("id {} is not below the model's vocab_size {}",
                                      hf::excerpt(id_value), n_vocab));
    }
    const auto id = id_value.get<size_t>();
    t.tokens_[id] = text;
    t.types_[id] = type;
    used[id] = true;
  };

  const JsonObject vocab = model.object("vocab");
  for (const auto& [text, id] : vocab.value().items()) {
    if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<uint64_t>() < n_vocab &&
        used[id.get<size_t>()]) {
      vocab.fail_key(text, fmt::format("id {} is also token '{}'", id.dump(),
                                       hf::printable(t.tokens_[id.get<size_t>()])));
    }
    place(vocab, text, id, text, TokenType::Normal);
  }
  // Added tokens may repeat a vocabulary entry (the usual case) or extend it. llama.cpp's
  // converter marks special ones, and ones that look like "<|...|>", as control tokens, and the
  // rest as user-defined tokens, which are matched in text before BPE.
  if (const json* added = top.find("added_tokens")) {
    if (!added->is_array()) top.fail_key("added_tokens", "expected an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const JsonObject token((*added)[i], path, fmt::format("added_tokens[{}]", i));
      const std::optional<std::string> content = token.optional_string("content");
      if (!content || content->empty()) token.fail_key("content", "missing or empty");
      const json& id = token.at("id");
      if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<uint64_t>() < n_vocab &&
          used[id.get<size_t>()] && t.tokens_[id.get<size_t>()] != *content) {
        token.fail_key("id", fmt::format("{} is already token '{}'", id.dump(),
                                         hf::printable(t.tokens_[id.get<size_t>()])));
      }
      const bool looks_special = content->starts_with("<|") && content->ends_with("|>");
      place(token, "id", id, *content,
            token.boolean_or("special", false) || looks_special ? TokenType::Control
                                                                : TokenType::UserDefined);
    }
  }
  for (size_t i = 0; i < n_vocab; ++i) {
    if (!used[i]) t.tokens_[i] = fmt::format("[PAD{}]", i);
    t.token_ids_[t.tokens_[i]] = static_cast<TokenId>(i);  // later duplicates win, as in GGUF
  }

  const json& merges = model.at("merges");
  if (!merges.is_array()) model.fail_key("merges", "expected an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string key = fmt::format("merges[{}]", i);
    if (m.is_string()) {
      // Split at the first space after the first character, as from_gguf does.
      const std::string& merge = m.get_ref<const std::string&>();
      const size_t space = merge.empty() ? std::string::npos : merge.find(' ', 1);
      if (space == std::string::npos) model.fail_key(key, "not two parts separated by a space");
      t.add_merge(std::string_view(merge).substr(0, space),
                  std::string_view(merge).substr(space + 1), static_cast<int>(i));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      t.add_merge(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(),
                  static_cast<int>(i));
    } else {
      model.fail_key(key, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }

  // Special ids: tokenizer_config.json names the tokens, config.json gives ids for the ones it
  // does not, and the post-processor's tokens override both, since they are what gets added.
  const std::string config_path = path_in(dir, "tokenizer_config.json");
  const json tokenizer_config =
      std::filesystem::exists(config_path) ? hf::read_json_file(config_path) : json::object();
  const JsonObject tc(tokenizer_config, config_path);
  const auto lookup = [&](const JsonObject& where, std::string_view key, const std::string& text) {
    const std::optional<TokenId> id = t.find_token(text);
    if (!id) where.fail_key(key, fmt::format("'{}' is not in the vocabulary", hf::printable(text)));
    return *id;
  };
  const auto named = [&](std::string_view key) -> std::optional<TokenId> {
    const std::optional<std::string> text = special_text(tc, key);
    if (!text) return std::nullopt;
    return lookup(tc, key, *text);
  };
  t.bos_ = named("bos_token");
  t.eos_ = named("eos_token");
  t.unknown_ = named("unk_token");
  t.padding_ = named("pad_token");
  const std::string model_config_path = path_in(dir, "config.json");
  if (std::filesystem::exists(model_config_path)) {
    const json model_config = hf::read_json_file(model_config_path);
    const JsonObject mc(model_config, model_config_path);
    const int64_t max_id = static_cast<int64_t>(n_vocab) - 1;
    if (!t.bos_) t.bos_ = mc.optional_integer("bos_token_id", 0, max_id);
    // Chat models may list several ids that end a turn; the first is EOS.
    if (const json* eos = mc.find("eos_token_id"); eos != nullptr && eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i) {
        const json& v = (*eos)[i];
        if (!v.is_number_integer() || v < 0 || v > max_id) {
          mc.fail_key(fmt::format("eos_token_id[{}]", i),
                      fmt::format("expected an id below vocab_size {}", n_vocab));
        }
        const auto id = v.get<TokenId>();
        if (!t.eos_) t.eos_ = id;
        t.end_of_generation_.push_back(id);
      }
    } else if (!t.eos_) {
      t.eos_ = mc.optional_integer("eos_token_id", 0, max_id);
    }
  }
  if (const json* post = top.find("post_processor")) {
    const std::string where = "post_processor";
    const Surrounding s = read_post_processor(*post, path, where);
    if (s.prefix) t.bos_ = lookup(top, where, *s.prefix);
    if (s.suffix) t.eos_ = lookup(top, where, *s.suffix);
    t.add_bos_ = s.prefix.has_value();
    t.add_eos_ = s.suffix.has_value();
  }
  t.add_bos_ = tc.boolean_or("add_bos_token", t.add_bos_);
  t.add_eos_ = tc.boolean_or("add_eos_token", t.add_eos_);
  t.finish(path);
  return t;
}

}  // namespace yirage::llm
