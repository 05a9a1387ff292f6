// libFuzzer target: arbitrary bytes as a Hugging Face config.json. Reading it into a LlamaConfig
// must either succeed, with every dimension the engine sizes buffers by in range, or throw a
// one-line yirage::Error; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "llm/llm.h"
#include "support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const yirage::llm::LlamaConfig c = yirage::llm::llama_config_from_hf(
        std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    if (c.n_layer < 1 || c.n_embd < 1 || c.n_head < 1 || c.n_head_kv < 1 || c.n_ff < 1 ||
        c.n_vocab < 1 || c.head_dim * c.n_head != c.n_embd || c.n_head % c.n_head_kv != 0) {
      __builtin_trap();  // validation let an inconsistent config through
    }
  } catch (const yirage::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr) __builtin_trap();
  }
  return 0;
}
