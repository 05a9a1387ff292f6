#include "llm/block_timer.h"

#include <fmt/format.h>

namespace yirage::llm {
namespace {

// The hand-written blocks behind a timer, under the names the fused blocks give theirs, so that
// `--time-blocks` compares the two paths block by block. They run on the host's threads and
// return when done: nothing to wait for.
class TimedBlocks final : public HotBlocks {
 public:
  explicit TimedBlocks(std::unique_ptr<HotBlocks> blocks)
      : blocks_(std::move(blocks)), timer_(nullptr, true) {}

  std::vector<BlockTime> block_times() const override { return timer_.times(); }

  bool decoder_layers(std::span<const SequenceRows> sequences, int rows, const KvLayout& layout,
                      float* x) override {
    return blocks_->decoder_layers(sequences, rows, layout, x);
  }
  void prepare_kv(const KvLayout& layout,
                  const std::function<void(const std::string&)>& progress) override {
    blocks_->prepare_kv(layout, progress);
  }
  void norm_qkv(int layer, const float* x, int n, float* q, float* k, float* v) override {
    timer_.time_as(fmt::format("rmsnorm+qkv, {} rows", n),
                   [&] { blocks_->norm_qkv(layer, x, n, q, k, v); });
  }
  void attention(int layer, int pos0, int n, float* q, float* k, float* v, KvCache& cache,
                 float* out) override {
    timer_.time_as(kAttention, [&] { blocks_->attention(layer, pos0, n, q, k, v, cache, out); });
  }
  void paged_attention(int layer, std::span<const SequenceRows> sequences, float* q, float* k,
                       float* v, PagedKvCache& cache, float* out) override {
    timer_.time_as(kAttention,
                   [&] { blocks_->paged_attention(layer, sequences, q, k, v, cache, out); });
  }
  void output_and_mlp(int layer, const float* attention, int n, float* x) override {
    timer_.time_as(fmt::format("attention output + gated mlp, {} rows", n),
                   [&] { blocks_->output_and_mlp(layer, attention, n, x); });
  }
  void final_norm_lm_head(const float* x, float* logits) override {
    timer_.time_as("final norm + lm head", [&] { blocks_->final_norm_lm_head(x, logits); });
  }
  void final_norm_lm_head_rows(const float* x, int n, float* logits) override {
    timer_.time_as(fmt::format("final norm + lm head, {} rows", n),
                   [&] { blocks_->final_norm_lm_head_rows(x, n, logits); });
  }

 private:
  static constexpr const char* kAttention = "attention on the host's kernels";
  std::unique_ptr<HotBlocks> blocks_;
  BlockTimer timer_;
};

}  // namespace

std::unique_ptr<HotBlocks> timed_blocks(std::unique_ptr<HotBlocks> blocks) {
  return std::make_unique<TimedBlocks>(std::move(blocks));
}

}  // namespace yirage::llm
