// A small GGUF writer for tests and fuzz seeds. It writes well-formed files by default and lets a
// test override any field (counts, version, offsets, type ids) to produce malformed ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace yirage::llm::testing {

class ByteSink {
 public:
  template <typename T>
  void put(T value) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));  // little-endian host, like GGUF
    for (unsigned char c : raw) bytes.push_back(static_cast<std::byte>(c));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    for (char c : s) bytes.push_back(static_cast<std::byte>(c));
  }
  void put_bytes(const std::vector<std::byte>& b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
  void pad_to(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(std::byte{0});
  }

  std::vector<std::byte> bytes;
};

class GgufWriter {
 public:
  // GGUF value type ids, spelled out again rather than taken from gguf.h, so that a wrong id in
  // the reader fails the tests instead of agreeing with itself.
  enum Type : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
  };

  uint32_t version = 3;
  std::optional<uint64_t> tensor_count_override;
  std::optional<uint64_t> kv_count_override;
  size_t alignment = 32;  // used for layout; add general.alignment to declare another

  template <typename T>
  GgufWriter& scalar(std::string_view key, Type type, T value) {
    ByteSink v;
    v.put<T>(value);
    return raw_kv(key, type, v.bytes);
  }
  GgufWriter& string(std::string_view key, std::string_view value) {
    ByteSink v;
    v.put_string(value);
    return raw_kv(key, String, v.bytes);
  }
  template <typename T>
  GgufWriter& array(std::string_view key, Type element_type, const std::vector<T>& values) {
    ByteSink v;
    v.put<uint32_t>(element_type);
    v.put<uint64_t>(values.size());
    for (const T& x : values) v.put<T>(x);
    return raw_kv(key, Array, v.bytes);
  }
  GgufWriter& string_array(std::string_view key, const std::vector<std::string>& values) {
    ByteSink v;
    v.put<uint32_t>(String);
    v.put<uint64_t>(values.size());
    for (const std::string& s : values) v.put_string(s);
    return raw_kv(key, Array, v.bytes);
  }
  // A value whose encoding (after the type) is given verbatim.
  GgufWriter& raw_kv(std::string_view key, uint32_t type, const std::vector<std::byte>& value) {
    ByteSink kv;
    kv.put_string(key);
    kv.put<uint32_t>(type);
    kv.put_bytes(value);
    kvs_.push_back(kv.bytes);
    return *this;
  }

  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<std::byte> data;
    std::optional<uint64_t> offset;  // default: packed after the previous tensor, aligned
  };
  GgufWriter& tensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }

  // Tensors placed beyond this offset are declared but their data is not written.
  static constexpr uint64_t kMaxWrittenOffset = uint64_t{1} << 32;

  std::vector<std::byte> finish() const {
    ByteSink out;
    out.put<uint32_t>(0x46554747);  // "GGUF"
    out.put<uint32_t>(version);
    out.put<uint64_t>(tensor_count_override.value_or(tensors_.size()));
    out.put<uint64_t>(kv_count_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) out.put_bytes(kv);
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = (offset + t.data.size() + alignment - 1) / alignment * alignment;
      out.put_string(t.name);
      out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out.put<uint64_t>(d);
      out.put<uint32_t>(t.type);
      out.put<uint64_t>(offset);
    }
    out.pad_to(alignment);
    const size_t data_start = out.bytes.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      // Beyond kMaxWrittenOffset the tensor is declared only, to test range checks.
      if (offsets[i] > kMaxWrittenOffset || tensors_[i].data.empty()) continue;
      const size_t end = data_start + offsets[i] + tensors_[i].data.size();
      if (out.bytes.size() < end) out.bytes.resize(end);
      std::memcpy(out.bytes.data() + data_start + offsets[i], tensors_[i].data.data(),
                  tensors_[i].data.size());
    }
    return out.bytes;
  }

 private:
  std::vector<std::vector<std::byte>> kvs_;
  std::vector<Tensor> tensors_;
};

inline std::vector<std::byte> float_bytes(const std::vector<float>& values) {
  ByteSink s;
  for (float v : values) s.put<float>(v);
  return s.bytes;
}

// A byte-level BPE vocabulary just big enough to exercise merges and special tokens: all 256 byte
// characters, "<|im_start|>"/"<|im_end|>" as control tokens, and merges building "Ġhello" and
// "ĠĠ".
inline void add_tiny_gpt2_tokenizer(GgufWriter& w) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types = {3, 3, 3};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    tokens.push_back(s);
    types.push_back(1);
  }
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "Ġ hello", "Ġ Ġ"};
  for (const std::string& m : merges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    tokens.push_back(merged);
    types.push_back(1);
  }
  w.string("tokenizer.ggml.model", "gpt2");
  w.string("tokenizer.ggml.pre", "smollm");
  w.string_array("tokenizer.ggml.tokens", tokens);
  w.array<int32_t>("tokenizer.ggml.token_type", GgufWriter::I32, types);
  w.string_array("tokenizer.ggml.merges", merges);
  w.scalar<uint32_t>("tokenizer.ggml.bos_token_id", GgufWriter::U32, 1);
  w.scalar<uint32_t>("tokenizer.ggml.eos_token_id", GgufWriter::U32, 2);
  w.scalar<bool>("tokenizer.ggml.add_bos_token", GgufWriter::Bool, false);
  w.string("tokenizer.chat_template",
           "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
           "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}");
}

inline std::string hex_byte_token(int b) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  return std::string("<0x") + kDigits[b >> 4] + kDigits[b & 15] + ">";
}

// A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then pieces whose scores
// build "▁hello" through "he", "ll", "hell" and "hello".
inline void add_tiny_spm_tokenizer(GgufWriter& w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(hex_byte_token(b));
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xE2\x96\x81", -1}, {"h", -2},  {"e", -2},    {"l", -2},     {"o", -2},
      {"he", -3},           {"ll", -4}, {"hell", -5}, {"hello", -6}, {"\xE2\x96\x81hello", -7},
  };
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    types.push_back(1);
    scores.push_back(score);
  }
  w.string("tokenizer.ggml.model", "llama");
  w.string_array("tokenizer.ggml.tokens", tokens);
  w.array<float>("tokenizer.ggml.scores", GgufWriter::F32, scores);
  w.array<int32_t>("tokenizer.ggml.token_type", GgufWriter::I32, types);
  w.scalar<uint32_t>("tokenizer.ggml.bos_token_id", GgufWriter::U32, 1);
  w.scalar<uint32_t>("tokenizer.ggml.eos_token_id", GgufWriter::U32, 2);
  w.scalar<uint32_t>("tokenizer.ggml.unknown_token_id", GgufWriter::U32, 0);
}

}  // namespace yirage::llm::testing
