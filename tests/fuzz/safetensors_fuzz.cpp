// libFuzzer target: arbitrary bytes as a safetensors file. Parsing, every accessor, float
// decoding, and mapping the tensors onto a tiny Llama's weights (shape and dtype checks, the Q/K
// row permutation, BF16 widening) must either succeed or throw yirage::Error; any other exception,
// crash or sanitizer report is a bug, and so is a message of more than one line.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "llm/llm.h"
#include "support/error.h"

namespace {

using namespace yirage::llm;

// Errors are expected, but each must be one line (names from the file are escaped).
template <typename F>
void tolerate_errors(F&& f) {
  try {
    f();
  } catch (const yirage::Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr) __builtin_trap();
  }
}

// The shapes make_seeds.cpp writes its tiny checkpoint seed with, so that the fuzzer starts from
// a file whose weights load.
const LlamaConfig& tiny_config() {
  static const LlamaConfig config = llama_config_from_hf(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 32,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
          "vocab_size": 16, "tie_word_embeddings": true})",
      "<fuzz config>");
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tolerate_errors([&] {
    SafetensorsFile file =
        SafetensorsFile::from_memory(std::span(reinterpret_cast<const std::byte*>(data), size));
    for (const auto& [key, value] : file.metadata()) (void)(key.size() + value.size());
    for (const SafetensorsTensor& tensor : file.tensors()) {
      if (file.find_tensor(tensor.name) != &tensor) __builtin_trap();  // the index is wrong
      if (tensor.element_count <= (1u << 20)) tolerate_errors([&] { file.to_f32(tensor); });
    }
    std::vector<SafetensorsFile> files;
    files.push_back(std::move(file));
    const HfCheckpoint checkpoint = HfCheckpoint::from_files(std::move(files));
    tolerate_errors([&] { llama_weights_from_hf(checkpoint, tiny_config()); });
  });
  return 0;
}
