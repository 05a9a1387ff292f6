// The serve stage: an OpenAI-compatible HTTP server over the llm stage's continuous batching.
// `Server` loads one model, runs the llm::Scheduler on an engine thread that steps the batch
// whenever there is work, and answers /v1/completions and /v1/chat/completions (JSON, or SSE
// streams ending in `data: [DONE]`), /v1/models, /health and /metrics (Prometheus text). Requests
// are checked before they queue (400 with an OpenAI error object naming the field); a full queue
// answers 429 with Retry-After; a client that disconnects mid-stream has its sequence cancelled,
// its KV blocks freed at the next step. Nothing here knows which backend runs the model.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace yirage::backend {
class Backend;  // backend/backend.h
}

namespace yirage::serve {

struct ServeOptions {
  std::string model;  // a GGUF file or Hugging Face directory, as llm::Llm::open takes
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() says which)
  int threads = 2;
  int context_length = 0;  // 0: the model's, at most 4096
  size_t kv_memory_bytes = size_t{512} << 20;
  int max_batch = 16;
  int max_queue = 64;  // waiting requests beyond which new ones get 429
  bool fused_blocks = true;
  // Time each hot block's launches (llm::LlmOptions::time_blocks), for /metrics.
  bool time_blocks = false;
  // Where the block graphs run (llm::LlmOptions::backend); the caller creates it by name.
  std::shared_ptr<backend::Backend> backend = {};
  // Lines about loading (the block graphs' optimization); may be empty.
  std::function<void(const std::string&)> progress;
};

class Server {
 public:
  // Loads the model and builds the scheduler; errors name the file or option.
  explicit Server(const ServeOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket and returns the port; an error when the address is taken.
  int bind();
  // Serves until stop(): blocks the calling thread.
  void run();
  // Cancels every request in flight (streams end), stops the engine and the listener. Safe to
  // call from any thread, more than once.
  void stop();

  std::string url() const;
  // "KV cache: 512 blocks of 16 positions (…), max batch 16": what the server holds.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yirage::serve
