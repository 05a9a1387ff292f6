// A paged KV cache for many sequences at once: keys and values live in fixed-size blocks of
// positions drawn from one pool whose size comes from a byte budget, and each sequence holds a
// block table (block i of the sequence is pool block table[i]). Attention reads through the table
// (kernels.h's KvRows), so sequences grow a block at a time without copying and a finished
// sequence's blocks go straight back to the pool. All memory is taken when the pool is built:
// taking and returning blocks moves ids on a preallocated free list, nothing per token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int used_blocks() const { return total_blocks_ - free_blocks(); }
  size_t block_bytes() const { return block_floats_ * sizeof(float); }
  // Blocks needed to hold `positions` positions.
  int blocks_for(int positions) const { return (positions + block_rows_ - 1) / block_rows_; }

  // Appends `count` free blocks to `table`. Returns false, taking nothing, when fewer are free:
  // the caller waits for other sequences to finish.
  bool allocate(int count, std::vector<int32_t>& table);
  // Returns every block of `table` to the pool and clears it; an error for a block that is not
  // taken (a table released twice, or another's blocks).
  void release(std::vector<int32_t>& table);

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
  std::vector<int32_t> free_;         // capacity total_blocks_, so releasing never allocates
  std::vector<bool> taken_;
};

}  // namespace yirage::llm
