// libFuzzer target: arbitrary text through the tiny BPE and SentencePiece vocabularies of the test
// writer. Beyond not crashing, it checks the properties generation relies on: byte-level BPE
// decodes back to the (U+FFFD-cleaned) input, and the streaming decoder emits valid UTF-8 that
// adds up to the plain decoding.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "llm/llm.h"
#include "llm/unicode.h"
#include "llm_gguf_writer.h"

namespace {

using namespace yirage::llm;

std::vector<std::byte> vocab_file(void (*add)(testing::GgufWriter&)) {
  testing::GgufWriter w;
  add(w);
  return w.finish();
}

struct Vocab {
  explicit Vocab(void (*add)(testing::GgufWriter&))
      : bytes(vocab_file(add)),
        file(GgufFile::from_memory(bytes)),
        tokenizer(Tokenizer::from_gguf(file)) {}
  std::vector<std::byte> bytes;
  GgufFile file;
  Tokenizer tokenizer;
};

bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const int n = unicode::valid_sequence_length(s, pos);
    if (n <= 0) return false;
    pos += static_cast<size_t>(n);
  }
  return true;
}

std::string lenient_roundtrip(std::string_view s) {
  std::string out;
  for (const uint32_t cp : unicode::decode_lenient(s)) unicode::append_utf8(out, cp);
  return out;
}

void check(bool ok) {
  if (!ok) std::abort();
}

void exercise(const Tokenizer& t, std::string_view text, bool parse_special, bool byte_level) {
  const std::vector<TokenId> ids = t.encode(text, {false, parse_special});
  const std::string decoded = t.decode(ids, true);
  if (byte_level) check(decoded == lenient_roundtrip(text));
  StreamingDecoder stream(t, true);
  std::string streamed;
  for (const TokenId id : ids) {
    const std::string piece = stream.push(id);
    check(valid_utf8(piece));
    streamed += piece;
  }
  streamed += stream.flush();
  check(valid_utf8(streamed));
  if (valid_utf8(decoded)) check(streamed == decoded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocab bpe(testing::add_tiny_gpt2_tokenizer);
  static const Vocab spm(testing::add_tiny_spm_tokenizer);
  if (size == 0) return 0;
  const bool parse_special = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  exercise(bpe.tokenizer, text, parse_special, true);
  exercise(spm.tokenizer, text, parse_special, false);
  return 0;
}
