// Plain kernels for the kernel-level ops outside fused nodes. They are simple and correct rather
// than fast: the fast path for a program is a fused node. Elementwise ops use a grid-stride loop,
// reductions a warp per output, the row ops (norms, softmax) a block per row (a cluster of blocks
// per long row on sm_90), matmul a 64x64 shared-memory tile per block with f32 accumulation.
#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"
#include "support/error.h"

namespace yirage::backend::cuda::detail {
namespace {

using ir::Dims;

unsigned grid_for(int64_t items, int64_t per_block) {
  return unsigned(std::clamp<int64_t>((items + per_block - 1) / per_block, 1, 8192));
}

struct Emit {
  KernelLaunch k;
  std::string params;  // "const float* __restrict__ in0, ..."
};

Emit start(const ir::KernelGraph& graph, const ir::Node& node, const std::vector<int>& in,
           const std::vector<int>& out, const std::string& suffix = {}) {
  Emit e;
  e.k.what = fmt::format("node '{}' ({})", node.name, ir::op_name(node.op));
  e.k.name = "yr_" + identifier(node.name) + suffix;
  for (size_t i = 0; i < in.size(); ++i) {
    e.params += fmt::format("{}const {}* __restrict__ in{}", e.params.empty() ? "" : ", ",
                            ctype(graph.type(node.inputs[i]).dtype), i);
    e.k.args.push_back(in[i]);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    e.params += fmt::format(", {}* __restrict__ out{}", ctype(node.outputs[i].dtype), i);
    e.k.args.push_back(out[i]);
  }
  return e;
}

// `attributes` go before __launch_bounds__; `helpers` is device code the body calls.
void finish(Emit& e, const std::string& body, const std::string& attributes = {},
            const std::string& helpers = {}) {
  e.k.source = prelude() + helpers +
               fmt::format(
                   "\nextern \"C\" __global__ void {}__launch_bounds__({}) {}({}) {{\n"
                   "  yr_wait_prior_grids();\n{}}}\n",
                   attributes, e.k.threads, e.k.name, e.params, body);
  e.k.waits_on_prior_grids = true;
}

KernelLaunch elementwise(const ir::KernelGraph& graph, const ir::Node& node,
                         const std::vector<int>& in, const std::vector<int>& out,
                         const std::string& expr_of_operands) {
  Emit e = start(graph, node, in, out);
  const Dims& dims = node.outputs[0].dims;
  const int64_t n = ir::num_elements(dims);
  std::string loads;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    loads += fmt::format("    const float x{} = yr_to_f(in{}[{}]);\n", i, i,
                         broadcast_index(dims, graph.type(node.inputs[i]).dims, "i"));
  finish(e, fmt::format("  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < {}ll; i += "
                        "gridDim.x * 256ll) {{\n{}    yr_store(out0 + i, {});\n  }}\n",
                        n, loads, expr_of_operands));
  e.k.grid = {grid_for(n, 256), 1, 1};
  return e.k;
}

// Outer / extent / inner of `dims` around `dim`.
struct Split3 {
  int64_t outer = 1, extent = 1, inner = 1;
};
Split3 around(const Dims& dims, int dim) {
  Split3 s;
  for (int j = 0; j < int(dims.size()); ++j)
    (j < dim ? s.outer : j == dim ? s.extent : s.inner) *= dims[size_t(j)];
  return s;
}

KernelLaunch reduce(const ir::KernelGraph& graph, const ir::Node& node, const ir::ReduceOp& op,
                    const std::vector<int>& in, const std::vector<int>& out) {
  Emit e = start(graph, node, in, out);
  const Split3 s = around(graph.type(node.inputs[0]).dims, op.dim);
  const bool is_max = op.fn == ir::ReduceFn::max;
  const int64_t outputs = s.outer * s.inner;
  finish(e, fmt::format(
                R"(  const int lane = threadIdx.x & 31;
  for (long long o = (blockIdx.x * 256ll + threadIdx.x) >> 5; o < {outputs}ll; o += gridDim.x * 8ll) {{
    const long long base = (o / {inner}ll) * {extent}ll * {inner}ll + o % {inner}ll;
    float acc = {init};
    for (long long r = lane; r < {extent}ll; r += 32) {{
      const float v = yr_to_f(in0[base + r * {inner}ll]);
      acc = {combine};
    }}
    acc = {warp}(acc);
    if (lane == 0) yr_store(out0 + o, acc{scale});
  }}
)",
                fmt::arg("outputs", outputs), fmt::arg("inner", s.inner),
                fmt::arg("extent", s.extent), fmt::arg("init", is_max ? "-INFINITY" : "0.0f"),
                fmt::arg("combine", is_max ? "fmaxf(acc, v)" : "acc + v"),
                fmt::arg("warp", is_max ? "yr_warp_max" : "yr_warp_sum"),
                fmt::arg("scale", op.fn == ir::ReduceFn::mean ? fmt::format(" / {}.0f", s.extent)
                                                              : std::string())));
  e.k.grid = {grid_for(outputs, 8), 1, 1};
  return e.k;
}

// rms_norm, layer_norm and softmax: one block per row of `extent` elements at stride `inner` (a
// cluster of blocks for a few long rows: see RowLayout).
// Bodies see the thread's elements j < PER: element R(j) of the row, its value V(j), valid where
// VALID(j), and give element j's result by OUT(j, value). Rows of up to 32 elements a thread are
// read from memory once, into registers, with 1024 threads for long rows: the row then takes one
// round of loads, where a 256-thread loop over a 4096-element row took 16 dependent rounds and a
// second pass (ncu: a 2 x 4096 rms_norm took 4.5 us, longer than launching it). Longer rows
// re-read V(j) from memory in each pass.
//
// A block's contiguous 16-bit part of up to 8192 elements in whole 8-element runs goes in 16-byte
// vectors instead, 256 threads a block: each thread holds runs of 8 (R(j) = 8 x run + j % 8),
// loaded and stored whole, and results go back into v[] for the stores after the body. Why: element
// by element, a warp's load or store instruction moved 64 bytes, and a row of 4096 took 1024
// threads, whose block reductions wait on 32 warps. On the H200 the plain graphs gained 0.2-0.3
// µs a row kernel (gemm_layernorm 11.63 -> 11.41 µs, rmsnorm_linear bs8 17.2 -> 16.9); longer
// rows in runs of 1024 threads did not (gemm_softmax's 32000: 40.4 -> 40.6 µs), so a block that
// holds more keeps element-wise access (docs/design/cuda-findings.md). Slots start 256-byte
// aligned (views at offsets that are multiples of 256: codegen.cpp), so a run is a 16-byte aligned
// vector.
//
// A long row (over 8192 elements) among few rows spreads over a thread-block cluster of up to 8
// blocks on sm_90: block `rank` of the cluster holds the row's elements [rank x chunk, + chunk),
// and each block reduction meets its peers' through distributed shared memory
// (yr_cluster_reduce). Why: gemm_softmax's 8 rows of 32000 ran a block each, so 8 of the 132
// multiprocessors took all 256,000 exponentials (16 a cycle each) and every load. Spread over 64
// blocks in runs, its plain graph went from 40.2 to 37.4-38.1 µs on the H200
// (git show 94f00b8:bench/results/row_clusters_h200.txt).
struct RowLayout {
  int64_t threads = 256;
  int64_t per = 1;  // elements a thread holds
  bool runs = false;
  int64_t cluster = 1;  // blocks a row
  int64_t chunk = 0;    // elements a block of the row holds
  bool in_registers() const { return per <= 32; }
};

constexpr int64_t kRunElements = 8;
constexpr int64_t kRunThreads = 256;
constexpr int64_t kMaxRunsPerThread = 4;
constexpr int64_t kLongRow = 8192;
constexpr int64_t kMaxRowCluster = 8;  // the portable cluster size
constexpr int64_t kMinClusterChunk = 2048;

int64_t row_cluster(const CodegenOptions& options, const Split3& s) {
  int64_t cluster = 1;
  if (!options.clusters || options.multiprocessors <= 0 || s.extent <= kLongRow) return cluster;
  const int64_t rows = s.outer * s.inner;
  while (cluster < kMaxRowCluster && rows * cluster * 2 <= options.multiprocessors &&
         s.extent / (cluster * 2) >= kMinClusterChunk)
    cluster *= 2;
  return cluster;
}

RowLayout row_layout(const ir::KernelGraph& graph, const ir::Node& node, const Split3& s,
                     const CodegenOptions& options) {
  RowLayout l;
  l.cluster = row_cluster(options, s);
  const auto is_16_bit = [](ir::DType t) { return t == ir::DType::f16 || t == ir::DType::bf16; };
  const int64_t runs = (s.extent / kRunElements + l.cluster - 1) / l.cluster;  // a block's
  l.runs = s.inner == 1 && s.extent % kRunElements == 0 &&
           is_16_bit(graph.type(node.inputs[0]).dtype) && is_16_bit(node.outputs[0].dtype) &&
           runs <= kMaxRunsPerThread * kRunThreads;
  if (l.runs) {
    l.chunk = runs * kRunElements;
    l.threads = kRunThreads;
    l.per = kRunElements * ((runs + l.threads - 1) / l.threads);
    return l;
  }
  l.chunk = (s.extent + l.cluster - 1) / l.cluster;
  l.threads = l.chunk >= 2048 ? 1024 : 256;
  l.per = (l.chunk + l.threads - 1) / l.threads;
  return l;
}

// A row's blocks meet in distributed shared memory: each block's result in `slot`, one slot a
// reduction so that no block overwrites a value a peer may still read, then every block reads
// all of them in rank order, so that every block gets the same bits.
const char* const kClusterReduce = R"(
template <typename T>
__device__ __forceinline__ T yr_cluster_reduce(T v, T* scratch, T* slot, bool is_max,
                                               unsigned blocks) {
  const T mine = yr_block_reduce(v, scratch, is_max);
  if (threadIdx.x == 0) *slot = mine;
  yr_cluster_sync();
  T r = is_max ? T(-INFINITY) : T(0);
  for (unsigned q = 0; q < blocks; ++q) {
    const T p = yr_peer_load(slot, q);
    r = is_max ? max(r, p) : r + p;
  }
  return r;
}
// The kernel's last cluster barrier: a block leaves only once its peers have read its slots. The
// arrive is relaxed, ordering no memory, so that it does not wait for the block's output stores
// to land first, as a release arrive does (stall_membar in ncu).
__device__ __forceinline__ void yr_cluster_leave() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n"
               "barrier.cluster.wait.aligned;" ::: "memory");
}
)";
constexpr int kMaxRowReductions = 4;  // slots; the bodies below reduce at most twice

KernelLaunch row_op(const ir::KernelGraph& graph, const ir::Node& node, const std::vector<int>& in,
                    const std::vector<int>& out, const Split3& s, const RowLayout& l,
                    const std::string& body) {
  Emit e = start(graph, node, in, out);
  e.k.threads = unsigned(l.threads);
  const bool clustered = l.cluster > 1;
  const std::string in_type = ctype(graph.type(node.inputs[0]).dtype);
  const std::string out_type = ctype(node.outputs[0].dtype);
  // This block's elements of the row: [lo, hi).
  const std::string lo = clustered ? "lo + " : "";
  const std::string hi = clustered ? "hi" : fmt::format("{}", s.extent);
  std::string element, values, stores;
  if (l.runs) {
    element = fmt::format("({}(threadIdx.x + ((j) >> 3) * {}) * 8 + ((j) & 7))", lo, l.threads);
    values = fmt::format(
        "  float v[PER];\n"
        "#pragma unroll\n"
        "  for (int q = 0; q < PER / 8; ++q) {{\n"
        "    const int at = {lo}(threadIdx.x + q * {threads}) * 8;\n"
        "    uint4 raw = make_uint4(0u, 0u, 0u, 0u);\n"
        "    if (at < {hi}) raw = *reinterpret_cast<const uint4*>(in0 + base + at);\n"
        "    const unsigned w[4] = {{raw.x, raw.y, raw.z, raw.w}};\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < 8; ++i)\n"
        "      v[q * 8 + i] = yr_to_f({type}{{(unsigned short)(w[i >> 1] >> (16 * (i & 1)))}});\n"
        "  }}\n"
        "#define V(j) v[j]\n"
        "#define OUT(j, x) (v[j] = (x))\n",
        fmt::arg("lo", lo), fmt::arg("hi", hi), fmt::arg("threads", l.threads),
        fmt::arg("type", in_type));
    stores = fmt::format(
        "#pragma unroll\n"
        "  for (int q = 0; q < PER / 8; ++q) {{\n"
        "    const int at = {lo}(threadIdx.x + q * {threads}) * 8;\n"
        "    if (at >= {hi}) continue;\n"
        "    unsigned w[4];\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < 4; ++i)\n"
        "      w[i] = yr_pack(yr_bits({type}{{}}, v[q * 8 + 2 * i]), yr_bits({type}{{}}, "
        "v[q * 8 + 2 * i + 1]));\n"
        "    *reinterpret_cast<uint4*>(out0 + base + at) = make_uint4(w[0], w[1], w[2], w[3]);\n"
        "  }}\n",
        fmt::arg("lo", lo), fmt::arg("hi", hi), fmt::arg("threads", l.threads),
        fmt::arg("type", out_type));
  } else {
    element = fmt::format("({}threadIdx.x + (j) * {})", lo, l.threads);
    values = l.in_registers()
                 ? "  float v[PER];\n#pragma unroll\n  for (int j = 0; j < PER; ++j) v[j] = "
                   "VALID(j) ? yr_to_f(in0[AT(R(j))]) : 0.0f;\n#define V(j) v[j]\n"
                 : "#define V(j) yr_to_f(in0[AT(R(j))])\n";
    values += "#define OUT(j, x) yr_store(out0 + AT(R(j)), (x))\n";
  }
  std::string place = "  const long long row = blockIdx.x;\n";
  std::string reduce =
      "#define ROW_REDUCE(v, is_max) yr_block_reduce(v, scratch, is_max)\n"
      "#define ROW_SUM_D(v) yr_block_reduce(v, scratch_d, false)\n";
  std::string leave;
  if (clustered) {
    place = fmt::format(
        "  const long long row = blockIdx.x / {0};\n"
        "  const int lo = int(blockIdx.x % {0}) * {1}, hi = min(lo + {1}, {2});\n",
        l.cluster, l.chunk, s.extent);
    reduce = fmt::format(
        "  __shared__ float slots[{0}];\n"
        "  __shared__ double slots_d[{0}];\n"
        "  int reductions = 0;\n"
        "#define ROW_REDUCE(v, is_max) yr_cluster_reduce(v, scratch, &slots[reductions++], is_max, "
        "{1})\n"
        "#define ROW_SUM_D(v) yr_cluster_reduce(v, scratch_d, &slots_d[reductions++], false, "
        "{1})\n",
        kMaxRowReductions, l.cluster);
    leave = "  yr_cluster_leave();\n";
  }
  finish(e,
         fmt::format(R"(  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
{place}  const long long base = (row / {inner}ll) * {extent}ll * {inner}ll + row % {inner}ll;
#define AT(r) (base + (long long)(r) * {inner}ll)
#define R(j) {element}
#define VALID(j) (R(j) < {hi})
#define PER {per}
{reduce}{values}{body}{stores}{leave}#undef ROW_REDUCE
#undef ROW_SUM_D
#undef OUT
#undef V
#undef PER
#undef VALID
#undef R
#undef AT
)",
                     fmt::arg("place", place), fmt::arg("inner", s.inner),
                     fmt::arg("extent", s.extent), fmt::arg("element", element), fmt::arg("hi", hi),
                     fmt::arg("per", l.per), fmt::arg("reduce", reduce), fmt::arg("values", values),
                     fmt::arg("body", body), fmt::arg("stores", stores), fmt::arg("leave", leave)),
         clustered ? fmt::format("__cluster_dims__({}, 1, 1) ", l.cluster) : "",
         clustered ? cluster_prelude() + kClusterReduce : "");
  e.k.grid = {unsigned(s.outer * s.inner * l.cluster), 1, 1};
  return e.k;
}

KernelLaunch norm(const ir::KernelGraph& graph, const ir::Node& node, const Dims& normalized,
                  double eps, bool layer, bool has_weight, bool has_bias,
                  const std::vector<int>& in, const std::vector<int>& out,
                  const CodegenOptions& options) {
  const Dims& dims = graph.type(node.inputs[0]).dims;
  Split3 s;
  s.extent = ir::num_elements(normalized);
  s.outer = ir::num_elements(dims) / s.extent;
  const RowLayout l = row_layout(graph, node, s, options);
  const std::string n = fmt::format("{}", s.extent);
  // ggml's arithmetic, which the cpu backend and the LLM's hand-written kernels share: the
  // values (or their deviations) in float, their sum in double, the mean and the scale in float.
  // A float sum in another order moved the scale by an ulp, and where the input is itself
  // dequantized (a model's embeddings) that ulp flipped exact ties in the next quant_matmul's int8
  // rounding: q, k and v of a random Q4_0 Llama's layer 0 were 2e-3 off, and its logits 6e-3; 7e-8
  // and 7e-8 with the double sum (tests/cuda/cuda_llm_layers_test.cpp on the H200).
  std::string body = "  float mean = 0.0f;\n";
  if (layer)
    body += fmt::format(
        "  {{ double a = 0.0;\n#pragma unroll\n  for (int j = 0; j < PER; ++j) a += VALID(j) ? "
        "V(j) : 0.0f;\n"
        "    mean = float(ROW_SUM_D(a) / {0}.0); }}\n",
        n);
  body += fmt::format(
      "  double a = 0.0;\n#pragma unroll\n  for (int j = 0; j < PER; ++j) {{ const float d = "
      "VALID(j) ? V(j) - mean : 0.0f; const float d2 = __fmul_rn(d, d); a += d2; }}\n"
      "  const float scale = 1.0f / sqrtf(float(ROW_SUM_D(a) / {0}.0) + {1:.9e}f);\n"
      "#pragma unroll\n"
      "  for (int j = 0; j < PER; ++j) {{\n"
      "    if (!VALID(j)) continue;\n"
      "    const int r = R(j);\n"
      "    float y = (V(j) - mean) * scale;\n",
      n, float(eps));
  if (has_weight) body += "    y *= yr_to_f(in1[r]);\n";
  if (has_bias) body += fmt::format("    y += yr_to_f(in{}[r]);\n", has_weight ? 2 : 1);
  body += "    OUT(j, y);\n  }\n";
  return row_op(graph, node, in, out, s, l, body);
}

// Softmax keeps each e^(x - max) where the row's values are in registers, so the division pass
// reads it rather than taking a second exponential; with a 16-bit output the exponential is
// ex2.approx (yr_exp_ftz), whose error is far below the output's rounding, in place of expf's
// longer accurate sequence. Why: gemm_softmax's rows (8 of 32000) run a block each, so a row's
// 64,000 exponentials queued on one multiprocessor's special-function units.
KernelLaunch softmax(const ir::KernelGraph& graph, const ir::Node& node, int dim,
                     const std::vector<int>& in, const std::vector<int>& out,
                     const CodegenOptions& options) {
  const Split3 s = around(graph.type(node.inputs[0]).dims, dim);
  const RowLayout l = row_layout(graph, node, s, options);
  const bool in_registers = l.in_registers();
  const char* exp = node.outputs[0].dtype == ir::DType::f32 ? "expf" : "yr_exp_ftz";
  const std::string body = fmt::format(
      R"(  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < PER; ++j) if (VALID(j)) m = fmaxf(m, V(j));
  m = ROW_REDUCE(m, true);
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < PER; ++j) if (VALID(j)) {{ const float e = {exp}(V(j) - m); a += e;{keep} }}
  const float inv = 1.0f / ROW_REDUCE(a, false);
#pragma unroll
  for (int j = 0; j < PER; ++j) if (VALID(j)) OUT(j, {again} * inv);
)",
      fmt::arg("exp", exp), fmt::arg("keep", in_registers ? " v[j] = e;" : ""),
      fmt::arg("again", in_registers ? std::string("v[j]") : fmt::format("{}(V(j) - m)", exp)));
  return row_op(graph, node, in, out, s, l, body);
}

KernelLaunch matmul(const ir::KernelGraph& graph, const ir::Node& node, const std::vector<int>& in,
                    const std::vector<int>& out) {
  Emit e = start(graph, node, in, out);
  const Dims& a = graph.type(node.inputs[0]).dims;
  const Dims& b = graph.type(node.inputs[1]).dims;
  const Dims& c = node.outputs[0].dims;
  const int64_t m = c[c.size() - 2], n = c[c.size() - 1], k = a[a.size() - 1];
  // Batch dims broadcast: address each operand's matrix by its own batch index.
  Dims cb(c.begin(), c.end() - 2), ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const int64_t batches = ir::num_elements(cb);
  const std::string abatch = ab.empty() ? "0ll" : broadcast_index(cb, ab, "bz");
  const std::string bbatch = bb.empty() ? "0ll" : broadcast_index(cb, bb, "bz");
  finish(e, fmt::format(
                R"(  // 64x64 output tile per block, 16-deep K slices, 4x4 outputs per thread.
  __shared__ float As[16][64 + 1];
  __shared__ float Bs[16][64 + 1];
  const long long bz = blockIdx.z;
  const {ta}* A = in0 + ({abatch}) * {m}ll * {k}ll;
  const {tb}* B = in1 + ({bbatch}) * {k}ll * {n}ll;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long row0 = blockIdx.y * 64ll, col0 = blockIdx.x * 64ll;
  float acc[4][4] = {{}};
  for (long long k0 = 0; k0 < {k}ll; k0 += 16) {{
    for (int i = threadIdx.x; i < 16 * 64; i += 256) {{
      const int kk = i / 64, mm = i % 64;
      const long long r = row0 + mm, kc = k0 + kk;
      As[kk][mm] = (r < {m}ll && kc < {k}ll) ? yr_to_f(A[r * {k}ll + kc]) : 0.0f;
      const long long cc = col0 + mm;
      Bs[kk][mm] = (kc < {k}ll && cc < {n}ll) ? yr_to_f(B[kc * {n}ll + cc]) : 0.0f;
    }}
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += As[kk][ty + 16 * i] * Bs[kk][tx + 16 * j];
    __syncthreads();
  }}
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {{
      const long long r = row0 + ty + 16 * i, cc = col0 + tx + 16 * j;
      if (r < {m}ll && cc < {n}ll) yr_store(out0 + bz * {m}ll * {n}ll + r * {n}ll + cc, acc[i][j]);
    }}
)",
                fmt::arg("ta", ctype(graph.type(node.inputs[0]).dtype)),
                fmt::arg("tb", ctype(graph.type(node.inputs[1]).dtype)), fmt::arg("abatch", abatch),
                fmt::arg("bbatch", bbatch), fmt::arg("m", m), fmt::arg("n", n), fmt::arg("k", k)));
  e.k.grid = {unsigned((n + 63) / 64), unsigned((m + 63) / 64), unsigned(batches)};
  return e.k;
}

// Copies the slab [offset, offset + extent) of `dim` between a tensor and its part; `to_part`
// says which way (split: whole -> part; concat: part -> whole).
KernelLaunch slab_copy(const ir::Node& node, const Dims& whole, int dim, int64_t offset,
                       int64_t extent, bool to_part, int from_slot, int to_slot, ir::DType dtype,
                       const std::string& suffix) {
  Emit e;
  e.k.what = fmt::format("node '{}' ({})", node.name, ir::op_name(node.op));
  e.k.name = "yr_" + identifier(node.name) + suffix;
  e.k.args = {from_slot, to_slot};
  e.params = fmt::format("const {0}* __restrict__ in0, {0}* __restrict__ out0", ctype(dtype));
  const Split3 s = around(whole, dim);
  const int64_t n = s.outer * extent * s.inner;
  const std::string whole_index = fmt::format(
      "((i / ({0}ll * {1}ll)) * {2}ll * {1}ll + ((i / {1}ll) % {0}ll + {3}ll) * {1}ll + i % {1}ll)",
      extent, s.inner, s.extent, offset);
  finish(e, fmt::format("  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < {}ll; i += "
                        "gridDim.x * 256ll)\n    {};\n",
                        n,
                        to_part ? "out0[i] = in0[" + whole_index + "]"
                                : "out0[" + whole_index + "] = in0[i]"));
  e.k.grid = {grid_for(n, 256), 1, 1};
  return e.k;
}

KernelLaunch permute(const ir::KernelGraph& graph, const ir::Node& node, const ir::PermuteOp& op,
                     const std::vector<int>& in, const std::vector<int>& out) {
  Emit e = start(graph, node, in, out);
  const Dims& src = graph.type(node.inputs[0]).dims;
  const Dims& dst = node.outputs[0].dims;
  const Dims src_strides = ir::row_major_strides(src), dst_strides = ir::row_major_strides(dst);
  std::string index;
  for (size_t i = 0; i < dst.size(); ++i)
    index += fmt::format("{}((i / {}ll) % {}ll) * {}ll", i ? " + " : "", dst_strides[i], dst[i],
                         src_strides[size_t(op.perm[i])]);
  const int64_t n = ir::num_elements(dst);
  finish(e, fmt::format("  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < {}ll; i += "
                        "gridDim.x * 256ll)\n    out0[i] = in0[{}];\n",
                        n, index.empty() ? "0" : index));
  e.k.grid = {grid_for(n, 256), 1, 1};
  return e.k;
}

}  // namespace

std::optional<LibraryGemm> library_gemm(const ir::KernelGraph& graph, const ir::Node& node) {
  if (!std::holds_alternative<ir::MatmulOp>(node.op)) return std::nullopt;
  const ir::TensorType& ta = graph.type(node.inputs[0]);
  const ir::TensorType& tb = graph.type(node.inputs[1]);
  const ir::TensorType& tc = node.outputs[0];
  if (!ir::is_float(ta.dtype) || tb.dtype != ta.dtype || tc.dtype != ta.dtype) return std::nullopt;
  const Dims& c = tc.dims;
  LibraryGemm g{.m = c[c.size() - 2],
                .n = c[c.size() - 1],
                .k = ta.dims.back(),
                .batches = ir::num_elements(Dims(c.begin(), c.end() - 2)),
                .dtype = ta.dtype};
  g.stride_c = g.m * g.n;
  // An operand's batch dims either match the output's (its own matrix per product) or hold a
  // single matrix (shared, stride 0); anything between needs the generated kernel's indexing.
  auto stride = [&](const Dims& dims, int64_t matrix) -> std::optional<int64_t> {
    const Dims batch(dims.begin(), dims.end() - 2);
    if (ir::num_elements(batch) == 1) return 0;
    const Dims out_batch(c.end() - 2 - int64_t(batch.size()), c.end() - 2);
    if (ir::num_elements(batch) == g.batches && batch == out_batch) return matrix;
    return std::nullopt;
  };
  const std::optional<int64_t> sa = stride(ta.dims, g.m * g.k);
  const std::optional<int64_t> sb = stride(tb.dims, g.k * g.n);
  const int64_t limit = std::numeric_limits<int>::max();
  if (!sa || !sb || g.m > limit || g.n > limit || g.k > limit || g.batches > limit)
    return std::nullopt;
  g.stride_a = *sa;
  g.stride_b = *sb;
  return g;
}

size_t op_scratch_bytes(const ir::KernelGraph& graph, const ir::Node& node) {
  if (const auto* op = std::get_if<ir::PagedAttentionOp>(&node.op))
    return paged_attention_scratch_bytes(graph, node, *op);
  return 0;
}

std::vector<KernelLaunch> lower_op(const ir::KernelGraph& graph, const ir::Node& node,
                                   const std::vector<int>& in, const std::vector<int>& out,
                                   const CodegenOptions& options, int scratch_slot) {
  auto unsupported = [&]() -> std::vector<KernelLaunch> {
    fail("cuda: cannot lower node '{}': op '{}' has no CUDA kernel yet", node.name,
         ir::op_name(node.op));
  };
  return std::visit(
      ir::Overloaded{
          [&](const ir::InputOp&) -> std::vector<KernelLaunch> { return {}; },
          [&](const ir::MatmulOp&) -> std::vector<KernelLaunch> {
            return {matmul(graph, node, in, out)};
          },
          [&](const ir::UnaryOp& op) -> std::vector<KernelLaunch> {
            return {elementwise(graph, node, in, out, unary_expr(op, "x0"))};
          },
          [&](const ir::BinaryOp& op) -> std::vector<KernelLaunch> {
            return {elementwise(graph, node, in, out, binary_expr(op.fn, "x0", "x1"))};
          },
          [&](const ir::ReduceOp& op) -> std::vector<KernelLaunch> {
            return {reduce(graph, node, op, in, out)};
          },
          [&](const ir::RmsNormOp& op) -> std::vector<KernelLaunch> {
            return {norm(graph, node, op.normalized_shape, op.eps, false, op.has_weight, false, in,
                         out, options)};
          },
          [&](const ir::LayerNormOp& op) -> std::vector<KernelLaunch> {
            return {norm(graph, node, op.normalized_shape, op.eps, true, op.has_weight, op.has_bias,
                         in, out, options)};
          },
          [&](const ir::SoftmaxOp& op) -> std::vector<KernelLaunch> {
            return {softmax(graph, node, op.dim, in, out, options)};
          },
          [&](const ir::ConcatOp& op) -> std::vector<KernelLaunch> {
            std::vector<KernelLaunch> ks;
            int64_t offset = 0;
            for (size_t i = 0; i < node.inputs.size(); ++i) {
              const int64_t extent = graph.type(node.inputs[i]).dims[size_t(op.dim)];
              ks.push_back(slab_copy(node, node.outputs[0].dims, op.dim, offset, extent, false,
                                     in[i], out[0], node.outputs[0].dtype, fmt::format("_{}", i)));
              offset += extent;
            }
            return ks;
          },
          [&](const ir::SplitOp& op) -> std::vector<KernelLaunch> {
            std::vector<KernelLaunch> ks;
            int64_t offset = 0;
            for (size_t i = 0; i < op.sizes.size(); ++i) {
              ks.push_back(slab_copy(node, graph.type(node.inputs[0]).dims, op.dim, offset,
                                     op.sizes[i], true, in[0], out[i], node.outputs[i].dtype,
                                     fmt::format("_{}", i)));
              offset += op.sizes[i];
            }
            return ks;
          },
          [&](const ir::ReshapeOp&) -> std::vector<KernelLaunch> { return {}; },
          [&](const ir::PermuteOp& op) -> std::vector<KernelLaunch> {
            return {permute(graph, node, op, in, out)};
          },
          [&](const ir::EmbeddingOp&) -> std::vector<KernelLaunch> {
            return {embedding_kernel(graph, node, in, out)};
          },
          [&](const ir::RopeOp& op) -> std::vector<KernelLaunch> {
            return {rope_kernel(graph, node, op, in, out)};
          },
          [&](const ir::QuantMatmulOp& op) -> std::vector<KernelLaunch> {
            return {quant_matmul_kernel(graph, node, op, in, out, options)};
          },
          [&](const ir::PagedAttentionOp& op) -> std::vector<KernelLaunch> {
            return paged_attention_kernels(graph, node, op, in, out, scratch_slot);
          },
          [&](const ir::FusedOp&) { return unsupported(); },
      },
      node.op);
}

}  // namespace yirage::backend::cuda::detail
