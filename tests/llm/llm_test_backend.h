// The backend the llm tests run the block graphs on: the cpu backend, whose results the tests
// compare with the plain references and with llama.cpp.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace yirage::llm::testing {

// The process's shared cpu backend, for ModelOptions::backend.
inline backend::Backend* cpu_backend() {
  return &backend::get_backend("cpu");
}

// A cpu backend of its own with `threads` threads, for LlmOptions::backend.
inline std::shared_ptr<backend::Backend> cpu_backend(int threads) {
  return backend::create_backend("cpu", {.threads = threads});
}

}  // namespace yirage::llm::testing
