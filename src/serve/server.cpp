// The HTTP layer is Debian's cpp-httplib (libcpp-httplib-dev): one packaged header and library
// with a thread-per-connection server, chunked responses with a content provider (SSE) and
// per-socket timeouts, which is all an OpenAI endpoint needs. Boost.Beast would need an asio event
// loop written around it, and Drogon is not packaged in Debian 12.
#include "serve/serve.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "llm/llm.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "support/error.h"

namespace yirage::serve {

// What the engine thread hands one request's HTTP handler. Outside the anonymous namespace
// because Server::Impl holds it, and a unity build would make that a -Wsubobject-linkage error.
struct RequestChannel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<llm::SequenceEvent> events;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now(), last_token;
  bool got_token = false;
};

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using Channel = RequestChannel;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

std::string sse(const json& body) {
  return "data: " + body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

long long unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Server::Impl {
  explicit Impl(const ServeOptions& o)
      : options(o),
        llm(llm::Llm::open(o.model, llm::LlmOptions{.threads = o.threads,
                                                    .context_length = o.context_length,
                                                    .fused_blocks = o.fused_blocks,
                                                    .backend = o.backend,
                                                    .time_blocks = o.time_blocks,
                                                    .progress = o.progress})),
        scheduler(llm.model(), llm.tokenizer(),
                  llm::SchedulerOptions{.kv_memory_bytes = o.kv_memory_bytes,
                                        .max_batch = o.max_batch,
                                        .progress = o.progress}),
        model_name(std::filesystem::path(o.model).filename().string()) {
    if (o.max_queue < 1) fail("max queue {} must be at least 1", o.max_queue);
    if (o.port < 0 || o.port > 65535) fail("port {} is out of range", o.port);
    // A handler thread per open request: the batch plus the queue, and a few for /metrics.
    const int http_threads = o.max_batch + o.max_queue + 8;
    http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    // An idle keep-alive connection holds its handler thread until this runs out, and cpp-httplib
    // 0.11's stop() waits for those threads: a short one keeps shutdown quick.
    http.set_keep_alive_timeout(2);
    http.set_payload_max_length(size_t{16} << 20);
    // cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian
    // built the library), and 64 clients connecting at once had some of their connections reset.
    // This hook sees the socket before it is bound; bind() listens on it again with the system's
    // limit (a second listen() on a listening socket sets its backlog).
    http.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listening_socket = sock;
    });
    add_routes();
  }

  void add_routes() {
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", model_name},
                                        {"object", "model"},
                                        {"created", started},
                                        {"owned_by", "yirage"}}})}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(render_metrics(scheduler.counters(), metrics, llm.model().block_times()),
                      "text/plain; version=0.0.4");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::completions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::chat);
    });
  }

  void reject(httplib::Response& res, const ApiError& e) {
    if (e.status == 400) metrics.rejected_invalid.fetch_add(1);
    send_json(res, e.status, e.body());
  }

  // The scheduler's request for a checked API request, or the error to answer with.
  std::optional<ApiError> to_sequence(const ApiRequest& api, llm::SequenceRequest& out) {
    const char* field = api.endpoint == Endpoint::chat ? "messages" : "prompt";
    try {
      if (!api.prompt_ids.empty()) {
        out.prompt = api.prompt_ids;
      } else {
        const std::string text = api.endpoint == Endpoint::chat
                                     ? llm.chat_template().apply(api.messages, true)
                                     : api.prompt;
        // As `yirage generate` does: BOS as the model says, control-token text as the token.
        out.prompt = llm.tokenizer().encode(
            text, llm::EncodeOptions{.add_special = true, .parse_special = true});
      }
    } catch (const Error& e) {
      return ApiError{400, e.what(), field};
    }
    const int vocabulary = llm.model().config().n_vocab;
    for (llm::TokenId t : out.prompt)
      if (t < 0 || t >= vocabulary)
        return ApiError{
            400, fmt::format("token id {} is outside the vocabulary of {}", t, vocabulary), field};
    const int context = scheduler.context_length();
    const int prompt = static_cast<int>(out.prompt.size());
    if (prompt > context)
      return ApiError{
          400,
          fmt::format("the prompt has {} tokens, more than the context of {}", prompt, context),
          field};
    out.max_tokens = api.max_tokens.value_or(
        api.endpoint == Endpoint::chat ? std::max(context - prompt, 1) : 16);
    out.sampling = api.sampling;
    if (!api.seeded) out.sampling.seed = std::random_device{}();
    out.stop = api.stop;
    out.logprobs = api.logprobs;
    return std::nullopt;
  }

  // Queues the request with a channel registered for its events; the error when refused.
  std::optional<ApiError> submit(llm::SequenceRequest request, uint64_t& id,
                                 std::shared_ptr<Channel>& channel) {
    if (stopping.load()) return ApiError{503, "the server is shutting down", "", "server_error"};
    if (scheduler.counters().waiting.load() >= options.max_queue) {
      metrics.rejected_busy.fetch_add(1);
      return ApiError{429, "the server is busy: too many requests are waiting", "",
                      "rate_limit_exceeded"};
    }
    channel = std::make_shared<Channel>();
    {
      // Registered under the same lock the engine dispatches with, so no event is missed.
      std::lock_guard lock(channels_mutex);
      try {
        id = scheduler.submit(std::move(request));
      } catch (const Error& e) {
        return ApiError{400, e.what(), "max_tokens"};
      }
      channels[id] = channel;
    }
    metrics.requests.fetch_add(1);
    wake_engine();
    return std::nullopt;
  }

  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    ApiRequest api;
    if (auto e = parse_request(req.body, endpoint, api)) return reject(res, *e);
    llm::SequenceRequest request;
    if (auto e = to_sequence(api, request)) return reject(res, *e);
    uint64_t id = 0;
    std::shared_ptr<Channel> channel;
    if (auto e = submit(std::move(request), id, channel)) {
      if (e->status == 429) res.set_header("Retry-After", "1");
      return reject(res, *e);
    }
    const ResponseHead head{
        endpoint, fmt::format("{}-{}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl", id),
        api.model.empty() ? model_name : api.model, unix_seconds()};
    if (api.stream)
      stream(res, head, id, channel, api.include_usage, api.logprobs >= 0);
    else
      respond(res, head, *channel, api.logprobs >= 0);
  }

  // Waits for the request's next event; false after `timeout` without one.
  static bool next_event(Channel& channel, llm::SequenceEvent& event,
                         std::chrono::milliseconds timeout) {
    std::unique_lock lock(channel.mutex);
    if (!channel.ready.wait_for(lock, timeout, [&] { return !channel.events.empty(); }))
      return false;
    event = std::move(channel.events.front());
    channel.events.pop_front();
    return true;
  }

  // A generated token's log-probabilities with the tokens as text.
  TokenLogprob token_logprob(const llm::SequenceEvent& event) const {
    TokenLogprob t{llm.tokenizer().token_to_piece(event.token), event.logprob, {}};
    for (const auto& [id, logprob] : event.top_logprobs)
      t.top.emplace_back(llm.tokenizer().token_to_piece(id), logprob);
    return t;
  }

  void respond(httplib::Response& res, const ResponseHead& head, Channel& channel, bool logprobs) {
    std::string text;
    std::vector<TokenLogprob> tokens;
    llm::SequenceEvent event;
    do {
      while (!next_event(channel, event, std::chrono::milliseconds(1000))) {
      }
      text += event.text;
      if (logprobs && event.new_tokens > 0) tokens.push_back(token_logprob(event));
    } while (event.finish == llm::FinishReason::none);
    if (event.finish == llm::FinishReason::cancelled)
      return send_json(res, 503,
                       ApiError{503, "the request was cancelled: the server is shutting down", "",
                                "server_error"}
                           .body());
    send_json(res, 200,
              full_response(head, text, llm::finish_reason_name(event.finish), event.prompt_tokens,
                            event.completion_tokens,
                            logprobs ? logprobs_json(head.endpoint, tokens) : json(nullptr)));
  }

  void stream(httplib::Response& res, const ResponseHead& head, uint64_t id,
              std::shared_ptr<Channel> channel, bool include_usage, bool logprobs) {
    auto finished = std::make_shared<bool>(false);
    auto first = std::make_shared<bool>(true);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, head, channel, include_usage, logprobs, finished, first](size_t,
                                                                        httplib::DataSink& sink) {
          llm::SequenceEvent event;
          // While no token comes (the request waits for a batch slot), an SSE comment now and
          // then finds out whether the client is still there: a write to a closed connection
          // fails, and the releaser below cancels the request.
          if (!next_event(*channel, event, std::chrono::milliseconds(500))) {
            static constexpr char kKeepAlive[] = ": waiting\n\n";
            return sink.write(kKeepAlive, sizeof kKeepAlive - 1);
          }
          std::string out;
          if (event.finish == llm::FinishReason::cancelled) {
            *finished = true;
            out = sse(ApiError{503, "the request was cancelled", "", "server_error"}.body());
          } else if (!event.text.empty() || *first || event.finish != llm::FinishReason::none ||
                     (logprobs && event.new_tokens > 0)) {
            const std::string reason = event.finish == llm::FinishReason::none
                                           ? ""
                                           : llm::finish_reason_name(event.finish);
            // A chunk's log-probabilities are those of its token (none for the end's chunk).
            json token_logprobs = nullptr;
            if (logprobs && event.new_tokens > 0) {
              const TokenLogprob t = token_logprob(event);
              token_logprobs = logprobs_json(head.endpoint, {&t, 1});
            }
            out = sse(stream_chunk(head, event.text, reason, *first, token_logprobs));
            *first = false;
          }
          if (event.finish != llm::FinishReason::none && !*finished) {
            *finished = true;
            if (include_usage)
              out += sse(usage_chunk(head, event.prompt_tokens, event.completion_tokens));
          }
          if (*finished) out += "data: [DONE]\n\n";
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (*finished) sink.done();
          return true;
        },
        [this, id, finished](bool) {
          // A stream that ended before its last event lost its client: free its sequence.
          if (*finished) return;
          metrics.cancelled.fetch_add(1);
          scheduler.cancel(id);
          wake_engine();
        });
  }

  void dispatch(const llm::SequenceEvent& event) {
    std::lock_guard lock(channels_mutex);
    const auto it = channels.find(event.id);
    if (it == channels.end()) return;
    Channel& channel = *it->second;
    {
      std::lock_guard channel_lock(channel.mutex);
      if (event.new_tokens > 0) {
        const Clock::time_point now = Clock::now();
        if (!channel.got_token)
          metrics.time_to_first_token.observe(
              std::chrono::duration<double>(now - channel.arrived).count());
        else
          metrics.inter_token_latency.observe(
              std::chrono::duration<double>(now - channel.last_token).count());
        channel.got_token = true;
        channel.last_token = now;
      }
      channel.events.push_back(event);
    }
    channel.ready.notify_all();
    if (event.finish != llm::FinishReason::none) channels.erase(it);
  }

  void wake_engine() {
    {
      std::lock_guard lock(wake_mutex);
      wake = true;
    }
    wake_cv.notify_one();
  }

  void engine_loop() {
    const auto on_event = [this](const llm::SequenceEvent& e) { dispatch(e); };
    while (true) {
      if (stopping.load()) cancel_all();
      bool worked = false;
      try {
        worked = scheduler.step(on_event);
      } catch (const std::exception& e) {
        // An engine failure ends every request rather than the process.
        fmt::print(stderr, "yirage serve: engine error: {}\n", e.what());
        cancel_all();
      }
      if (worked) continue;
      if (stopping.load() && channels_empty()) return;
      std::unique_lock lock(wake_mutex);
      wake_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return wake; });
      wake = false;
    }
  }

  void cancel_all() {
    std::lock_guard lock(channels_mutex);
    for (const auto& [id, channel] : channels) scheduler.cancel(id);
  }

  bool channels_empty() {
    std::lock_guard lock(channels_mutex);
    return channels.empty();
  }

  ServeOptions options;
  llm::Llm llm;
  llm::Scheduler scheduler;
  std::string model_name;
  long long started = unix_seconds();
  ServerMetrics metrics;
  httplib::Server http;
  int port = 0;
  int listening_socket = -1;

  std::mutex channels_mutex;
  std::unordered_map<uint64_t, std::shared_ptr<Channel>> channels;
  std::mutex wake_mutex;
  std::condition_variable wake_cv;
  bool wake = false;
  std::atomic<bool> stopping{false};
  std::thread engine;
};

Server::Server(const ServeOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Server::~Server() {
  stop();
  if (impl_->engine.joinable()) impl_->engine.join();
}

int Server::bind() {
  Impl& s = *impl_;
  s.port = s.options.port == 0
               ? s.http.bind_to_any_port(s.options.host)
               : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  if (s.port < 0)
    fail("cannot listen on {}:{} (address in use, or not an address of this machine)",
         s.options.host, s.options.port);
  if (s.listening_socket < 0 || ::listen(s.listening_socket, SOMAXCONN) != 0)
    fail("cannot raise the listen backlog of {}:{}", s.options.host, s.port);
  return s.port;
}

void Server::run() {
  Impl& s = *impl_;
  s.engine = std::thread([&s] { s.engine_loop(); });
  s.http.listen_after_bind();
  // The listener has stopped: let the engine finish what is in flight, then return.
  s.stopping.store(true);
  s.wake_engine();
  s.engine.join();
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  s.wake_engine();
  // Streams end once their cancellation reaches them; then the listener stops.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!s.channels_empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http.stop();
}

std::string Server::url() const {
  return fmt::format("http://{}:{}", impl_->options.host, impl_->port);
}

std::string Server::describe() const {
  const llm::PagedKvCache& cache = impl_->scheduler.cache();
  return fmt::format(
      "model {}, context {}, KV cache {} blocks of {} positions ({:.1f} MiB), max batch {}, "
      "hot blocks: {}",
      impl_->model_name, impl_->scheduler.context_length(), cache.total_blocks(),
      cache.block_rows(), cache.total_blocks() * double(cache.block_bytes()) / (1 << 20),
      impl_->options.max_batch, impl_->llm.model().hot_path());
}

}  // namespace yirage::serve
