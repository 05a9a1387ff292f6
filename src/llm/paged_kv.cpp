#include "llm/paged_kv.h"

#include <limits>

#include "llm/model.h"
#include "support/error.h"

namespace yirage::llm {

PagedKvCache::PagedKvCache(const LlamaConfig& config, size_t budget_bytes, int block_rows)
    : n_layer_(config.n_layer),
      row_(static_cast<size_t>(config.n_head_kv) * config.head_dim),
      block_rows_(block_rows) {
  if (block_rows < 1 || block_rows > 4096) fail("KV block size {} is out of range", block_rows);
  block_floats_ = size_t{2} * static_cast<size_t>(n_layer_) * block_rows_ * row_;
  const size_t blocks = budget_bytes / block_bytes();
  if (blocks < 1)
    fail("KV memory {} bytes holds no block of {} positions ({} bytes each)", budget_bytes,
         block_rows, block_bytes());
  if (blocks > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("KV memory {} bytes makes more blocks than a block id holds", budget_bytes);
  total_blocks_ = static_cast<int>(blocks);
  storage_.reset(new float[blocks * block_floats_]);
  free_.reserve(blocks);
  // Highest id first on the free list, so that blocks are handed out from id 0 up.
  for (int b = total_blocks_ - 1; b >= 0; --b) free_.push_back(b);
  taken_.assign(blocks, false);
}

bool PagedKvCache::allocate(int count, std::vector<int32_t>& table) {
  if (count < 0) fail("KV cache: allocate {} blocks", count);
  if (count > free_blocks()) return false;
  for (int i = 0; i < count; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    taken_[static_cast<size_t>(b)] = true;
    table.push_back(b);
  }
  return true;
}

void PagedKvCache::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    if (b < 0 || b >= total_blocks_ || !taken_[static_cast<size_t>(b)])
      fail("KV cache: block {} released but not taken", b);
    taken_[static_cast<size_t>(b)] = false;
    free_.push_back(b);
  }
  table.clear();
}

size_t PagedKvCache::part_offset(int layer, int which) const {
  return (static_cast<size_t>(layer) * 2 + static_cast<size_t>(which)) * block_rows_ * row_;
}

float* PagedKvCache::row_at(int layer, int which, const int32_t* table, int pos) {
  const size_t block = static_cast<size_t>(table[pos / block_rows_]);
  return storage_.get() + block * block_floats_ + part_offset(layer, which) +
         static_cast<size_t>(pos % block_rows_) * row_;
}

float* PagedKvCache::k_row(int layer, const int32_t* table, int pos) {
  return row_at(layer, 0, table, pos);
}

float* PagedKvCache::v_row(int layer, const int32_t* table, int pos) {
  return row_at(layer, 1, table, pos);
}

KvRows PagedKvCache::k_rows(int layer, const int32_t* table, size_t offset) const {
  return {storage_.get() + part_offset(layer, 0) + offset, table, block_rows_, block_floats_, row_};
}

KvRows PagedKvCache::v_rows(int layer, const int32_t* table, size_t offset) const {
  return {storage_.get() + part_offset(layer, 1) + offset, table, block_rows_, block_floats_, row_};
}

}  // namespace yirage::llm
