// Serving many sequences at once: the paged KV cache's pool, batched steps (forward_batch), and
// the continuous-batching scheduler, on a tiny generated model and on SmolLM2 when it is present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "llm/llm.h"
#include "llm_model_path.h"
#include "llm_test_backend.h"
#include "llm_tiny_model.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using test_util::error_of;
using ::testing::HasSubstr;

LlamaConfig tiny_config() {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head_kv = 2;
  c.head_dim = 16;
  return c;
}

// --- the block pool ---

TEST(PagedKvCache, BudgetSetsTheBlockCountAndAccountingReturnsToZero) {
  const LlamaConfig c = tiny_config();
  // A block of 16 positions: 2 layers × (K, V) × 16 × 32 floats = 8 KiB.
  PagedKvCache cache(c, 5 * 8192 + 100, 16);
  EXPECT_EQ(cache.block_bytes(), 8192u);
  EXPECT_EQ(cache.total_blocks(), 5);
  EXPECT_EQ(cache.blocks_for(16), 1);
  EXPECT_EQ(cache.blocks_for(17), 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(cache.allocate(3, a));
  EXPECT_EQ(cache.used_blocks(), 3);
  // Exhaustion is an answer, not a crash, and takes nothing.
  EXPECT_FALSE(cache.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(cache.free_blocks(), 2);
  ASSERT_TRUE(cache.allocate(2, b));
  EXPECT_EQ(cache.free_blocks(), 0);
  cache.release(a);
  EXPECT_TRUE(a.empty());
  std::vector<int32_t> stale = b;
  cache.release(b);
  EXPECT_EQ(cache.used_blocks(), 0);
  EXPECT_THAT(error_of([&] { cache.release(stale); }), HasSubstr("released but not taken"));
}

TEST(PagedKvCache, ABudgetBelowOneBlockIsAnError) {
  EXPECT_THAT(error_of([] { PagedKvCache(tiny_config(), 8191, 16); }),
              HasSubstr("KV memory 8191 bytes holds no block of 16 positions (8192 bytes each)"));
}

TEST(PagedKvCache, SequencesWriteOnlyTheirOwnBlocks) {
  PagedKvCache cache(tiny_config(), 4 * 8192, 16);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(cache.allocate(2, a));
  ASSERT_TRUE(cache.allocate(2, b));
  for (int pos = 0; pos < 32; ++pos) {
    cache.k_row(1, a.data(), pos)[3] = 1000.0f + pos;
    cache.k_row(1, b.data(), pos)[3] = 2000.0f + pos;
  }
  for (int pos = 0; pos < 32; ++pos) {
    EXPECT_EQ(cache.k_row(1, a.data(), pos)[3], 1000.0f + pos);
    EXPECT_EQ(cache.k_row(1, b.data(), pos)[3], 2000.0f + pos);
  }
}

TEST(PagedKvCache, PublishedBlocksAreSharedThenCachedThenEvictedLeastRecentlyUsed) {
  PagedKvCache cache(tiny_config(), 4 * 8192, 16);
  std::vector<int32_t> t0(16, 7), t1(16, 8), other(16, 9);
  const uint64_t h0 = PagedKvCache::chain_hash(0, t0), h1 = PagedKvCache::chain_hash(h0, t1);
  std::vector<int32_t> a;
  ASSERT_TRUE(cache.allocate(2, a));
  cache.publish(a, 0, h0, t0);
  cache.publish(a, 1, h1, t1);
  const std::vector<int32_t> published = a;
  cache.release(a);
  EXPECT_EQ(cache.used_blocks(), 0);
  EXPECT_EQ(cache.cached_blocks(), 2);
  EXPECT_EQ(cache.free_blocks(), 4);
  // Another sequence with the same prefix takes the same blocks.
  std::vector<int32_t> b;
  EXPECT_FALSE(cache.take_cached(h0, other, b));  // the tokens must match, not only the hash
  ASSERT_TRUE(cache.take_cached(h0, t0, b));
  ASSERT_TRUE(cache.take_cached(h1, t1, b));
  EXPECT_EQ(b, published);
  EXPECT_EQ(cache.used_blocks(), 2);
  EXPECT_EQ(cache.cached_blocks(), 0);
  // A second holder: the block stays taken until both let go.
  std::vector<int32_t> c;
  ASSERT_TRUE(cache.take_cached(h0, t0, c));
  cache.release(b);
  EXPECT_EQ(cache.used_blocks(), 1);
  cache.release(c);
  // Allocation uses never-published blocks first, then evicts the least recently used prefix:
  // block h1 went idle before h0, so it goes first.
  std::vector<int32_t> d;
  ASSERT_TRUE(cache.allocate(3, d));
  EXPECT_EQ(cache.cached_blocks(), 1);
  std::vector<int32_t> e;
  EXPECT_TRUE(cache.take_cached(h0, t0, e));
  EXPECT_FALSE(cache.take_cached(h1, t1, e));
  cache.release(d);
  cache.release(e);
  EXPECT_EQ(cache.used_blocks(), 0);
}

// --- the scheduler ---

struct Outcome {
  std::vector<TokenId> ids;
  std::string text;
  FinishReason finish = FinishReason::none;
  int events = 0;
};

// Runs every request through `scheduler` until all have finished; checks on every step that no
// more than `max_running` run at once.
std::vector<Outcome> run_all(Scheduler& scheduler, std::vector<SequenceRequest> requests,
                             int max_running = 1 << 30) {
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) index[scheduler.submit(requests[i])] = i;
  std::vector<Outcome> out(requests.size());
  size_t finished = 0;
  uint64_t steps = scheduler.counters().steps.load();
  while (finished < requests.size()) {
    const bool worked = scheduler.step([&](const SequenceEvent& e) {
      // A step's counters are in before its tokens go out (a server's client reads them then).
      const SchedulerCounters& c = scheduler.counters();
      EXPECT_EQ(c.steps.load(), steps + 1);
      EXPECT_GE(c.step_microseconds.load(), c.forward_microseconds.load());
      Outcome& o = out.at(index.at(e.id));
      ++o.events;
      if (e.new_tokens == 1) o.ids.push_back(e.token);
      o.text += e.text;
      if (e.finish != FinishReason::none) {
        o.finish = e.finish;
        ++finished;
      }
    });
    EXPECT_LE(scheduler.counters().running.load(), max_running);
    steps += worked;
    if (!worked) ADD_FAILURE() << "the scheduler idled with requests unfinished";
    if (!worked) break;
  }
  return out;
}

class TinyServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ =
        new std::filesystem::path(std::filesystem::temp_directory_path() /
                                  ("yirage_tiny_batch_" + std::to_string(::getpid()) + ".gguf"));
    const std::vector<std::byte> bytes = testing::write_tiny_llama(testing::TinyLlama{});
    std::ofstream(*path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    llm_ = new Llm(Llm::open(
        path_->string(),
        LlmOptions{.threads = 2, .context_length = 96, .backend = testing::cpu_backend(2)}));
  }
  static void TearDownTestSuite() {
    delete llm_;
    std::filesystem::remove(*path_);
    delete path_;
  }

  static SequenceRequest request(const std::string& prompt, int max_tokens, float temperature = 0,
                                 uint64_t seed = 0) {
    SequenceRequest r;
    r.prompt = llm_->tokenizer().encode(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.stop_at_end_of_generation = false;
    return r;
  }

  static SchedulerOptions options(int max_batch, size_t kv_bytes = size_t{8} << 20) {
    SchedulerOptions o;
    o.kv_memory_bytes = kv_bytes;
    o.max_batch = max_batch;
    o.prefill_chunk = 8;  // several chunks per prompt, so chunks meet decode rows in a step
    o.step_prompt_tokens = 16;
    return o;
  }

  static inline std::filesystem::path* path_ = nullptr;
  static inline Llm* llm_ = nullptr;
};

const std::vector<std::string> kPrompts = {"hello hello", "the cat sat on", "a b c d e f g h i j k",
                                           "zz"};

TEST_F(TinyServe, BatchedGreedyDecodingEqualsEachSequenceAloneAndGenerate) {
  std::vector<SequenceRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(request(kPrompts[i], 12));
  Scheduler together(llm_->model(), llm_->tokenizer(), options(3));
  const std::vector<Outcome> batched = run_all(together, requests);
  GenerateOptions g;
  g.max_tokens = 12;
  g.stop_at_end_of_generation = false;
  for (int i = 0; i < 3; ++i) {
    Scheduler alone(llm_->model(), llm_->tokenizer(), options(1));
    const Outcome single = run_all(alone, {requests[i]}).at(0);
    EXPECT_EQ(batched[i].ids, single.ids) << kPrompts[i];
    EXPECT_EQ(batched[i].text, single.text);
    EXPECT_EQ(batched[i].ids.size(), 12u);
    EXPECT_EQ(batched[i].finish, FinishReason::length);
    EXPECT_EQ(llm_->generate_detailed(kPrompts[i], g).ids, single.ids) << kPrompts[i];
  }
  EXPECT_EQ(together.cache().used_blocks(), 0);
  EXPECT_EQ(together.counters().kv_blocks_used.load(), 0);
  EXPECT_EQ(together.counters().generated_tokens.load(), 36u);
}

TEST_F(TinyServe, SeededSamplingGivesTheSameTokensInBatchesOf1_3And16) {
  auto seeded = [&](int i) { return request(kPrompts[i % 4], 6, 0.9f, 100 + i); };
  std::vector<Outcome> alone;
  for (int i = 0; i < 16; ++i) {
    Scheduler s(llm_->model(), llm_->tokenizer(), options(1));
    alone.push_back(run_all(s, {seeded(i)}).at(0));
  }
  for (int size : {3, 16}) {
    std::vector<SequenceRequest> batch;
    for (int i = 0; i < size; ++i) batch.push_back(seeded(i));
    Scheduler s(llm_->model(), llm_->tokenizer(), options(16));
    const std::vector<Outcome> got = run_all(s, batch);
    for (int i = 0; i < size; ++i) EXPECT_EQ(got[i].ids, alone[i].ids) << size << " " << i;
  }
  // The seeds matter: not every request drew the same tokens.
  bool differ = false;
  for (int i = 4; i < 16; ++i) differ |= alone[i].ids != alone[i % 4].ids;
  EXPECT_TRUE(differ);
}

TEST_F(TinyServe, AFullPoolMakesRequestsWaitAndEveryOneFinishes) {
  // Room for one request's blocks at a time: the others wait, then run as blocks come back.
  const LlamaConfig& c = llm_->model().config();
  const size_t block = size_t{2} * c.n_layer * 16 * c.n_head_kv * c.head_dim * sizeof(float);
  Scheduler s(llm_->model(), llm_->tokenizer(), options(4, 2 * block));
  std::vector<SequenceRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(request(kPrompts[i], 10));
  const std::vector<Outcome> got = run_all(s, requests, 1);
  for (const Outcome& o : got) EXPECT_EQ(o.ids.size(), 10u);
  EXPECT_EQ(s.cache().used_blocks(), 0);
  // A request that can never fit is refused at once.
  EXPECT_THAT(error_of([&] { s.submit(request(kPrompts[0], 80)); }), HasSubstr("KV blocks"));
}

TEST_F(TinyServe, WhileSequencesDecodeAStepTakesFewerPromptTokens) {
  // Prompts of one chunk each: with nothing decoding, a step takes as many as its budget holds;
  // once sequences decode, what the decoding budget holds, and at least one chunk (here, with a
  // budget of 1, exactly one prompt a step).
  SchedulerOptions o = options(8);
  o.prefill_chunk = 32;
  o.step_prompt_tokens = 64;
  o.step_prompt_tokens_decoding = 1;
  Scheduler s(llm_->model(), llm_->tokenizer(), o);
  const auto prompt_tokens_of_one_step = [&] {
    const uint64_t before = s.counters().prompt_tokens.load();
    EXPECT_TRUE(s.step(nullptr));
    return s.counters().prompt_tokens.load() - before;
  };
  const SequenceRequest first = request("hello hello", 20), second = request("the cat sat on", 20);
  ASSERT_LE(first.prompt.size() + second.prompt.size(), 64u);
  s.submit(first);
  s.submit(second);
  EXPECT_EQ(prompt_tokens_of_one_step(), first.prompt.size() + second.prompt.size());
  std::vector<SequenceRequest> waiting;
  for (const char* p : {"zz top", "a b c", "the cat"}) {
    waiting.push_back(request(p, 4));
    ASSERT_LE(waiting.back().prompt.size(), 32u);
    s.submit(waiting.back());
  }
  for (const SequenceRequest& r : waiting) EXPECT_EQ(prompt_tokens_of_one_step(), r.prompt.size());
  // Every request still finishes, and the pool empties.
  while (s.step(nullptr)) {
  }
  EXPECT_EQ(s.cache().used_blocks(), 0);
  EXPECT_EQ(s.counters().generated_tokens.load(), 20u + 20u + 3 * 4u);
}

TEST_F(TinyServe, APromptPrefixIsTakenFromTheCacheWithTheSameTokens) {
  // 40 and more tokens: two full blocks of 16 to share, prefilled in chunks of 8.
  const std::string system = "a b c d e f g h i j k l m n o p q r s t ";
  std::vector<SequenceRequest> requests;
  for (const char* tail : {"hello hello", "the cat sat on", "zz"})
    requests.push_back(request(system + tail, 6));
  SchedulerOptions no_cache = options(1);
  no_cache.prefix_caching = false;
  Scheduler cold(llm_->model(), llm_->tokenizer(), no_cache);
  Scheduler warm(llm_->model(), llm_->tokenizer(), options(1));
  for (const SequenceRequest& r : requests) {
    ASSERT_GE(r.prompt.size(), 34u);
    const uint64_t hits = warm.counters().prefix_hit_blocks.load();
    EXPECT_EQ(run_all(warm, {r}).at(0).ids, run_all(cold, {r}).at(0).ids);
    if (&r != &requests[0]) {
      EXPECT_GE(warm.counters().prefix_hit_blocks.load(), hits + 2);
    }
  }
  EXPECT_EQ(warm.counters().prefix_hit_blocks.load(), 4u);
  EXPECT_EQ(cold.counters().prefix_hit_blocks.load(), 0u);
  EXPECT_EQ(warm.cache().used_blocks(), 0);
  EXPECT_GT(warm.cache().cached_blocks(), 0);
  // The same prompt again, running beside others, still draws the same tokens.
  const std::vector<Outcome> again = run_all(warm, requests);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(again[i].ids, run_all(cold, {requests[i]}).at(0).ids);
}

TEST_F(TinyServe, CachedPrefixesGiveWayWhenThePoolIsFull) {
  const LlamaConfig& c = llm_->model().config();
  const size_t block = size_t{2} * c.n_layer * 16 * c.n_head_kv * c.head_dim * sizeof(float);
  Scheduler s(llm_->model(), llm_->tokenizer(), options(1, 5 * block));
  const std::string system = "a b c d e f g h i j k l m n o p q r s t ";
  const Outcome first = run_all(s, {request(system + "hello", 10)}).at(0);
  EXPECT_GT(s.cache().cached_blocks(), 0);
  // A different prompt needs every block: the cached prefix is evicted, nothing fails.
  SequenceRequest other = request("zz zz zz zz zz zz zz zz zz zz zz zz zz", 1);
  other.max_tokens = 5 * 16 - static_cast<int>(other.prompt.size());
  EXPECT_EQ(run_all(s, {other}).at(0).ids.size(), static_cast<size_t>(other.max_tokens));
  // The first prompt's blocks are gone: it is computed again, to the same tokens.
  const uint64_t hits = s.counters().prefix_hit_blocks.load();
  EXPECT_EQ(run_all(s, {request(system + "hello", 10)}).at(0).ids, first.ids);
  EXPECT_EQ(s.counters().prefix_hit_blocks.load(), hits);
  EXPECT_EQ(s.cache().used_blocks(), 0);
}

TEST_F(TinyServe, CancelFreesTheBlocksAtTheNextStep) {
  Scheduler s(llm_->model(), llm_->tokenizer(), options(4));
  const uint64_t id = s.submit(request(kPrompts[1], 50));
  s.step({});
  s.step({});
  EXPECT_GT(s.cache().used_blocks(), 0);
  s.cancel(id);
  FinishReason reason = FinishReason::none;
  s.step([&](const SequenceEvent& e) { reason = e.finish; });
  EXPECT_EQ(reason, FinishReason::cancelled);
  EXPECT_EQ(s.cache().used_blocks(), 0);
  EXPECT_EQ(s.counters().running.load(), 0);
}

TEST_F(TinyServe, StopStringsEndTheTextBeforeThem) {
  Scheduler s(llm_->model(), llm_->tokenizer(), options(2));
  const Outcome full = run_all(s, {request(kPrompts[0], 12)}).at(0);
  ASSERT_GE(full.text.size(), 4u);
  SequenceRequest r = request(kPrompts[0], 12);
  const std::string stop = full.text.substr(2, 2);
  r.stop = {stop};
  const Outcome cut = run_all(s, {r}).at(0);
  EXPECT_EQ(cut.finish, FinishReason::stop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST_F(TinyServe, LogprobsDescribeTheModelsDistribution) {
  Scheduler s(llm_->model(), llm_->tokenizer(), options(2));
  SequenceRequest r = request(kPrompts[1], 5);
  r.logprobs = 3;
  const uint64_t id = s.submit(r);
  int events = 0;
  while (s.step([&](const SequenceEvent& e) {
    ASSERT_EQ(e.id, id);
    if (e.new_tokens == 0) return;
    ++events;
    ASSERT_EQ(e.top_logprobs.size(), 3u);
    // Greedy: the token is the most likely one; the alternatives come best first, and their
    // probabilities are a part of one.
    EXPECT_EQ(e.top_logprobs[0].first, e.token);
    EXPECT_EQ(e.top_logprobs[0].second, e.logprob);
    double mass = 0;
    for (size_t i = 0; i < e.top_logprobs.size(); ++i) {
      EXPECT_LE(e.top_logprobs[i].second, 0.0f);
      if (i > 0) {
        EXPECT_LE(e.top_logprobs[i].second, e.top_logprobs[i - 1].second);
      }
      mass += std::exp(e.top_logprobs[i].second);
    }
    EXPECT_LE(mass, 1.0 + 1e-6);
  })) {
  }
  EXPECT_EQ(events, 5);
}

TEST_F(TinyServe, BadRequestsAreOneLineErrors) {
  Scheduler s(llm_->model(), llm_->tokenizer(), options(2));
  EXPECT_THAT(error_of([&] { s.submit(request("", 4)); }), HasSubstr("the prompt is empty"));
  SequenceRequest long_prompt = request(kPrompts[0], 4);
  long_prompt.prompt.assign(97, long_prompt.prompt[0]);
  EXPECT_THAT(error_of([&] { s.submit(long_prompt); }),
              HasSubstr("the prompt has 97 tokens, more than the context of 96"));
  EXPECT_THAT(error_of([&] { s.submit(request(kPrompts[0], 0)); }),
              HasSubstr("max tokens 0 must be at least 1"));
  SequenceRequest bad_top_p = request(kPrompts[0], 4);
  bad_top_p.sampling.top_p = 0;
  EXPECT_THAT(error_of([&] { s.submit(bad_top_p); }), HasSubstr("top-p 0 must be greater than 0"));
}

// --- SmolLM2 ---

TEST(SmolLm2Serve, BatchedGreedyEqualsGenerate) {
  const std::optional<std::string> path = testing::smollm2_path();
  if (!path) GTEST_SKIP() << testing::kModelSkipReason;
  Llm llm = Llm::open(
      *path, LlmOptions{.threads = 2, .context_length = 256, .backend = testing::cpu_backend(2)});
  const std::vector<std::string> prompts = {"The capital of France is", "1, 2, 3, 4,",
                                            "Once upon a time"};
  SchedulerOptions o;
  o.kv_memory_bytes = size_t{64} << 20;
  Scheduler s(llm.model(), llm.tokenizer(), o);
  std::vector<SequenceRequest> requests;
  for (const std::string& p : prompts) {
    SequenceRequest r;
    r.prompt = llm.tokenizer().encode(p, EncodeOptions{.add_special = true, .parse_special = true});
    r.max_tokens = 8;
    requests.push_back(r);
  }
  const std::vector<Outcome> got = run_all(s, requests);
  GenerateOptions g;
  g.max_tokens = 8;
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got[i].ids, llm.generate_detailed(prompts[i], g).ids) << prompts[i];
  EXPECT_EQ(s.cache().used_blocks(), 0);
}

}  // namespace
}  // namespace yirage::llm
