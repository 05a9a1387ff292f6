// A paged KV cache for many sequences at once: keys and values live in fixed-size blocks of
// positions drawn from one pool whose size comes from a byte budget, and each sequence holds a
// block table (block i of the sequence is pool block table[i]). Attention reads through the table
// (kernels.h's KvRows), so sequences grow a block at a time without copying and a finished
// sequence's blocks go straight back to the pool. All memory is taken when the pool is built:
// taking and returning blocks moves ids on a preallocated free list, nothing per token.
//
// Prefix caching: a full block of prompt positions can be published under a hash chained over the
// tokens from the sequence's start to the block's end. Other sequences with the same prefix take
// it by reference count instead of computing it again. When its last holder lets go, a published
// block stays cached, counted free, and is evicted least recently used first when allocate() runs
// out of never-published blocks. A lookup checks the block's tokens and its predecessor too, so a
// hash collision can only miss, never hand out another prefix's keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "llm/kernels.h"

namespace yirage::llm {

struct LlamaConfig;

class PagedKvCache {
 public:
  // As many blocks of `block_rows` positions as `budget_bytes` holds; an error (naming the
  // budget) when that is not even one block.
  PagedKvCache(const LlamaConfig& config, size_t budget_bytes, int block_rows = 16);
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  int block_rows() const { return block_rows_; }
  int total_blocks() const { return total_blocks_; }
  // Blocks no sequence holds, cached ones included (they are evicted as needed).
  int free_blocks() const { return static_cast<int>(free_.size()) + idle_cached_; }
  int cached_blocks() const { return idle_cached_; }  // free, but holding a published prefix
  int used_blocks() const { return total_blocks_ - free_blocks(); }
  size_t block_bytes() const { return block_floats_ * sizeof(float); }
  // Blocks needed to hold `positions` positions.
  int blocks_for(int positions) const { return (positions + block_rows_ - 1) / block_rows_; }

  // Appends `count` free blocks to `table`. Returns false, taking nothing, when fewer are free:
  // the caller waits for other sequences to finish.
  bool allocate(int count, std::vector<int32_t>& table);
  // Drops the caller's hold on every block of `table` and clears it; a block nobody holds goes
  // back to the pool (or to the cache, when published). An error for a block that is not held (a
  // table released twice).
  void release(std::vector<int32_t>& table);

  // The hash of a prefix that ends with `block_tokens`, given the hash of the prefix before them
  // (0 for the first block).
  static uint64_t chain_hash(uint64_t previous, std::span<const int32_t> block_tokens);
  // Takes the published block for `hash` (one more holder) and appends it to `table`, provided it
  // holds `block_tokens` after the block `table.back()` (or first, when `table` is empty).
  bool take_cached(uint64_t hash, std::span<const int32_t> block_tokens,
                   std::vector<int32_t>& table);
  // Publishes the full block table[index], whose positions hold `block_tokens`, under `hash`. A
  // hash already published keeps its block.
  void publish(const std::vector<int32_t>& table, size_t index, uint64_t hash,
               std::span<const int32_t> block_tokens);

  // Where position `pos` of the sequence with block table `table` keeps its key / value row
  // (n_head_kv · head_dim floats).
  float* k_row(int layer, const int32_t* table, int pos);
  float* v_row(int layer, const int32_t* table, int pos);
  // The sequence's keys / values of layer `layer`, from float `offset` of each row (a KV head).
  KvRows k_rows(int layer, const int32_t* table, size_t offset) const;
  KvRows v_rows(int layer, const int32_t* table, size_t offset) const;

 private:
  // Block layout: [layer][key, value][block_rows][row floats].
  size_t part_offset(int layer, int which) const;
  float* row_at(int layer, int which, const int32_t* table, int pos);

  int n_layer_ = 0;
  size_t row_ = 0;  // floats per position and layer (n_head_kv · head_dim)
  int block_rows_ = 0;
  size_t block_floats_ = 0;
  int total_blocks_ = 0;
  std::unique_ptr<float[]> storage_;  // left uninitialised: pages are touched as blocks fill
  void unpublish(int32_t block);
  void lru_push(int32_t block);
  void lru_remove(int32_t block);

  std::vector<int32_t> free_;  // capacity total_blocks_, so releasing never allocates
  std::vector<int> holders_;   // per block: the sequences that hold it
  // Published blocks: their hash, tokens and predecessor; the idle ones in least-recently-used
  // order on an intrusive list (no allocation as they come and go).
  std::unordered_map<uint64_t, int32_t> published_;
  std::vector<uint64_t> hash_;
  std::vector<bool> is_published_;
  std::vector<int32_t> tokens_;  // block_rows_ per block
  std::vector<int32_t> previous_;
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int idle_cached_ = 0;
};

}  // namespace yirage::llm
