// paged_attention on the GPU (ir::PagedAttentionOp): three launches in stream order.
//   1. The pool input copied to the pool output, unless the caller bound one buffer to both (the
//      engine does; tests and the tuner's profile bind two). The kernel compares the pointers, so
//      an aliased launch costs one empty grid and no traffic.
//   2. The appends: a thread per (row, kv head, element) stores this step's k and v, rounded to
//      f16, at the row's position. It must finish before any row reads: rows of one prompt chunk
//      read each other's keys, so the order between launches is what makes them visible.
//   3. The attention: a thread block per (head, row), its warps taking every WARPS-th key, each
//      with its own running max, sum and weighted values (the safe form, rescaled as the max
//      grows), merged across warps in shared memory at the end. A lane holds D/32 elements of q
//      and of the accumulator, so a key costs one warp-wide sum for its score.
// Rows whose position or table entries are out of range (an error in the reference executor)
// store nothing and get NaN outputs, so that a test sees them; padding rows (position -1) get 0.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/cuda/codegen_util.h"
#include "support/error.h"

namespace yirage::backend::cuda::detail {
namespace {

constexpr int kCopyThreads = 256;
constexpr int kAppendThreads = 256;
constexpr int kAttentionWarps = 4;

struct Shape {
  int64_t rows, heads, d, kv_heads, blocks, block_tokens, max_blocks;
};

Shape shape_of(const ir::KernelGraph& graph, const ir::Node& node, const ir::PagedAttentionOp& op) {
  const ir::Dims &q = graph.type(node.inputs[0]).dims, &k = graph.type(node.inputs[1]).dims;
  return {q[0],
          q[1],
          q[2],
          k[1],
          graph.type(node.inputs[3]).dims[0],
          op.block_tokens,
          graph.type(node.inputs[4]).dims[1]};
}

unsigned grid_for(int64_t work, int threads) {
  return unsigned(std::clamp<int64_t>((work + threads - 1) / threads, 1, 65535));
}

KernelLaunch copy_pool(const ir::Node& node, int from, int to, int64_t bytes) {
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "_pool_copy");
  kl.args = {from, to};
  kl.threads = kCopyThreads;
  // 16-byte words where the size allows (a pool's rows are D halves, D even), else 2-byte ones.
  const bool wide = bytes % 16 == 0;
  const int64_t words = bytes / (wide ? 16 : 2);
  // Two blocks a multiprocessor copy at full bandwidth; more would only make the aliased
  // launch's empty grid longer (4096 blocks took 4 µs on an H200, 32 times a token).
  kl.grid = {unsigned(std::min<int64_t>(grid_for(words, kCopyThreads), 264)), 1, 1};
  kl.source = prelude() +
              entry(kl.name, kCopyThreads,
                    fmt::format("const {0}* __restrict__ from, {0}* __restrict__ to",
                                wide ? "uint4" : "unsigned short")) +
              fmt::format(R"(  if ((const void*)from == (const void*)to) return;
  for (long long i = blockIdx.x * {threads}ll + threadIdx.x; i < {words}ll;
       i += gridDim.x * {threads}ll)
    to[i] = from[i];
}}
)",
                          fmt::arg("threads", kCopyThreads), fmt::arg("words", words));
  kl.waits_on_prior_grids = true;
  return kl;
}

KernelLaunch append(const ir::Node& node, const Shape& s, const std::vector<int>& in, int pool) {
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "_append");
  kl.args = {in[1], in[2], in[4], in[5], pool};
  kl.threads = kAppendThreads;
  const int64_t work = s.rows * s.kv_heads * s.d;
  kl.grid = {grid_for(work, kAppendThreads), 1, 1};
  kl.source =
      prelude() +
      entry(kl.name, kAppendThreads,
            "const float* __restrict__ k, const float* __restrict__ v, const int* __restrict__ "
            "table, const int* __restrict__ positions, yr_half* __restrict__ pool") +
      fmt::format(R"(  for (long long i = blockIdx.x * {threads}ll + threadIdx.x; i < {work}ll;
       i += gridDim.x * {threads}ll) {{
    const long long r = i / ({kvh}ll * {d}ll), h = i / {d}ll % {kvh}ll, e = i % {d}ll;
    const int p = positions[r];
    if (p < 0 || p >= {limit}) continue;
    const int b = table[r * {mb}ll + p / {bt}];
    if (b < 0 || b >= {blocks}) continue;
    const long long at = ((long long)b * 2 * {kvh} + h) * {bt}ll + p % {bt};
    yr_store(pool + at * {d}ll + e, k[i]);
    yr_store(pool + (at + {kvh}ll * {bt}ll) * {d}ll + e, v[i]);
  }}
}}
)",
                  fmt::arg("threads", kAppendThreads), fmt::arg("work", work),
                  fmt::arg("kvh", s.kv_heads), fmt::arg("d", s.d),
                  fmt::arg("limit", s.max_blocks * s.block_tokens), fmt::arg("mb", s.max_blocks),
                  fmt::arg("bt", s.block_tokens), fmt::arg("blocks", s.blocks));
  kl.waits_on_prior_grids = true;
  return kl;
}

// Splits of the keys: as many as keep twice the H200's or H100's 132 multiprocessors busy when
// a step has few rows and heads (decode of one sequence), at most 16 and each reaching at least 64
// of the table's positions. One split writes the output itself; more write partial results to
// scratch, which combine() merges.
int64_t key_splits(const Shape& s) {
  const int64_t blocks = std::max<int64_t>(s.rows * s.heads, 1),
                limit = s.max_blocks * s.block_tokens;
  return std::clamp<int64_t>(264 / blocks, 1, std::clamp<int64_t>((limit + 63) / 64, 1, 16));
}

// A split's partial result: its running max, its sum of exps, and its D weighted values.
int64_t partial_floats(const Shape& s) {
  return s.d + 2;
}

KernelLaunch attend(const ir::Node& node, const Shape& s, const std::vector<int>& in, int result,
                    int pool) {
  const int64_t splits = key_splits(s), limit = s.max_blocks * s.block_tokens;
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "_attend");
  kl.args = {in[0], pool, in[4], in[5], result};
  kl.threads = 32 * kAttentionWarps;
  if (s.heads > 0x7fffffff || s.rows > 65535)
    fail("cuda: {}: {} rows of {} heads exceed the grid", kl.what, s.rows, s.heads);
  kl.grid = {unsigned(s.heads), unsigned(s.rows), unsigned(splits)};
  const int64_t per_lane = (s.d + 31) / 32;
  // One split normalizes and stores the row's output; several store their partials.
  const std::string store =
      splits == 1
          ? R"(  float* y = out + ((long long)r * {heads} + h) * {d}ll;
  for (int e = threadIdx.x; e < {d}; e += 32 * WARPS) {{
    float a = 0.0f;
    for (int w = 0; w < WARPS; ++w)
      if (tops[w] != -INFINITY) a += accs[w][e] * expf(tops[w] - all);
    y[e] = a / sum;
  }}
)"
          : R"(  float* part = out + (((long long)r * {heads} + h) * {splits} + blockIdx.z) * {floats}ll;
  if (threadIdx.x == 0) {{
    part[0] = all;
    part[1] = sum;
  }}
  for (int e = threadIdx.x; e < {d}; e += 32 * WARPS) {{
    float a = 0.0f;
    for (int w = 0; w < WARPS; ++w)
      if (tops[w] != -INFINITY) a += accs[w][e] * expf(tops[w] - all);
    part[2 + e] = a;
  }}
)";
  // A bad row's output is NaN, a padding row's 0; with splits, its partials say so (a NaN sum,
  // an empty split) and combine() writes them.
  const std::string skip =
      splits == 1
          ? R"(    float* y = out + ((long long)r * {heads} + h) * {d}ll;
    for (int e = threadIdx.x; e < {d}; e += 32 * WARPS)
      y[e] = bad ? __int_as_float(0x7fc00000) : 0.0f;
)"
          : R"(    float* part = out + (((long long)r * {heads} + h) * {splits} + blockIdx.z) * {floats}ll;
    if (threadIdx.x == 0) {{
      part[0] = -INFINITY;
      part[1] = bad ? __int_as_float(0x7fc00000) : 0.0f;
    }}
)";
  const std::string body = R"(  constexpr int WARPS = {warps}, E = {per_lane};
  const int h = blockIdx.x, r = blockIdx.y, g = h / {group};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int p = positions[r];
  bool bad = p < -1 || p >= {limit};
  for (int j = threadIdx.x; !bad && p >= 0 && j <= p / {bt}; j += 32 * WARPS) {{
    const int b = table[r * {mb}ll + j];
    if (b < 0 || b >= {blocks}) bad = true;
  }}
  bad = __syncthreads_or(bad);
  if (bad || p < 0) {{
)" + skip + R"(    return;
  }}
  const float* qr = q + ((long long)r * {heads} + h) * {d}ll;
  float qv[E], acc[E];
  for (int i = 0; i < E; ++i) {{
    const int e = lane * E + i;
    qv[i] = e < {d} ? qr[e] * {scale:.9e}f : 0.0f;
    acc[i] = 0.0f;
  }}
  float top = -INFINITY, total = 0.0f;
  const int last = min(p, int(blockIdx.z + 1) * {chunk} - 1);
  // Unrolled so that the loads of the next keys are in flight while one key's sum reduces.
#pragma unroll 4
  for (int j = int(blockIdx.z) * {chunk} + warp; j <= last; j += WARPS) {{
    const long long at =
        ((long long)table[r * {mb}ll + j / {bt}] * 2 * {kvh} + g) * {bt}ll + j % {bt};
    const yr_half* kj = pool + at * {d}ll;
    const yr_half* vj = pool + (at + {kvh}ll * {bt}ll) * {d}ll;
    float score = 0.0f;
    for (int i = 0; i < E; ++i) {{
      const int e = lane * E + i;
      if (e < {d}) score += qv[i] * yr_to_f(kj[e]);
    }}
    score = yr_warp_sum(score);
    const float next = fmaxf(top, score), keep = expf(top - next), w = expf(score - next);
    total = total * keep + w;
    for (int i = 0; i < E; ++i) {{
      const int e = lane * E + i;
      if (e < {d}) acc[i] = acc[i] * keep + w * yr_to_f(vj[e]);
    }}
    top = next;
  }}
  __shared__ float tops[WARPS], totals[WARPS], accs[WARPS][{d}];
  if (lane == 0) {{
    tops[warp] = top;
    totals[warp] = total;
  }}
  for (int i = 0; i < E; ++i) {{
    const int e = lane * E + i;
    if (e < {d}) accs[warp][e] = acc[i];
  }}
  __syncthreads();
  float all = -INFINITY;
  for (int w = 0; w < WARPS; ++w) all = fmaxf(all, tops[w]);
  float sum = 0.0f;
  for (int w = 0; w < WARPS; ++w)
    if (tops[w] != -INFINITY) sum += totals[w] * expf(tops[w] - all);
)" + store + "}}\n";
  kl.source = prelude() +
              entry(kl.name, int(kl.threads),
                    "const float* __restrict__ q, const yr_half* __restrict__ pool, const int* "
                    "__restrict__ table, const int* __restrict__ positions, float* __restrict__ "
                    "out") +
              fmt::format(fmt::runtime(body), fmt::arg("warps", kAttentionWarps),
                          fmt::arg("per_lane", per_lane), fmt::arg("group", s.heads / s.kv_heads),
                          fmt::arg("heads", s.heads), fmt::arg("d", s.d), fmt::arg("limit", limit),
                          fmt::arg("bt", s.block_tokens), fmt::arg("mb", s.max_blocks),
                          fmt::arg("blocks", s.blocks), fmt::arg("kvh", s.kv_heads),
                          fmt::arg("splits", splits), fmt::arg("floats", partial_floats(s)),
                          fmt::arg("chunk", (limit + splits - 1) / splits),
                          fmt::arg("scale", 1.0 / std::sqrt(double(s.d))));
  kl.waits_on_prior_grids = true;
  return kl;
}

// The splits' partials merged into the output: a block per (head, row), a thread per element.
KernelLaunch combine(const ir::Node& node, const Shape& s, int partials, int positions, int out) {
  const int64_t splits = key_splits(s);
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "_combine");
  kl.args = {partials, positions, out};
  kl.threads = 128;
  kl.grid = {unsigned(s.heads), unsigned(s.rows), 1};
  kl.source = prelude() +
              entry(kl.name, int(kl.threads),
                    "const float* __restrict__ partials, const int* __restrict__ positions, float* "
                    "__restrict__ out") +
              fmt::format(R"(  const int h = blockIdx.x, r = blockIdx.y;
  float* y = out + ((long long)r * {heads} + h) * {d}ll;
  const float* part = partials + ((long long)r * {heads} + h) * {splits} * {floats}ll;
  if (positions[r] == -1) {{
    for (int e = threadIdx.x; e < {d}; e += 128) y[e] = 0.0f;
    return;
  }}
  float all = -INFINITY;
  for (int s = 0; s < {splits}; ++s) all = fmaxf(all, part[s * {floats}ll]);
  float sum = 0.0f;
  for (int s = 0; s < {splits}; ++s) {{
    const float m = part[s * {floats}ll], l = part[s * {floats}ll + 1];
    sum += isnan(l) ? l : (m == -INFINITY ? 0.0f : l * expf(m - all));
  }}
  for (int e = threadIdx.x; e < {d}; e += 128) {{
    float a = 0.0f;
    for (int s = 0; s < {splits}; ++s) {{
      const float m = part[s * {floats}ll];
      if (m != -INFINITY) a += part[s * {floats}ll + 2 + e] * expf(m - all);
    }}
    y[e] = a / sum;
  }}
}}
)",
                          fmt::arg("heads", s.heads), fmt::arg("d", s.d),
                          fmt::arg("splits", splits), fmt::arg("floats", partial_floats(s)));
  kl.waits_on_prior_grids = true;
  return kl;
}

}  // namespace

size_t paged_attention_scratch_bytes(const ir::KernelGraph& graph, const ir::Node& node,
                                     const ir::PagedAttentionOp& op) {
  const Shape s = shape_of(graph, node, op);
  const int64_t splits = key_splits(s);
  return splits == 1 ? 0 : size_t(s.rows * s.heads * splits * partial_floats(s)) * sizeof(float);
}

std::vector<KernelLaunch> paged_attention_kernels(const ir::KernelGraph& graph,
                                                  const ir::Node& node,
                                                  const ir::PagedAttentionOp& op,
                                                  const std::vector<int>& in,
                                                  const std::vector<int>& out, int scratch) {
  const Shape s = shape_of(graph, node, op);
  const int64_t pool_bytes = ir::num_elements(node.outputs[1].dims) * 2;
  std::vector<KernelLaunch> launches{copy_pool(node, in[3], out[1], pool_bytes),
                                     append(node, s, in, out[1])};
  if (key_splits(s) == 1) {
    launches.push_back(attend(node, s, in, out[0], out[1]));
    return launches;
  }
  if (scratch < 0) fail("cuda: {}: its split attention needs scratch memory", what_of(node));
  launches.push_back(attend(node, s, in, scratch, out[1]));
  launches.push_back(combine(node, s, scratch, in[5], out[0]));
  return launches;
}

}  // namespace yirage::backend::cuda::detail
