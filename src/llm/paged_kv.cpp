#include "llm/paged_kv.h"

#include <algorithm>
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
  holders_.assign(blocks, 0);
  hash_.assign(blocks, 0);
  is_published_.assign(blocks, false);
  tokens_.assign(blocks * static_cast<size_t>(block_rows_), 0);
  previous_.assign(blocks, -1);
  lru_prev_.assign(blocks, -1);
  lru_next_.assign(blocks, -1);
  published_.reserve(blocks);
}

bool PagedKvCache::allocate(int count, std::vector<int32_t>& table) {
  if (count < 0) fail("KV cache: allocate {} blocks", count);
  if (count > free_blocks()) return false;
  for (int i = 0; i < count; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // the least recently used cached prefix gives its block up
      b = lru_head_;
      lru_remove(b);
      unpublish(b);
    }
    holders_[static_cast<size_t>(b)] = 1;
    table.push_back(b);
  }
  return true;
}

void PagedKvCache::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    if (b < 0 || b >= total_blocks_ || holders_[static_cast<size_t>(b)] == 0)
      fail("KV cache: block {} released but not taken", b);
    if (--holders_[static_cast<size_t>(b)] > 0) continue;
    if (is_published_[static_cast<size_t>(b)])
      lru_push(b);
    else
      free_.push_back(b);
  }
  table.clear();
}

uint64_t PagedKvCache::chain_hash(uint64_t previous, std::span<const int32_t> block_tokens) {
  // FNV-1a over the previous hash and the token ids, then a final mix (splitmix64's) so that
  // neighbouring prefixes spread over the map's buckets.
  uint64_t h = 0xcbf29ce484222325ull ^ previous;
  for (int32_t t : block_tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

bool PagedKvCache::take_cached(uint64_t hash, std::span<const int32_t> block_tokens,
                               std::vector<int32_t>& table) {
  const auto it = published_.find(hash);
  if (it == published_.end()) return false;
  const int32_t b = it->second;
  const int32_t* stored = tokens_.data() + static_cast<size_t>(b) * block_rows_;
  if (static_cast<int>(block_tokens.size()) != block_rows_ ||
      !std::equal(block_tokens.begin(), block_tokens.end(), stored) ||
      previous_[static_cast<size_t>(b)] != (table.empty() ? -1 : table.back()))
    return false;
  if (holders_[static_cast<size_t>(b)]++ == 0) lru_remove(b);
  table.push_back(b);
  return true;
}

void PagedKvCache::publish(const std::vector<int32_t>& table, size_t index, uint64_t hash,
                           std::span<const int32_t> block_tokens) {
  const int32_t b = table.at(index);
  if (holders_[static_cast<size_t>(b)] == 0) fail("KV cache: publish of block {} not held", b);
  if (static_cast<int>(block_tokens.size()) != block_rows_)
    fail("KV cache: publish of {} tokens into a block of {}", block_tokens.size(), block_rows_);
  if (is_published_[static_cast<size_t>(b)] || published_.contains(hash)) return;
  published_.emplace(hash, b);
  is_published_[static_cast<size_t>(b)] = true;
  hash_[static_cast<size_t>(b)] = hash;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(b) * block_rows_);
  previous_[static_cast<size_t>(b)] = index == 0 ? -1 : table[index - 1];
}

void PagedKvCache::unpublish(int32_t b) {
  published_.erase(hash_[static_cast<size_t>(b)]);
  is_published_[static_cast<size_t>(b)] = false;
}

void PagedKvCache::lru_push(int32_t b) {
  lru_prev_[static_cast<size_t>(b)] = lru_tail_;
  lru_next_[static_cast<size_t>(b)] = -1;
  if (lru_tail_ >= 0)
    lru_next_[static_cast<size_t>(lru_tail_)] = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
  ++idle_cached_;
}

void PagedKvCache::lru_remove(int32_t b) {
  const int32_t prev = lru_prev_[static_cast<size_t>(b)], next = lru_next_[static_cast<size_t>(b)];
  if (prev >= 0)
    lru_next_[static_cast<size_t>(prev)] = next;
  else
    lru_head_ = next;
  if (next >= 0)
    lru_prev_[static_cast<size_t>(next)] = prev;
  else
    lru_tail_ = prev;
  --idle_cached_;
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
