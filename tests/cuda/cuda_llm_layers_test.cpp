// On a GPU with the SmolLM2 file (skipped otherwise, unless YIRAGE_REQUIRE_CUDA=1 and
// YIRAGE_REQUIRE_MODEL=1): the model's hot blocks as fused kernel graphs on the cuda backend, and
// on the cpu backend, each fed the hidden states the hand-written kernels compute for a real
// prompt, layer by layer, and held to the hand-written blocks' outputs. Each block sees the
// reference's own inputs (teacher forcing), so an error is the block's, not one carried from an
// earlier layer: the whole-model test (cuda_llm_engine_test.cpp) says that the engines part, this
// one says where. Prompts of 7 and 90 tokens take the 1-, 16- and 64-row buckets.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "cuda_test_support.h"
#include "llm/cpu_blocks.h"
#include "llm/fused_blocks.h"
#include "llm/llm.h"
#include "llm/llm_model_path.h"
#include "llm/thread_pool.h"

namespace yirage::llm {
namespace {

using backend::cuda_testing::relative_l2;

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, double(std::fabs(v)));
  return m;
}

struct Candidate {
  std::string name;
  std::unique_ptr<HotBlocks> blocks;
};

// The candidate's own forward pass over the prompt, each block fed what the candidate's previous
// block gave (free running, as the engine runs it); its hidden states' departure from the
// reference's after each layer goes to `departures`, and its last row's logits are returned.
std::vector<float> free_run(HotBlocks& blocks, const LlamaConfig& c, std::vector<float> x, int n,
                            const std::vector<std::vector<float>>& reference_states,
                            std::vector<double>& departures) {
  const size_t dq = size_t(c.n_head) * c.head_dim, dkv = size_t(c.n_head_kv) * c.head_dim;
  KvCache cache(c, 512);
  for (int layer = 0; layer < c.n_layer; ++layer) {
    std::vector<float> q(n * dq), k(n * dkv), v(n * dkv), attention(n * dq);
    blocks.norm_qkv(layer, x.data(), n, q.data(), k.data(), v.data());
    blocks.attention(layer, 0, n, q.data(), k.data(), v.data(), cache, attention.data());
    blocks.output_and_mlp(layer, attention.data(), n, x.data());
    departures.push_back(relative_l2(x, reference_states[size_t(layer)]));
  }
  std::vector<float> logits(size_t(c.n_vocab));
  blocks.final_norm_lm_head(&x[size_t(n - 1) * c.n_embd], logits.data());
  return logits;
}

TEST(CudaLlmLayers, EachFusedBlockOnRealHiddenStatesMatchesTheHandWrittenBlock) {
  backend::Backend* cuda = backend::cuda_testing::cuda_or_skip();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const std::optional<std::string> path = testing::smollm2_path();
  if (!path) GTEST_SKIP() << "no SmolLM2 file";
  Llm llm =
      Llm::open(*path, LlmOptions{.threads = 2, .context_length = 512, .fused_blocks = false});
  const LlamaModel& model = llm.model();
  const LlamaConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  ThreadPool pool(2, ThreadPool::Workers::own);
  const std::unique_ptr<backend::Backend> cpu = backend::create_backend("cpu", {.threads = 2});
  std::unique_ptr<HotBlocks> reference = make_cpu_blocks(c, w, 512, pool, model.kernels());
  std::vector<Candidate> candidates;
  for (backend::Backend* b : {cuda, cpu.get()}) {
    FusedBlockOptions options;
    options.backend = b;
    Candidate cand{
        std::string(b->name()),
        make_fused_blocks(c, w, make_cpu_blocks(c, w, 512, pool, model.kernels()), options)};
    candidates.push_back(std::move(cand));
  }

  std::string prompt_90;
  for (int i = 0; prompt_90.empty() || llm.tokenizer().encode(prompt_90).size() < 90; ++i)
    prompt_90 += " The quick brown fox jumps over the lazy dog " + std::to_string(i) + ".";
  for (const std::string& prompt : {std::string("The capital of France is"), prompt_90}) {
    std::vector<TokenId> ids = llm.tokenizer().encode(prompt);
    ids.resize(std::min<size_t>(ids.size(), 90));
    const int n = int(ids.size());
    const size_t dq = size_t(c.n_head) * c.head_dim, dkv = size_t(c.n_head_kv) * c.head_dim;
    std::vector<float> x(ids.size() * size_t(c.n_embd));
    model.embed(ids, x.data());
    const std::vector<float> embedded = x;
    std::vector<std::vector<float>> states;
    KvCache cache(c, 512);
    for (int layer = 0; layer < c.n_layer; ++layer) {
      std::vector<float> q(n * dq), k(n * dkv), v(n * dkv), attention(n * dq);
      reference->norm_qkv(layer, x.data(), n, q.data(), k.data(), v.data());
      for (Candidate& cand : candidates) {
        std::vector<float> q2(q.size()), k2(k.size()), v2(v.size());
        cand.blocks->norm_qkv(layer, x.data(), n, q2.data(), k2.data(), v2.data());
        for (const auto& [what, got, want] :
             {std::tuple{"q", &q2, &q}, {"k", &k2, &k}, {"v", &v2, &v}}) {
          const double e = relative_l2(*got, *want);
          std::printf("%d rows, layer %2d, %-4s norm_qkv %s: relative L2 %.3g (|x| max %.3g)\n", n,
                      layer, cand.name.c_str(), what, e, max_abs(x));
          EXPECT_LE(e, 1e-3) << cand.name << " norm_qkv " << what << ", layer " << layer << ", "
                             << n << " rows";
        }
      }
      reference->attention(layer, 0, n, q.data(), k.data(), v.data(), cache, attention.data());
      std::vector<float> next = x;
      reference->output_and_mlp(layer, attention.data(), n, next.data());
      for (Candidate& cand : candidates) {
        std::vector<float> got = x;
        cand.blocks->output_and_mlp(layer, attention.data(), n, got.data());
        const double e = relative_l2(got, next);
        std::printf("%d rows, layer %2d, %-4s output_and_mlp: relative L2 %.3g (|attn| max %.3g)\n",
                    n, layer, cand.name.c_str(), e, max_abs(attention));
        EXPECT_LE(e, 1e-3) << cand.name << " output_and_mlp, layer " << layer << ", " << n
                           << " rows";
      }
      x = std::move(next);
      states.push_back(x);
    }
    const std::vector<float> last(x.end() - c.n_embd, x.end());
    std::vector<float> logits(size_t(c.n_vocab));
    reference->final_norm_lm_head(last.data(), logits.data());
    for (Candidate& cand : candidates) {
      std::vector<float> got(logits.size());
      cand.blocks->final_norm_lm_head(last.data(), got.data());
      const double e = relative_l2(got, logits);
      std::printf("%d rows, %-4s final_norm_lm_head: relative L2 %.3g\n", n, cand.name.c_str(), e);
      EXPECT_LE(e, 1e-3) << cand.name << " final_norm_lm_head, " << n << " rows";
      std::vector<double> departures;
      const std::vector<float> free_logits =
          free_run(*cand.blocks, c, embedded, n, states, departures);
      for (size_t layer = 0; layer < departures.size(); ++layer)
        std::printf("%d rows, %-4s free running, after layer %2zu: relative L2 %.3g\n", n,
                    cand.name.c_str(), layer, departures[layer]);
      std::printf("%d rows, %-4s free running, logits: relative L2 %.3g\n", n, cand.name.c_str(),
                  relative_l2(free_logits, logits));
    }
  }
}

}  // namespace
}  // namespace yirage::llm
