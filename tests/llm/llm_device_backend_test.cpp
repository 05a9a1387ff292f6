// The engine on a backend whose buffers the host cannot address, as a GPU's are, tested without
// a GPU: a test backend in this file runs the cpu backend's modules behind buffers that only copy
// in and out. It checks what the engine does differently there: the weights written into the
// backend's buffers once, at load; per step only the activations copied; the logits those of the
// reference; and a model the backend cannot run refused with the reason, never handed to the
// host's kernels.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "llm/llm.h"
#include "llm_test_backend.h"
#include "llm_tiny_model.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::llm {
namespace {

using ::testing::HasSubstr;
using testing::kTinyPrompt;
using testing::reference_logits;
using testing::TinyLlama;
using testing::write_tiny_llama;

// What the backend's buffers were asked to take from the host.
struct CopyLedger {
  size_t bytes_written = 0;
  size_t writes = 0;
  std::vector<size_t> write_sizes;
  size_t synchronizes = 0;
  std::vector<size_t> launch_output_bytes;  // per launch, its outputs' bytes together
};

class CopyingBuffer final : public backend::Buffer {
 public:
  CopyingBuffer(std::unique_ptr<backend::Buffer> inner, CopyLedger& ledger)
      : inner_(std::move(inner)), ledger_(ledger) {}
  size_t size() const override { return inner_->size(); }
  void write(std::span<const std::byte> bytes) override {
    ledger_.bytes_written += bytes.size();
    ++ledger_.writes;
    ledger_.write_sizes.push_back(bytes.size());
    inner_->write(bytes);
  }
  void read(std::span<std::byte> bytes) const override { inner_->read(bytes); }
  // host_address() keeps the default: the host cannot address this memory.
  backend::Buffer& inner() { return *inner_; }

 private:
  std::unique_ptr<backend::Buffer> inner_;
  CopyLedger& ledger_;
};

class CopyingModule final : public backend::Module {
 public:
  CopyingModule(std::unique_ptr<backend::Module> inner, CopyLedger& ledger)
      : inner_(std::move(inner)), ledger_(ledger) {}
  void launch(std::span<backend::Buffer* const> inputs,
              std::span<backend::Buffer* const> outputs) override {
    const std::vector<backend::Buffer*> in = unwrapped(inputs), out = unwrapped(outputs);
    size_t bytes = 0;
    for (const backend::Buffer* b : out) bytes += b->size();
    ledger_.launch_output_bytes.push_back(bytes);
    inner_->launch(in, out);
  }

 private:
  static std::vector<backend::Buffer*> unwrapped(std::span<backend::Buffer* const> buffers) {
    std::vector<backend::Buffer*> inner;
    for (backend::Buffer* b : buffers) {
      auto* copying = dynamic_cast<CopyingBuffer*>(b);
      if (!copying) fail("copying backend: a launch was given a buffer it did not allocate");
      inner.push_back(&copying->inner());
    }
    return inner;
  }
  std::unique_ptr<backend::Module> inner_;
  CopyLedger& ledger_;
};

class CopyingBackend final : public backend::Backend {
 public:
  explicit CopyingBackend(CopyLedger& ledger)
      : cpu_(backend::create_backend("cpu", {.threads = 2})), ledger_(ledger) {}
  std::string_view name() const override { return "copying"; }
  backend::Availability availability() const override { return {true, {}}; }
  backend::DeviceDescription device() const override {
    backend::DeviceDescription d = cpu_->device();
    d.fingerprint = "copying-" + d.fingerprint;
    return d;
  }
  backend::BufferType buffer_type() const override {
    return {.host_visible = false, .alignment = 64};
  }
  std::unique_ptr<backend::Buffer> allocate(size_t bytes) override {
    return std::make_unique<CopyingBuffer>(cpu_->allocate(bytes), ledger_);
  }
  std::unique_ptr<backend::Module> compile(const ir::KernelGraph& graph) override {
    return std::make_unique<CopyingModule>(cpu_->compile(graph), ledger_);
  }
  void synchronize() override { ++ledger_.synchronizes; }
  std::string codegen_settings() const override { return cpu_->codegen_settings(); }

 private:
  std::unique_ptr<backend::Backend> cpu_;
  CopyLedger& ledger_;
};

size_t matrix_bytes(const Linear& w) {
  return static_cast<size_t>(w.rows) * w.row_bytes;
}

// Bytes of the weights the block graphs read: every layer's matrices and norms, the final norm
// and the LM head.
size_t block_weight_bytes(const LlamaWeights& w) {
  size_t bytes = matrix_bytes(w.output) + w.output_norm.size() * sizeof(float);
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down})
      bytes += matrix_bytes(*m);
    bytes += (l.attn_norm.size() + l.ffn_norm.size()) * sizeof(float);
  }
  return bytes;
}

// The largest |a[i] - b[i]| over the first n elements, and the largest |a[i]|.
template <typename A, typename B>
double max_difference(const A& a, const B& b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}
template <typename A>
double max_magnitude(const A& a) {
  double worst = 0;
  for (const auto& x : a) worst = std::max(worst, std::abs(double(x)));
  return worst;
}

class DeviceBackend : public ::testing::Test {
 protected:
  CopyLedger ledger_;
  CopyingBackend backend_{ledger_};
};

// One load (optimizing seven graphs for a backend of its own takes a while), every check on it;
// with attention on the host, as it ran before attention went onto the backend.
TEST_F(DeviceBackend, WeightsAreWrittenOnceEachStepCopiesOnlyActivationsAndTheLogitsHold) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});  // Q4_1, Q8_0 LM head
  GgufFile file = GgufFile::from_memory(bytes);
  const auto want = reference_logits(file, kTinyPrompt);

  std::vector<std::string> progress;
  LlamaModel model(
      file, ModelOptions{.threads = 2,
                         .context_length = 64,
                         .backend = &backend_,
                         .attention_on_backend = false,
                         .search_seconds = 0.2,
                         .progress = [&](const std::string& line) { progress.push_back(line); }});
  EXPECT_EQ(model.hot_path(), "fused kernel graphs on the copying backend, attention on the host");
  // Nine graphs optimized, the LM head for the three buckets of more than one row, then the copy
  // of the weights, reported as it goes.
  ASSERT_EQ(progress.size(), 9u + 3u + 2u);
  EXPECT_THAT(progress[9], HasSubstr("[1/3] final norm + lm head, 64 rows"));
  EXPECT_THAT(progress.back(), HasSubstr("weights to the copying backend: 2/2 layers"));

  // Loading optimized the graphs (whose checks write inputs too) and then placed the weights: the
  // last writes of the load are exactly the weights, one write each.
  const LlamaConfig& c = model.config();
  const size_t weights = block_weight_bytes(model.weights());
  const size_t weight_tensors = size_t(c.n_layer) * 9 + 2;
  ASSERT_GE(ledger_.write_sizes.size(), weight_tensors);
  size_t placed = 0;
  for (size_t i = ledger_.write_sizes.size() - weight_tensors; i < ledger_.write_sizes.size(); ++i)
    placed += ledger_.write_sizes[i];
  EXPECT_EQ(placed, weights);

  // The prompt, then one decode step: only activations cross, each once a launch.
  const size_t dq = size_t(c.n_head) * c.head_dim;
  const auto activation_bytes = [&](int rows) {
    return (size_t(c.n_layer) * rows * (2 * size_t(c.n_embd) + dq) + size_t(c.n_embd)) *
           sizeof(float);  // per layer x, attention and x again; then the LM head's one row
  };
  ledger_ = {};
  const std::span<const TokenId> prompt(kTinyPrompt);
  const int n = static_cast<int>(prompt.size()) - 1;
  model.forward(prompt.first(size_t(n)));
  EXPECT_EQ(ledger_.bytes_written, activation_bytes(n));
  ledger_ = {};
  const std::span<const float> step = model.forward(prompt.last(1));
  const std::vector<float> logits(step.begin(), step.end());
  EXPECT_EQ(ledger_.bytes_written, activation_bytes(1));
  EXPECT_EQ(ledger_.writes, size_t(c.n_layer) * 3 + 1);
  // A launch's outputs are read back after the device has finished it.
  EXPECT_EQ(ledger_.synchronizes, size_t(c.n_layer) * 2 + 1);

  // The logits: the reference's, within what the quantized activations allow (the Forward test's
  // tolerance), and the cpu backend's, within what another choice of fused kernels changes.
  LlamaModel on_cpu(
      file, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  const std::span<const float> cpu_logits = on_cpu.forward(kTinyPrompt);
  const size_t n_vocab = want.back().size();
  const double to_reference = max_difference(logits, want.back(), n_vocab),
               to_cpu = max_difference(logits, cpu_logits, n_vocab),
               scale = max_magnitude(want.back());
  EXPECT_GT(scale, 1.0);
  EXPECT_LE(to_reference, 0.03 * scale);
  EXPECT_LE(to_cpu, 1e-3 * scale);

  // A batched step of five sequences (the whole prompt three times, its first half twice): the LM
  // head runs on the device in buckets of rows, here one launch of 4 rows and one of 1 (each
  // wanted row's input written once), and each row's logits are the single sequence's up to
  // another row bucket's fused kernels.
  PagedKvCache paged(c, 8 * 8192, 16);
  const std::span<const TokenId> half = prompt.first(prompt.size() / 2);
  const std::vector<std::span<const TokenId>> sequences = {prompt, half, prompt, prompt, half};
  std::vector<std::vector<int32_t>> blocks(sequences.size());
  std::vector<BatchEntry> batch;
  int batch_rows = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    ASSERT_TRUE(paged.allocate(paged.blocks_for(int(sequences[i].size())), blocks[i]));
    batch.push_back({sequences[i], 0, blocks[i], true});
    batch_rows += int(sequences[i].size());
  }
  ledger_ = {};
  const std::span<const float> rows = model.forward_batch(batch, paged);
  EXPECT_EQ(ledger_.bytes_written,
            activation_bytes(batch_rows) + 4 * size_t(c.n_embd) * sizeof(float));
  const size_t logit_row = size_t(c.n_vocab) * sizeof(float);
  ASSERT_GE(ledger_.launch_output_bytes.size(), 2u);
  EXPECT_THAT(
      std::vector<size_t>(ledger_.launch_output_bytes.end() - 2, ledger_.launch_output_bytes.end()),
      ::testing::ElementsAre(4 * logit_row, logit_row));
  ASSERT_EQ(rows.size(), sequences.size() * size_t(c.n_vocab));
  for (size_t i : {0, 2, 3})
    EXPECT_LE(max_difference(rows.subspan(i * n_vocab), logits, n_vocab), 1e-3 * scale) << i;
  EXPECT_LE(max_difference(rows.subspan(4 * n_vocab), rows.subspan(n_vocab), n_vocab),
            1e-3 * scale);
}

// The bucket of rows a chunk of `rows` runs in (fused_blocks.cpp's kRowBuckets).
size_t bucket_of(size_t rows) {
  for (size_t b : {1, 4, 16, 64})
    if (rows <= b) return b;
  return 64;
}

// Attention on the backend (the default there): RoPE, the KV pool and attention are a graph of
// the backend's, so a step writes x, the block table and the positions once, not every layer,
// and synchronizes once; the logits are the reference's and the host attention's, alone and
// batched; and the cpu backend gives the same when asked to run attention as a graph too.
TEST_F(DeviceBackend, AttentionOnTheBackendCopiesXOnceAStepAndTheLogitsHold) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});
  GgufFile file = GgufFile::from_memory(bytes);
  const auto want = reference_logits(file, kTinyPrompt);
  std::vector<std::string> progress;
  LlamaModel model(
      file, ModelOptions{.threads = 2,
                         .context_length = 64,
                         .backend = &backend_,
                         .search_seconds = 0.2,
                         .progress = [&](const std::string& line) { progress.push_back(line); }});
  EXPECT_EQ(model.hot_path(),
            "fused kernel graphs on the copying backend, attention on the backend");
  // Nine block graphs, the LM head's three more buckets, the weights' two lines, then the
  // attention graph per bucket of rows.
  ASSERT_EQ(progress.size(), 9u + 3u + 2u + 4u);
  EXPECT_THAT(progress.back(), HasSubstr("rope + paged attention, 1 rows, 4 KV blocks"));

  const LlamaConfig& c = model.config();
  const size_t max_blocks = 4;  // 64 positions in blocks of 16
  const auto step_bytes = [&](size_t rows) {
    const size_t b = bucket_of(rows);
    return b * (size_t(c.n_embd) * sizeof(float) + max_blocks * 4 + 2 * 4) +
           size_t(c.n_embd) * sizeof(float);  // x, table, positions twice; the LM head's row
  };
  const std::span<const TokenId> prompt(kTinyPrompt);
  const size_t n = prompt.size() - 1;
  ledger_ = {};
  model.forward(prompt.first(n));
  EXPECT_EQ(ledger_.bytes_written, step_bytes(n));
  ledger_ = {};
  const std::span<const float> step = model.forward(prompt.last(1));
  const std::vector<float> logits(step.begin(), step.end());
  EXPECT_EQ(ledger_.bytes_written, step_bytes(1));
  EXPECT_EQ(ledger_.writes, 4u + 1u);
  EXPECT_EQ(ledger_.synchronizes, 1u + 1u);

  LlamaModel on_cpu(
      file, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  const std::span<const float> host_attention = on_cpu.forward(kTinyPrompt);
  const std::vector<float> cpu_logits(host_attention.begin(), host_attention.end());
  LlamaModel graph_on_cpu(file, ModelOptions{.threads = 2,
                                             .context_length = 64,
                                             .backend = testing::cpu_backend(),
                                             .attention_on_backend = true});
  EXPECT_EQ(graph_on_cpu.hot_path(),
            "fused kernel graphs on the cpu backend, attention on the backend");
  const std::span<const float> graph_logits = graph_on_cpu.forward(kTinyPrompt);
  const size_t n_vocab = want.back().size();
  const double to_reference = max_difference(logits, want.back(), n_vocab),
               host_to_reference = max_difference(cpu_logits, want.back(), n_vocab),
               to_cpu = max_difference(logits, cpu_logits, n_vocab),
               graph_to_device = max_difference(graph_logits, logits, n_vocab),
               scale = max_magnitude(want.back());
  std::printf(
      "max |logit difference| / max |logit|: graph attention to the reference %.2g, "
      "host attention to the reference %.2g, graph to host %.2g\n",
      to_reference / scale, host_to_reference / scale, to_cpu / scale);
  EXPECT_GT(scale, 1.0);
  EXPECT_LE(to_reference, 0.03 * scale);
  // The host's attention rounds q and the probabilities to f16, as llama.cpp does; the graph's
  // keeps them in f32. The two differ by that, within the reference's tolerance.
  EXPECT_LE(to_cpu, 0.03 * scale);
  // The same graphs on the cpu backend itself.
  EXPECT_LE(graph_to_device, 1e-4 * scale);

  // Two sequences in one step through a server's paged cache: the pool mirrors its blocks, and
  // each row's logits are the single sequence's.
  PagedKvCache paged(c, 8 * 8192, 16);
  std::vector<int32_t> blocks_a, blocks_b;
  ASSERT_TRUE(paged.allocate(paged.blocks_for(int(prompt.size())), blocks_b));
  ASSERT_TRUE(paged.allocate(paged.blocks_for(int(prompt.size())), blocks_a));
  const std::span<const TokenId> half = prompt.first(prompt.size() / 2);
  const std::vector<BatchEntry> batch = {{prompt, 0, blocks_a, true}, {half, 0, blocks_b, true}};
  progress.clear();
  model.prepare_batch_cache(paged, [&](const std::string& line) { progress.push_back(line); });
  ASSERT_EQ(progress.size(), 4u);  // the attention graph per bucket, for the pool's blocks
  EXPECT_THAT(progress[0], HasSubstr(fmt::format("{} KV blocks", paged.total_blocks())));
  const std::span<const float> rows = model.forward_batch(batch, paged);
  ASSERT_EQ(rows.size(), 2 * size_t(c.n_vocab));
  EXPECT_LE(max_difference(rows, logits, n_vocab), 1e-3 * scale);
  // The half prompt continued alone on the cpu engine's host attention: the same next logits.
  LlamaModel half_on_cpu(
      file, ModelOptions{.threads = 2, .context_length = 64, .backend = testing::cpu_backend()});
  const std::span<const float> half_logits = half_on_cpu.forward(half);
  EXPECT_LE(max_difference(rows.subspan(n_vocab), half_logits, n_vocab), 0.03 * scale);
}

// --time-blocks: each launch waited for on both sides and counted under its block's name; the
// logits those of the untimed model.
TEST_F(DeviceBackend, TimedBlocksCountEveryLaunchWaitForTheBackendAndKeepTheLogits) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});
  GgufFile file = GgufFile::from_memory(bytes);
  const ModelOptions untimed{
      .threads = 2, .context_length = 64, .backend = &backend_, .search_seconds = 0.2};
  ModelOptions timed_options = untimed;
  timed_options.time_blocks = true;
  LlamaModel plain(file, untimed), timed(file, timed_options);
  const std::span<const TokenId> prompt(kTinyPrompt);
  const std::span<const float> want = plain.forward(prompt.first(1));
  const std::vector<float> expected(want.begin(), want.end());
  EXPECT_TRUE(plain.block_times().empty());
  EXPECT_TRUE(timed.block_times().empty());  // nothing launched yet

  ledger_ = {};
  const std::span<const float> got = timed.forward(prompt.first(1));
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), expected);
  const int layers = timed.config().n_layer;
  std::map<std::string, uint64_t> launches;
  for (const BlockTime& t : timed.block_times()) {
    EXPECT_GT(t.seconds, 0) << t.block;
    launches[t.block] = t.launches;
  }
  const std::map<std::string, uint64_t> want_launches = {
      {"rmsnorm+qkv, 1 rows", layers},
      {"rope + paged attention, 1 rows, 4 KV blocks", layers},
      {"attention output + gated mlp, 1 rows", layers},
      {"final norm + lm head", 1},
      {"a step's rows to the backend and back", 2}};  // x and the tables in, x out
  EXPECT_EQ(launches, want_launches);
  // Two waits around each timed launch, and the untimed step's own two.
  EXPECT_EQ(ledger_.synchronizes, 2 * (3 * size_t(layers) + 1 + 2) + 2);
}

TEST_F(DeviceBackend, AModelItCannotRunIsRefusedWithTheReasonNotRunOnTheHost) {
  TinyLlama f32;
  f32.matrix_type = 0;  // quant_matmul reads no f32 weights
  const std::vector<std::byte> bytes = write_tiny_llama(f32);
  GgufFile file = GgufFile::from_memory(bytes);
  std::string error = test_util::error_of(
      [&] { LlamaModel model(file, ModelOptions{.context_length = 64, .backend = &backend_}); });
  EXPECT_THAT(error, HasSubstr("the model cannot run on backend 'copying'"));
  EXPECT_THAT(error, HasSubstr("quant_matmul does not read"));
  EXPECT_EQ(error.find('\n'), std::string::npos);

  const std::vector<std::byte> q = write_tiny_llama(TinyLlama{});
  GgufFile quantized = GgufFile::from_memory(q);
  error = test_util::error_of([&] {
    LlamaModel model(
        quantized, ModelOptions{.context_length = 64, .fused_blocks = false, .backend = &backend_});
  });
  EXPECT_THAT(error, HasSubstr("the model cannot run on backend 'copying'"));
  EXPECT_THAT(error, HasSubstr("fused blocks turned off"));
}

TEST(HostBackend, WithoutABackendEveryBlockRunsOnTheHandWrittenKernels) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});
  GgufFile file = GgufFile::from_memory(bytes);
  LlamaModel model(file, ModelOptions{.context_length = 64});
  EXPECT_EQ(model.hot_path(), "hand-written kernels (no backend given to run them on)");
}

// --time-blocks on the hand-written blocks: the fused blocks' names, each call counted once, and
// the logits untouched.
TEST(HostBackend, TimedHandWrittenBlocksCountEachCallUnderTheFusedBlocksNames) {
  const std::vector<std::byte> bytes = write_tiny_llama(TinyLlama{});
  GgufFile file = GgufFile::from_memory(bytes);
  LlamaModel plain(file, ModelOptions{.context_length = 64});
  LlamaModel timed(file, ModelOptions{.context_length = 64, .time_blocks = true});
  const std::span<const TokenId> prompt(kTinyPrompt);
  const std::span<const float> want = plain.forward(prompt);
  const std::vector<float> expected(want.begin(), want.end());
  const std::span<const float> got = timed.forward(prompt);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), expected);
  EXPECT_TRUE(plain.block_times().empty());
  const uint64_t layers = uint64_t(timed.config().n_layer);
  const std::string rows = fmt::format("{} rows", prompt.size());
  std::map<std::string, uint64_t> launches;
  for (const BlockTime& t : timed.block_times()) {
    EXPECT_GT(t.seconds, 0) << t.block;
    launches[t.block] = t.launches;
  }
  const std::map<std::string, uint64_t> want_launches = {
      {"rmsnorm+qkv, " + rows, layers},
      {"attention on the host's kernels", layers},
      {"attention output + gated mlp, " + rows, layers},
      {"final norm + lm head", 1}};
  EXPECT_EQ(launches, want_launches);
}

}  // namespace
}  // namespace yirage::llm
