#include "llm/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <string_view>

#include "support/error.h"

namespace yirage::llm {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::none: break;
  }
  return "none";
}

struct Scheduler::Sequence {
  Sequence(uint64_t id_, SequenceRequest request_, const Tokenizer& tokenizer, int block_rows_)
      : id(id_),
        request(std::move(request_)),
        sampler(request.sampling),
        decoder(tokenizer),
        history(request.prompt),
        block_rows(block_rows_) {
    history.reserve(request.prompt.size() + static_cast<size_t>(request.max_tokens));
    // The prefix hash of every full block of the prompt, for the prefix cache.
    uint64_t hash = 0;
    for (int b = 0; b < prompt_size() / block_rows; ++b)
      prefix_hashes.push_back(hash = PagedKvCache::chain_hash(hash, prompt_block(b)));
  }
  int prompt_size() const { return static_cast<int>(request.prompt.size()); }
  bool prefilling() const { return cached < prompt_size(); }
  std::span<const TokenId> prompt_block(int b) const {
    return std::span(request.prompt)
        .subspan(static_cast<size_t>(b) * block_rows, static_cast<size_t>(block_rows));
  }

  uint64_t id;
  SequenceRequest request;
  Sampler sampler;
  StreamingDecoder decoder;
  std::vector<int32_t> blocks;   // its block table in the pool
  std::vector<TokenId> history;  // prompt and generated tokens, for the repeat penalty
  int cached = 0;                // positions whose keys and values are in the cache
  int generated = 0;
  TokenId next = -1;  // the last sampled token, fed by the next step
  std::string held;   // text held back because it may begin a stop string
  bool done = false;
  int block_rows;
  std::vector<uint64_t> prefix_hashes;
  int published = 0;  // leading prompt blocks in the prefix cache (taken from it or published)
};

namespace {

uint64_t microseconds_since(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

// How much of the end of `text` could be the beginning of one of `stops`: that much is held back
// until the next token says whether a stop string follows.
size_t stop_prefix_length(std::string_view text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops)
    for (size_t n = std::min(stop.size() - 1, text.size()); n > longest; --n)
      if (text.substr(text.size() - n) == std::string_view(stop).substr(0, n)) {
        longest = n;
        break;
      }
  return longest;
}

// The log-softmax of `logits` at `token`, and the `top` most likely tokens with theirs, best
// first (ties by id).
void token_logprobs(std::span<const float> logits, TokenId token, int top, SequenceEvent& event) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double{l} - max);
  const double log_total = max + std::log(sum);
  event.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - log_total);
  auto& best = event.top_logprobs;
  best.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (static_cast<int>(best.size()) == top && (top == 0 || l <= best.back().second)) continue;
    if (static_cast<int>(best.size()) == top) best.pop_back();
    auto at = best.end();
    while (at != best.begin() && std::prev(at)->second < l) --at;
    best.insert(at, {static_cast<TokenId>(i), l});
  }
  for (auto& [id, value] : best) value = static_cast<float>(value - log_total);
}

// Where the first stop string begins in `text`, or npos.
size_t first_stop(std::string_view text, const std::vector<std::string>& stops) {
  size_t first = std::string_view::npos;
  for (const std::string& stop : stops) first = std::min(first, text.find(stop));
  return first;
}

}  // namespace

Scheduler::Scheduler(LlamaModel& model, const Tokenizer& tokenizer, const SchedulerOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      cache_(model.config(), options.kv_memory_bytes, options.block_rows) {
  if (options.max_batch < 1) fail("max batch {} must be at least 1", options.max_batch);
  if (options.prefill_chunk < 1 || options.step_prompt_tokens < 1 ||
      options.step_prompt_tokens_decoding < 1)
    fail("prefill chunk {} and step prompt tokens {} (while decoding {}) must be at least 1",
         options.prefill_chunk, options.step_prompt_tokens, options.step_prompt_tokens_decoding);
  model_.prepare_batch_cache(cache_, options.progress);
  running_.reserve(static_cast<size_t>(options.max_batch));
  entries_.reserve(static_cast<size_t>(options.max_batch) * 2);
  update_counters();
}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::submit(SequenceRequest request) {
  const int context = model_.context_length();
  const int prompt = static_cast<int>(request.prompt.size());
  if (prompt == 0) fail("the prompt is empty: nothing to continue from");
  if (prompt > context)
    fail("the prompt has {} tokens, more than the context of {}", prompt, context);
  if (request.max_tokens < 1) fail("max tokens {} must be at least 1", request.max_tokens);
  for (TokenId t : request.prompt)
    if (t < 0 || t >= model_.config().n_vocab)
      fail("token id {} is outside the vocabulary of {}", t, model_.config().n_vocab);
  for (const std::string& stop : request.stop)
    if (stop.empty()) fail("a stop string is empty");
  if (request.logprobs < -1 || request.logprobs > 20)
    fail("top logprobs {} is out of range (0 to 20)", request.logprobs);
  const int positions = std::min(prompt + request.max_tokens, context);
  if (cache_.blocks_for(positions) > cache_.total_blocks())
    fail("the request needs {} KV blocks ({} positions) but the pool has {}",
         cache_.blocks_for(positions), positions, cache_.total_blocks());
  std::lock_guard lock(incoming_mutex_);
  const uint64_t id = next_id_++;
  // The Sampler checks its options here, on the caller's thread.
  incoming_.push_back(
      std::make_unique<Sequence>(id, std::move(request), tokenizer_, cache_.block_rows()));
  counters_.waiting.fetch_add(1);
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard lock(incoming_mutex_);
  cancelled_.push_back(id);
}

void Scheduler::take_incoming(const std::function<void(const SequenceEvent&)>& on_event) {
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard lock(incoming_mutex_);
    for (auto& seq : incoming_) waiting_.push_back(std::move(seq));
    incoming_.clear();
    cancelled.swap(cancelled_);
  }
  if (cancelled.empty()) return;
  const auto is_cancelled = [&](const std::unique_ptr<Sequence>& seq) {
    return std::find(cancelled.begin(), cancelled.end(), seq->id) != cancelled.end();
  };
  for (auto& seq : running_)
    if (is_cancelled(seq)) finish(*seq, FinishReason::cancelled, on_event);
  for (auto& seq : waiting_)
    if (is_cancelled(seq)) finish(*seq, FinishReason::cancelled, on_event);
  std::erase_if(waiting_, is_cancelled);
}

void Scheduler::admit() {
  // First come, first served: a request that does not fit yet keeps those behind it waiting.
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_batch) {
    Sequence& seq = *waiting_.front();
    const int positions =
        std::min(seq.prompt_size() + seq.request.max_tokens, model_.context_length());
    const int reused = take_cached_prefix(seq);
    if (!cache_.allocate(cache_.blocks_for(positions) - reused, seq.blocks)) {
      cache_.release(seq.blocks);
      break;
    }
    seq.cached = seq.published = reused;
    seq.cached *= cache_.block_rows();
    counters_.prefix_hit_blocks.fetch_add(static_cast<uint64_t>(reused));
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

int Scheduler::take_cached_prefix(Sequence& seq) {
  if (!options_.prefix_caching) return 0;
  // Reuse stops at least two positions before the prompt's end: the last prompt row then runs in
  // a chunk of several rows exactly when it would without the cache (its attention sums in the
  // order of one_query or not), so a prefix hit changes no bit of the logits.
  const int reusable = std::max(seq.prompt_size() - 2, 0) / cache_.block_rows();
  int taken = 0;
  while (taken < reusable && cache_.take_cached(seq.prefix_hashes[static_cast<size_t>(taken)],
                                                seq.prompt_block(taken), seq.blocks))
    ++taken;
  counters_.prefix_lookup_blocks.fetch_add(static_cast<uint64_t>(reusable));
  return taken;
}

void Scheduler::publish_prefix(Sequence& seq) {
  const int full = std::min(seq.cached, seq.prompt_size()) / cache_.block_rows();
  for (; seq.published < full; ++seq.published)
    cache_.publish(seq.blocks, static_cast<size_t>(seq.published),
                   seq.prefix_hashes[static_cast<size_t>(seq.published)],
                   seq.prompt_block(seq.published));
}

void Scheduler::finish(Sequence& seq, FinishReason reason,
                       const std::function<void(const SequenceEvent&)>& on_event) {
  cache_.release(seq.blocks);
  seq.done = true;
  if (on_event)
    on_event(SequenceEvent{seq.id, {}, 0, -1, reason, seq.prompt_size(), seq.generated});
}

void Scheduler::emit_token(Sequence& seq, TokenId token, std::span<const float> logits,
                           const std::function<void(const SequenceEvent&)>& on_event) {
  SequenceEvent event{seq.id, {}, 0, -1, FinishReason::none, seq.prompt_size(), 0};
  const auto& stops = seq.request.stop;
  if (seq.request.stop_at_end_of_generation && tokenizer_.is_end_of_generation(token)) {
    event.finish = FinishReason::stop;
  } else {
    ++seq.generated;
    event.new_tokens = 1;
    event.token = token;
    if (seq.request.logprobs >= 0) token_logprobs(logits, token, seq.request.logprobs, event);
    counters_.generated_tokens.fetch_add(1);
    seq.history.push_back(token);
    seq.held += seq.decoder.push(token);
    if (const size_t at = first_stop(seq.held, stops); at != std::string::npos) {
      seq.held.resize(at);
      event.finish = FinishReason::stop;
    } else if (seq.generated == seq.request.max_tokens || seq.cached >= model_.context_length()) {
      event.finish = FinishReason::length;
    }
  }
  if (event.finish != FinishReason::none) {
    // Unless a stop string cut it, what the decoder still holds ends the text.
    if (event.new_tokens == 0 || event.finish == FinishReason::length) {
      seq.held += seq.decoder.flush();
      if (const size_t at = first_stop(seq.held, stops); at != std::string::npos) {
        seq.held.resize(at);
        event.finish = FinishReason::stop;
      }
    }
    event.text = std::move(seq.held);
    cache_.release(seq.blocks);
    seq.done = true;
  } else {
    const size_t keep = stop_prefix_length(seq.held, stops);
    event.text = seq.held.substr(0, seq.held.size() - keep);
    seq.held.erase(0, seq.held.size() - keep);
    seq.next = token;
  }
  event.completion_tokens = seq.generated;
  if (on_event) on_event(event);
}

bool Scheduler::step(const std::function<void(const SequenceEvent&)>& on_event) {
  const auto start = std::chrono::steady_clock::now();
  take_incoming(on_event);
  std::erase_if(running_, [](const auto& seq) { return seq->done; });
  admit();
  // Admission shows in the counters before this step's tokens do, so that a client who has seen
  // a token also sees its request out of the queue.
  update_counters();
  entries_.clear();
  entry_owner_.clear();
  // Decode rows first: one each for the sequences that are generating.
  for (auto& seq : running_)
    if (!seq->prefilling()) {
      entries_.push_back({std::span(&seq->next, 1), seq->cached, seq->blocks, true});
      entry_owner_.push_back(seq.get());
    }
  const size_t decode_rows = entries_.size();
  // Then prompt chunks, cut at multiples of prefill_chunk, while the budget lasts.
  const int budget = entries_.empty() ? options_.step_prompt_tokens
                                      : std::min(options_.step_prompt_tokens,
                                                 options_.step_prompt_tokens_decoding);
  int prompt_tokens = 0;
  for (auto& seq : running_) {
    if (!seq->prefilling()) continue;
    const int length = std::min(options_.prefill_chunk - seq->cached % options_.prefill_chunk,
                                seq->prompt_size() - seq->cached);
    if (prompt_tokens > 0 && prompt_tokens + length > budget) break;
    const bool last = seq->cached + length == seq->prompt_size();
    entries_.push_back({std::span(seq->request.prompt)
                            .subspan(static_cast<size_t>(seq->cached), static_cast<size_t>(length)),
                        seq->cached, seq->blocks, last});
    entry_owner_.push_back(seq.get());
    prompt_tokens += length;
  }
  if (entries_.empty()) {
    update_counters();
    return false;
  }
  const auto forward_start = std::chrono::steady_clock::now();
  const std::span<const float> logits = model_.forward_batch(entries_, cache_);
  const uint64_t forward_microseconds = microseconds_since(forward_start);
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  sampled_.clear();
  for (size_t e = 0, row = 0; e < entries_.size(); ++e) {
    Sequence& seq = *entry_owner_[e];
    seq.cached += static_cast<int>(entries_[e].tokens.size());
    // Blocks a chunk of several prompt rows completed join the prefix cache; one completed by a
    // single row (its attention summed in the decoding order) would not give a later prompt the
    // bits it computes itself.
    if (options_.prefix_caching && entries_[e].tokens.size() > 1) publish_prefix(seq);
    if (!entries_[e].logits) continue;
    const std::span<const float> row_logits = logits.subspan(row++ * n_vocab, n_vocab);
    sampled_.push_back({&seq, seq.sampler.sample(row_logits, seq.history), row_logits});
  }
  // The step's counters land before its tokens go out, the step's time first: a client that has
  // its last token finds the step that made it counted, and no reader sees a forward pass without
  // the step that holds it. The token events themselves fall outside the step's time.
  counters_.step_microseconds.fetch_add(microseconds_since(start));
  counters_.forward_microseconds.fetch_add(forward_microseconds);
  counters_.prompt_tokens.fetch_add(static_cast<uint64_t>(prompt_tokens));
  counters_.decode_rows.fetch_add(decode_rows);
  counters_.steps.fetch_add(1);
  for (const Sampled& s : sampled_) emit_token(*s.seq, s.token, s.logits, on_event);
  std::erase_if(running_, [](const auto& seq) { return seq->done; });
  update_counters();
  return true;
}

void Scheduler::update_counters() {
  counters_.running.store(static_cast<int>(running_.size()));
  {
    std::lock_guard lock(incoming_mutex_);
    counters_.waiting.store(static_cast<int>(waiting_.size() + incoming_.size()));
  }
  counters_.kv_blocks_used.store(cache_.used_blocks());
  counters_.kv_blocks_free.store(cache_.free_blocks());
  counters_.kv_blocks_cached.store(cache_.cached_blocks());
}

}  // namespace yirage::llm
