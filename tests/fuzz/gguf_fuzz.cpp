// libFuzzer target: arbitrary bytes as a GGUF file. Parsing, every accessor, dequantization and
// tokenizer construction must either succeed or throw yirage::Error; any other exception, crash or
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "llm/llm.h"
#include "support/error.h"

namespace {

using namespace yirage::llm;

template <typename F>
void tolerate_errors(F&& f) {
  try {
    f();
  } catch (const yirage::Error&) {
  }
}

void exercise_value(const GgufValue& v) {
  tolerate_errors([&] { v.as_u64(); });
  tolerate_errors([&] { v.as_i32(); });
  tolerate_errors([&] { v.as_f64(); });
  tolerate_errors([&] { v.as_bool(); });
  tolerate_errors([&] { v.as_string(); });
  if (v.type() != GgufType::Array) return;
  tolerate_errors([&] { v.to_f32_vector(); });
  tolerate_errors([&] { v.to_i64_vector(); });
  const size_t n = std::min<size_t>(v.size(), 64);
  for (size_t i = 0; i < n; ++i) {
    tolerate_errors([&] { v.string_at(i); });
    tolerate_errors([&] { exercise_value(v.array_at(i)); });
  }
}

void exercise_tokenizer(const GgufFile& file) {
  const Tokenizer t = Tokenizer::from_gguf(file);
  for (const bool parse_special : {false, true}) {
    const auto ids = t.encode("Hello, world! 123 <|im_start|>é😀\n  x", {true, parse_special});
    t.decode(ids, parse_special);
    StreamingDecoder stream(t);
    for (const TokenId id : ids) stream.push(id);
    stream.flush();
  }
  const size_t n = std::min<size_t>(t.vocab_size(), 512);
  for (size_t i = 0; i < n; ++i) t.token_to_piece(static_cast<TokenId>(i), true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tolerate_errors([&] {
    const GgufFile file =
        GgufFile::from_memory(std::span(reinterpret_cast<const std::byte*>(data), size));
    for (const GgufValue& v : file.metadata()) exercise_value(v);
    for (const GgufTensor& tensor : file.tensors()) {
      if (tensor.element_count <= (1u << 20)) tolerate_errors([&] { file.dequantize(tensor); });
    }
    tolerate_errors([&] { exercise_tokenizer(file); });
    tolerate_errors([&] { ChatTemplate::from_gguf(file); });
  });
  return 0;
}
