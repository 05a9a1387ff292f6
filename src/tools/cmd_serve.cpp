// `yirage serve`: the OpenAI-compatible server (serve/serve.h) on one model. Prints the URL and
// one readiness line to stdout once it listens, and shuts down cleanly on SIGINT or SIGTERM:
// requests in flight are cancelled, their streams ended, then the listener closes.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "serve/serve.h"
#include "support/error.h"
#include "tools/commands.h"
#include "tools/llm_options.h"

namespace yirage::tools {
namespace {

struct ServeCli {
  serve::ServeOptions options;
  double kv_memory_mib = 512;
  bool hand_written = false;
  std::string backend = std::string(kLlmDefaultBackend);
};

void run(ServeCli& cli) {
  serve::ServeOptions options = cli.options;
  if (!(cli.kv_memory_mib > 0)) fail("--kv-memory {} MiB must be positive", cli.kv_memory_mib);
  options.kv_memory_bytes = static_cast<size_t>(cli.kv_memory_mib * (1 << 20));
  options.fused_blocks = !cli.hand_written;
  options.backend = create_llm_backend(cli.backend, options.threads);
  options.progress = [](const std::string& line) { fmt::print(stderr, "optimizing {}\n", line); };
  // The signals are taken by one thread that waits for them (sigwait), not by a handler: every
  // thread started from here on inherits the mask, and stop() runs in ordinary code.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  serve::Server server(options);
  server.bind();
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    fmt::print(stderr, "yirage serve: {}: shutting down\n",
               signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  fmt::print("{}\n", server.url());
  fmt::print("yirage serve: ready ({})\n", server.describe());
  std::fflush(stdout);
  server.run();
  // run() returns after stop(), which only the waiter calls.
  waiter.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto cli = std::make_shared<ServeCli>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  serve::ServeOptions& o = cli->options;
  cmd->add_option("--model,-m", o.model, "GGUF model file, or Hugging Face directory")->required();
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--threads,-t", o.threads, "Threads")->check(CLI::Range(1, 1024));
  add_backend_option(*cmd, cli->backend);
  cmd->add_option("--context", o.context_length,
                  "Positions per sequence (0: the model's, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-memory", cli->kv_memory_mib, "KV cache pool in MiB")->capture_default_str();
  cmd->add_option("--max-batch", o.max_batch, "Sequences decoded together")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "Waiting requests before new ones get 429")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--hand-written", cli->hand_written,
                "Run every block on the hand-written kernels instead of the superoptimized graphs");
  cmd->add_flag("--time-blocks", o.time_blocks,
                "Time each hot block's launches, waiting for the backend around each (slower "
                "steps), into /metrics' yirage_block_seconds_total");
  cmd->callback([cli] { run(*cli); });
}

}  // namespace yirage::tools
