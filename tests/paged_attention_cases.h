// Batches for paged_attention tests (ir::PagedAttentionOp), shared by the cpu and cuda tests: a
// graph with both outputs marked, inputs with block tables out of order, a prompt chunk whose rows
// read each other's appends, a padding row, and table entries past each row's last block set to a
// value outside the pool (so that a kernel that reads them fails); and the expected results from
// a dense computation over the gathered keys, written apart from the reference executor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ir/ir.h"

namespace yirage::paged_attention_cases {

struct Batch {
  int64_t heads, kv_heads, d, blocks, block_tokens, max_blocks;
  std::vector<int32_t> positions;            // per row; -1 is padding
  std::vector<std::vector<int32_t>> tables;  // per row, the blocks its positions use

  int64_t rows() const { return int64_t(positions.size()); }
};

constexpr int32_t kUnusedEntry = -7;

// Three sequences and a padding row: a prompt chunk at positions 5-7 (blocks 6, 2), one row at
// position 12 (blocks 0, 3, 8, 5), one at position 0 (block 1).
inline Batch mixed_batch(int64_t heads = 4, int64_t kv_heads = 2, int64_t d = 8) {
  const std::vector<int32_t> chunk{6, 2}, long_row{0, 3, 8, 5}, first{1};
  return {heads,
          kv_heads,
          d,
          10,
          4,
          4,
          {5, 6, 7, 12, -1, 0},
          {chunk, chunk, chunk, long_row, {}, first}};
}

// `sequences` sequences of random lengths up to `max_blocks` blocks, each ending in a chunk of
// one to three rows (a decode step or a piece of a prompt), their blocks a random permutation of
// the pool's, then one padding row.
inline Batch random_batch(int64_t heads, int64_t kv_heads, int64_t d, int64_t sequences,
                          int64_t block_tokens, int64_t max_blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b{heads, kv_heads, d, sequences * max_blocks + 3, block_tokens, max_blocks, {}, {}};
  std::vector<int32_t> blocks(size_t(b.blocks));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t chunk = 1 + int64_t(rng() % 3);
    const int64_t length = chunk + int64_t(rng() % uint64_t(max_blocks * block_tokens - chunk + 1));
    const int64_t used = (length + block_tokens - 1) / block_tokens;
    std::vector<int32_t> table(blocks.begin() + s * max_blocks,
                               blocks.begin() + s * max_blocks + used);
    for (int64_t p = length - chunk; p < length; ++p) {
      b.positions.push_back(int32_t(p));
      b.tables.push_back(table);
    }
  }
  b.positions.push_back(-1);
  b.tables.push_back({});
  return b;
}

// The op in `g` over six new inputs in the order inputs_of fills them (q, k, v, pool, table,
// positions): {out, pool_out}.
inline std::vector<ir::TensorRef> add_attention(ir::KernelGraph& g, const Batch& b,
                                                const std::string& name = "attn") {
  const int64_t rows = b.rows();
  const ir::TensorRef q = g.input("q", {rows, b.heads, b.d}, ir::DType::f32);
  const ir::TensorRef k = g.input("k", {rows, b.kv_heads, b.d}, ir::DType::f32);
  const ir::TensorRef v = g.input("v", {rows, b.kv_heads, b.d}, ir::DType::f32);
  const ir::TensorRef pool =
      g.input("pool", {b.blocks, 2 * b.kv_heads, b.block_tokens, b.d}, ir::DType::f16);
  const ir::TensorRef table = g.input("table", {rows, b.max_blocks}, ir::DType::i32);
  const ir::TensorRef positions = g.input("positions", {rows}, ir::DType::i32);
  return g.add_node(ir::PagedAttentionOp{b.block_tokens}, {q, k, v, pool, table, positions}, name);
}

inline ir::KernelGraph graph_of(const Batch& b, const std::string& name = "attn") {
  ir::KernelGraph g;
  const std::vector<ir::TensorRef> out = add_attention(g, b, name);
  g.mark_output(out[0], "out");
  g.mark_output(out[1], "pool_out");
  return g;
}

// q, k, v and the pool uniform in [-range, range), the table and positions from the batch.
inline std::vector<ir::HostTensor> inputs_of(const ir::KernelGraph& g, const Batch& b,
                                             uint64_t seed, float range) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> in;
  for (ir::TensorRef ref : g.inputs()) {
    in.emplace_back(g.type(ref));
    if (ir::is_float(g.type(ref).dtype)) ir::fill_random(in.back(), rng, -range, range);
  }
  for (int64_t r = 0; r < b.rows(); ++r) {
    in[5].set_i32(r, b.positions[size_t(r)]);
    for (int64_t j = 0; j < b.max_blocks; ++j) {
      const auto& t = b.tables[size_t(r)];
      in[4].set_i32(r * b.max_blocks + j, j < int64_t(t.size()) ? t[size_t(j)] : kUnusedEntry);
    }
  }
  return in;
}

inline int64_t pool_index(const Batch& b, int64_t block, int kind, int64_t h, int64_t token) {
  return (((block * 2 + kind) * b.kv_heads + h) * b.block_tokens + token) * b.d;
}

// {out, pool_out}: the appends on a copy of the pool, then per row and head the keys 0 ... p
// gathered into one array and a two-pass softmax in double.
inline std::vector<ir::HostTensor> expected_of(const Batch& b,
                                               const std::vector<ir::HostTensor>& in) {
  const ir::HostTensor &q = in[0], &k = in[1], &v = in[2];
  ir::HostTensor pool = in[3];
  ir::HostTensor out({ir::DType::f32, {b.rows(), b.heads * b.d}});
  auto block_at = [&](int64_t r, int64_t p) {
    return int64_t(b.tables[size_t(r)][size_t(p / b.block_tokens)]);
  };
  for (int64_t r = 0; r < b.rows(); ++r) {
    const int64_t p = b.positions[size_t(r)];
    if (p < 0) continue;
    for (int64_t h = 0; h < b.kv_heads; ++h)
      for (int64_t e = 0; e < b.d; ++e) {
        const int64_t src = (r * b.kv_heads + h) * b.d + e;
        pool.set(pool_index(b, block_at(r, p), 0, h, p % b.block_tokens) + e, k.get(src));
        pool.set(pool_index(b, block_at(r, p), 1, h, p % b.block_tokens) + e, v.get(src));
      }
  }
  for (int64_t r = 0; r < b.rows(); ++r) {
    const int64_t p = b.positions[size_t(r)];
    if (p < 0) continue;
    for (int64_t h = 0; h < b.heads; ++h) {
      const int64_t g = h / (b.heads / b.kv_heads);
      std::vector<std::vector<double>> keys, values;
      for (int64_t j = 0; j <= p; ++j) {
        std::vector<double> key, value;
        for (int64_t e = 0; e < b.d; ++e) {
          key.push_back(pool.get(pool_index(b, block_at(r, j), 0, g, j % b.block_tokens) + e));
          value.push_back(pool.get(pool_index(b, block_at(r, j), 1, g, j % b.block_tokens) + e));
        }
        keys.push_back(key);
        values.push_back(value);
      }
      std::vector<double> scores;
      double top = -INFINITY, total = 0;
      for (const auto& key : keys) {
        double s = 0;
        for (int64_t e = 0; e < b.d; ++e) s += q.get((r * b.heads + h) * b.d + e) * key[size_t(e)];
        scores.push_back(s / std::sqrt(double(b.d)));
        top = std::max(top, scores.back());
      }
      for (double& s : scores) total += (s = std::exp(s - top));
      for (int64_t e = 0; e < b.d; ++e) {
        double acc = 0;
        for (size_t j = 0; j < keys.size(); ++j) acc += scores[j] * values[j][size_t(e)];
        out.set(r * b.heads * b.d + h * b.d + e, float(acc / total));
      }
    }
  }
  return {out, pool};
}

// The largest |actual - expected| over the largest |expected|, element by element.
inline double max_relative_error(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  double worst = 0, scale = 1e-30;
  for (int64_t i = 0; i < expected.size(); ++i) {
    scale = std::max(scale, double(std::fabs(expected.get(i))));
    const double diff = std::fabs(double(actual.get(i)) - double(expected.get(i)));
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst / scale;
}

}  // namespace yirage::paged_attention_cases
