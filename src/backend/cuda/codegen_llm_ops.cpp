// Kernels for the ops only language models use: quant_matmul over GGUF blocks, embedding and
// rope. Each computes what the reference executor (verify/reference.cpp) defines; the tests hold
// them to it on the GPU (tests/cuda/cuda_llm_ops_test.cpp).
//
// quant_matmul is ggml's arithmetic (ir/quant.h): each 32-element block of a row of x is quantized
// to int8 (d = max|x| / 127 rounded through f16, q = x · 127 / max|x| rounded half to even), each
// block's dot product with the weight's block is an exact integer sum (dp4a on four int8 pairs at
// a time), scaled once by the two blocks' scales, and the blocks of a row add up in float. The
// kernel is a streaming GEMV: a thread block first quantizes up to kQuantRows rows of x into shared
// memory, then each warp streams whole weight rows, a lane per 32-element block, with the weight
// block dequantized in registers only as far as its nibbles unpack into int8 lanes. Every weight
// byte is read once per group of rows, so decode (one row) moves the weight once, as the HBM floor
// asks. The blocks of a row add up across lanes, not in order, so results differ from the
// reference by float rounding, not by quantization. A tensor-core form for long prompts (M > 16)
// is not written yet for the quantized formats: a prompt's rows then run in groups of kQuantRows,
// the weight read once a group. bf16 weights have one (bf16_tensor_core_matmul_kernel).
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/codegen_util.h"
#include "support/error.h"

namespace yirage::backend::cuda::detail {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxRowsPerWarp = 4;  // weight rows (outputs) a warp streams one after another

// Rows a warp streams: as many as keep two thread blocks a multiprocessor. Why: at 4 a warp,
// SmolLM2's 576-row projections ran as 18 thread blocks on the H100's 132 multiprocessors, each
// warp's rows one after another, 10-24 µs a kernel (ncu), where the weights take 1 µs to stream.
// Several rows a warp pay off only where the grid has blocks to spare (an 8B model's 4096+ rows).
int rows_per_warp(int64_t n, const CodegenOptions& options) {
  const int64_t enough = 2 * std::max<int64_t>(options.multiprocessors, 1);
  int per = kMaxRowsPerWarp;
  while (per > 1 && (n + kWarps * per - 1) / (kWarps * per) < enough) per /= 2;
  return per;
}
constexpr int64_t kQuantRows = 8;  // rows of x one thread block quantizes and multiplies

// Scalar helpers by inline PTX, as the prelude's are: NVRTC then needs no CUDA header.
const char* const kQuantHelpers = R"(
__device__ __forceinline__ int yr_dp4a(int a, int b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ float yr_f16_bits_to_f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float yr_round_f16(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return yr_f16_bits_to_f(h);
}
__device__ __forceinline__ int yr_round_half_even(float v) {
  int i;
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(i) : "f"(v));
  return i;
}
__device__ __forceinline__ int yr_warp_isum(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
)";

// How one format's block is read: its bytes, where the quants start, and the body that turns the
// block at `blk` (an unsigned short pointer; blocks are 2-byte aligned) and the activations' packed
// int8 words `xr` into `sumi`, plus the float term added per block.
struct BlockFormat {
  int64_t bytes;
  const char* unpack;  // declares the weight's words w[] and its scales
  const char* dot;     // sumi from w[] and xr[]
  const char* term;    // the block's float contribution
};

BlockFormat block_format(ir::QuantFormat format) {
  switch (format) {
    case ir::QuantFormat::q4_0:
      return {18,
              "const float dw = yr_f16_bits_to_f(blk[0]);\n"
              "      unsigned w[4];\n"
              "      for (int i = 0; i < 4; ++i) w[i] = blk[1 + 2 * i] | ((unsigned)blk[2 + 2 * i] "
              "<< 16);\n",
              "for (int i = 0; i < 4; ++i) {\n"
              "            sumi = yr_dp4a(int(w[i] & 0x0f0f0f0fu), xr[i], sumi);\n"
              "            sumi = yr_dp4a(int((w[i] >> 4) & 0x0f0f0f0fu), xr[4 + i], sumi);\n"
              "          }\n"
              "          sumi -= 8 * int(xs[r * KB + b]);  // the nibbles' offset of 8\n",
              "dw * xd[r * KB + b] * float(sumi)"};
    case ir::QuantFormat::q4_1:
      return {20,
              // 20-byte blocks in rows of whole blocks from a 256-byte aligned slot: 4-byte
              // words, five loads where 2-byte ones took ten.
              "const unsigned* b32 = (const unsigned*)blk;\n"
              "      const unsigned scales = b32[0];\n"
              "      const float dw = yr_f16_bits_to_f((unsigned short)(scales & 0xffffu)), mw = "
              "yr_f16_bits_to_f((unsigned short)(scales >> 16));\n"
              "      unsigned w[4];\n"
              "      for (int i = 0; i < 4; ++i) w[i] = b32[1 + i];\n",
              "for (int i = 0; i < 4; ++i) {\n"
              "            sumi = yr_dp4a(int(w[i] & 0x0f0f0f0fu), xr[i], sumi);\n"
              "            sumi = yr_dp4a(int((w[i] >> 4) & 0x0f0f0f0fu), xr[4 + i], sumi);\n"
              "          }\n",
              "dw * xd[r * KB + b] * float(sumi) + mw * xs[r * KB + b]"};
    case ir::QuantFormat::q8_0:
      return {34,
              "const float dw = yr_f16_bits_to_f(blk[0]);\n"
              "      unsigned w[8];\n"
              "      for (int i = 0; i < 8; ++i) w[i] = blk[1 + 2 * i] | ((unsigned)blk[2 + 2 * i] "
              "<< 16);\n",
              "for (int i = 0; i < 8; ++i) sumi = yr_dp4a(int(w[i]), xr[i], sumi);\n",
              "dw * xd[r * KB + b] * float(sumi)"};
    case ir::QuantFormat::f16:
    case ir::QuantFormat::bf16: break;  // float_weight_matmul_kernel
  }
  fail("cuda: unknown quant format");
}

// The per-block value quantization keeps besides d: q4_1 reads s = d·Σq rounded through f16 (Q8_1),
// q4_0 the integer Σq for the nibbles' offset, q8_0 nothing.
const char* block_sum_expr(ir::QuantFormat format) {
  switch (format) {
    case ir::QuantFormat::q4_1: return "yr_round_f16(amax / 127.0f * float(sum))";
    case ir::QuantFormat::q4_0: return "float(sum)";
    case ir::QuantFormat::q8_0: return "0.0f";
    case ir::QuantFormat::f16:
    case ir::QuantFormat::bf16: break;  // float_weight_matmul_kernel
  }
  fail("cuda: unknown quant format");
}

// The launch of a product over n weight rows and m activation rows: `threads` a block, blocks of
// `weight_rows` weight rows along x and of `rows` activation rows along y.
KernelLaunch product_launch(const ir::Node& node, const std::vector<int>& in,
                            const std::vector<int>& out, int64_t m, int64_t n, int64_t rows,
                            int64_t weight_rows, int threads) {
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "");
  kl.args = {in[0], in[1], out[0]};
  kl.threads = threads;
  const int64_t blocks_x = (n + weight_rows - 1) / weight_rows, blocks_y = (m + rows - 1) / rows;
  if (blocks_x > 0x7fffffff || blocks_y > 65535)
    fail("cuda: {}: {} x {} outputs exceed the grid", kl.what, m, n);
  kl.grid = {unsigned(blocks_x), unsigned(blocks_y), 1};
  kl.waits_on_prior_grids = true;
  return kl;
}

// A GEMV's launch: thread blocks of kWarps warps, each warp streaming `per_warp` weight rows.
KernelLaunch gemv_launch(const ir::Node& node, const std::vector<int>& in,
                         const std::vector<int>& out, int64_t m, int64_t n, int64_t rows,
                         int per_warp) {
  return product_launch(node, in, out, m, n, rows, kWarps * per_warp, kWarps * 32);
}

// A GEMV kernel's source: the helpers, the entry (x as floats, the weight as bytes, the output),
// then `body`.
void set_gemv_source(KernelLaunch& kl, const std::string& body) {
  kl.source = prelude() + kQuantHelpers +
              entry(kl.name, int(kl.threads),
                    "const float* __restrict__ in0, const unsigned char* __restrict__ in1, float* "
                    "__restrict__ out0") +
              body + "}\n";
}

// 16-bit float weights (f16, bf16), read as they are: no widening in memory, only in registers.
// The same streaming GEMV as the quantized form, without quantizing x: a warp streams its
// `per_warp` weight rows side by side, 16 bytes (8 weights) of each a lane at a time, converts
// them in registers and multiplies them with up to kQuantRows rows of x, which it reads through
// the read-only cache (a few KiB a row, shared by every warp, where the weights are read once) and
// once for all its weight rows. Why side by side: one row after another, each row's last loads
// drained before the next row's first, ncu on an H100 found the Llama-3-8B shape's products at
// 70% of DRAM bandwidth with 40% achieved occupancy, latency-bound; and its k and v products
// (1024 rows, a row a warp, 8 warps a multiprocessor) at 24%. So the loop over k is unrolled to
// keep 8 loads of 16 bytes a lane in flight whatever the rows a warp. A lane's products add up in
// the same order either way; across lanes they add up in float, so results differ from the
// reference's in-order sum by rounding only.
KernelLaunch float_weight_matmul_kernel(const ir::KernelGraph& graph, const ir::Node& node,
                                        const ir::QuantMatmulOp& op, const std::vector<int>& in,
                                        const std::vector<int>& out,
                                        const CodegenOptions& options) {
  const ir::Dims& x = graph.type(node.inputs[0]).dims;
  const ir::Dims& w = graph.type(node.inputs[1]).dims;
  const int64_t k = x.back(), n = w[0];
  const int64_t m = ir::num_elements(x) / k;
  const int64_t rows = std::min(m, kQuantRows);
  const int per_warp = rows_per_warp(n, options);
  KernelLaunch kl = gemv_launch(node, in, out, m, n, rows, per_warp);
  const bool bf16 = op.format == ir::QuantFormat::bf16;
  const std::string body = fmt::format(
      R"(  constexpr long long M = {m}ll, N = {n}ll, K = {k}ll;
  constexpr int MT = {rows}, PW = {per_warp};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long m0 = (long long)blockIdx.y * MT;
  const int rows_here = M - m0 < MT ? int(M - m0) : MT;
  const long long n0 = ((long long)blockIdx.x * {warps} + warp) * PW;
  if (n0 >= N) return;  // the same for every lane of the warp
  // A row past N reads row N - 1 and its results are dropped.
  const unsigned char* wrow[PW];
  for (int j = 0; j < PW; ++j) wrow[j] = in1 + (n0 + j < N ? n0 + j : N - 1) * K * 2;
  float acc[PW][MT];
  for (int j = 0; j < PW; ++j)
    for (int r = 0; r < MT; ++r) acc[j][r] = 0.0f;
#pragma unroll {unroll}
  for (long long c = lane; c < K / 8; c += 32) {{
    float wv[PW][8];
#pragma unroll
    for (int j = 0; j < PW; ++j) {{
      unsigned words[4];
      yr_ld_stream16(words, wrow[j] + c * 16);
#pragma unroll
      for (int i = 0; i < 4; ++i) {{
        wv[j][2 * i] = {lo};
        wv[j][2 * i + 1] = {hi};
      }}
    }}
#pragma unroll
    for (int r = 0; r < MT; ++r) {{
      if (r < rows_here) {{
        const float4* xr = (const float4*)(in0 + (m0 + r) * K + c * 8);
        const float4 a = __ldg(xr), b = __ldg(xr + 1);
#pragma unroll
        for (int j = 0; j < PW; ++j)
          acc[j][r] += wv[j][0] * a.x + wv[j][1] * a.y + wv[j][2] * a.z + wv[j][3] * a.w +
                       wv[j][4] * b.x + wv[j][5] * b.y + wv[j][6] * b.z + wv[j][7] * b.w;
      }}
    }}
  }}
  for (int j = 0; j < PW; ++j)
    for (int r = 0; r < MT; ++r) {{
      const float v = yr_warp_sum(acc[j][r]);
      if (lane == 0 && r < rows_here && n0 + j < N) out0[(m0 + r) * N + n0 + j] = v;
    }}
)",
      fmt::arg("m", m), fmt::arg("n", n), fmt::arg("k", k), fmt::arg("rows", rows),
      fmt::arg("warps", kWarps), fmt::arg("per_warp", per_warp),
      fmt::arg("unroll", std::max(8 / per_warp, 1)),
      fmt::arg("lo", bf16 ? "__uint_as_float(words[i] << 16)"
                          : "yr_f16_bits_to_f((unsigned short)(words[i] & 0xffffu))"),
      fmt::arg("hi", bf16 ? "__uint_as_float(words[i] & 0xffff0000u)"
                          : "yr_f16_bits_to_f((unsigned short)(words[i] >> 16))"));
  set_gemv_source(kl, body);
  return kl;
}

// bf16 weights at two or more rows of x, by tensor cores: the streaming GEMV multiplies each
// weight by every row on CUDA cores, reading x again for every weight row, and at 16 and 64 rows
// of the Llama-3-8B shape its time grew by 0.06 ms a layer per row (bench/results/h100_llm.md).
// Here a thread block owns 8 weight rows per group (up to 4 groups, as many as leave a block for
// every other multiprocessor: x's conversion below is then shared by more rows), and its warps
// take turns along k, 32 weights (16 bytes a lane) at a time; their sums meet in shared memory
// at the end. Each 16-byte load is the B
// fragment of two m16n8k16 products, its weights' k assigned to the products' k slots by any
// bijection, as long as x's fragments use the same one: lane (g, t) holds weights k0 + 8t ...
// k0 + 8t + 7 of row g, and x's rows g and g + 8 at the same k. x stays f32 in memory and is split
// in registers into bf16 high and low parts, x = hi + lo + O(2^-16 |x|), each multiplied by the
// weights: products of bf16 numbers are exact in the f32 accumulators, so the result keeps f32
// accuracy to about 2^-16 of each term, where one bf16 product would lose 2^-8. All rows of x up
// to 64 share one read of the weights.
KernelLaunch bf16_tensor_core_matmul_kernel(const ir::Node& node, const std::vector<int>& in,
                                            const std::vector<int>& out, int64_t m, int64_t n,
                                            int64_t k, const CodegenOptions& options) {
  const int64_t tiles = std::min<int64_t>((m + 15) / 16, 4);  // 16-row tiles of x a block takes
  int64_t groups = 4;  // groups of 8 weight rows a block takes
  while (groups > 1 && n / (8 * groups) < options.multiprocessors / 2) groups /= 2;
  // Warps split k, and their partial sums meet in shared memory, tiles · groups · 128 floats a
  // warp, which the 48 KiB of static shared memory bounds: 4 warps at 4 tiles of 4 groups, up to
  // 16 where a block holds less. Why more: ncu on an H100 found the Llama-3-8B shape's k and v
  // products (1024 weight rows, so 1 group) at 4 warps a multiprocessor, 6% occupancy, 179 µs for
  // their 8 MiB of weights, stalled on latency.
  int64_t warps = 16;
  while (warps > 4 && warps * tiles * groups * 128 * int64_t(sizeof(float)) > 48 * 1024) warps /= 2;
  KernelLaunch kl = product_launch(node, in, out, m, n, 16 * tiles, 8 * groups, int(warps) * 32);
  const std::string body = fmt::format(
      R"(  constexpr long long M = {m}ll, N = {n}ll, K = {k}ll;
  constexpr int TILES = {tiles}, GROUPS = {groups}, WARPS = {warps};
  __shared__ float partial[WARPS][TILES * GROUPS * 4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const long long n0 = (long long)blockIdx.x * (8 * GROUPS), m0 = (long long)blockIdx.y * (16 * TILES);
  // A row past N reads row N - 1 and its results are dropped.
  const unsigned char* wrow[GROUPS];
  for (int s = 0; s < GROUPS; ++s) {{
    const long long row = n0 + 8 * s + g;
    wrow[s] = in1 + (row < N ? row : N - 1) * K * 2;
  }}
  float acc[TILES][GROUPS][4];
  for (int i = 0; i < TILES; ++i)
    for (int s = 0; s < GROUPS; ++s)
      for (int j = 0; j < 4; ++j) acc[i][s][j] = 0.0f;
#pragma unroll 2
  for (long long k0 = 32ll * warp; k0 < K; k0 += 32ll * WARPS) {{
    unsigned w[GROUPS][4];
#pragma unroll
    for (int s = 0; s < GROUPS; ++s) yr_ld_stream16(w[s], wrow[s] + (k0 + 8 * t) * 2);
#pragma unroll
    for (int i = 0; i < TILES; ++i) {{
      unsigned hi[2][4], lo[2][4];  // [product][A register]
#pragma unroll
      for (int half = 0; half < 2; ++half) {{  // x's rows g and g + 8 of the tile
        const long long r = m0 + 16 * i + g + 8 * half;
        float v[8] = {{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}};
        if (r < M) {{
          const float4* xr = (const float4*)(in0 + r * K + k0 + 8 * t);
          const float4 a = __ldg(xr), b = __ldg(xr + 1);
          v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
          v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        }}
#pragma unroll
        for (int p = 0; p < 4; ++p) {{  // the pair of weights in each w[s][p]
          const unsigned short h0 = yr_bits(yr_bfloat{{}}, v[2 * p]),
                               h1 = yr_bits(yr_bfloat{{}}, v[2 * p + 1]);
          const unsigned short l0 =
              yr_bits(yr_bfloat{{}}, v[2 * p] - __uint_as_float((unsigned)h0 << 16));
          const unsigned short l1 =
              yr_bits(yr_bfloat{{}}, v[2 * p + 1] - __uint_as_float((unsigned)h1 << 16));
          // w[s][0], w[s][1] are the first product's b0, b1; w[s][2], w[s][3] the second's. A register j
          // holds row g (j even) or g + 8 (j odd), at b0's k slots (j < 2) or b1's (j >= 2).
          hi[p >> 1][(p & 1) * 2 + half] = yr_pack(h0, h1);
          lo[p >> 1][(p & 1) * 2 + half] = yr_pack(l0, l1);
        }}
      }}
#pragma unroll
      for (int s = 0; s < GROUPS; ++s)
#pragma unroll
        for (int q = 0; q < 2; ++q) {{
          yr_mma(yr_bfloat{{}}, acc[i][s], hi[q][0], hi[q][1], hi[q][2], hi[q][3], w[s][2 * q], w[s][2 * q + 1]);
          yr_mma(yr_bfloat{{}}, acc[i][s], lo[q][0], lo[q][1], lo[q][2], lo[q][3], w[s][2 * q], w[s][2 * q + 1]);
        }}
    }}
  }}
  for (int i = 0; i < TILES; ++i)
    for (int s = 0; s < GROUPS; ++s)
      for (int j = 0; j < 4; ++j) partial[warp][(i * GROUPS + s) * 4 + j][lane] = acc[i][s][j];
  __syncthreads();
  // Accumulator j of tile i, group s: row 16i + g (j < 2) or 16i + g + 8, column
  // n0 + 8s + 2t + (j & 1).
  for (int e = threadIdx.x; e < TILES * GROUPS * 128; e += WARPS * 32) {{
    const int i = e / (GROUPS * 128), s = (e / 128) % GROUPS, j = (e / 32) & 3, l = e & 31;
    float v = 0.0f;
    for (int u = 0; u < WARPS; ++u) v += partial[u][(i * GROUPS + s) * 4 + j][l];
    const long long r = m0 + 16 * i + (l >> 2) + (j >> 1) * 8,
                    c = n0 + 8 * s + 2 * (l & 3) + (j & 1);
    if (r < M && c < N) out0[r * N + c] = v;
  }}
)",
      fmt::arg("m", m), fmt::arg("n", n), fmt::arg("k", k), fmt::arg("tiles", tiles),
      fmt::arg("groups", groups), fmt::arg("warps", warps));
  set_gemv_source(kl, body);
  return kl;
}

// Whether a 16-bit product takes the tensor-core form: bf16 weights (f16's range could not hold
// x's high part: SmolLM2's activations reach 2.3e4, others more), more rows than the streaming
// GEMV takes at once (which reads the weights once up to there: at 4 rows of the Llama-3-8B
// shape it took 0.245 ms a layer's output + MLP block, this form 0.298), whole 32-weight chunks,
// and weight rows enough for a block on every other multiprocessor.
bool takes_tensor_cores(const ir::QuantMatmulOp& op, int64_t m, int64_t n, int64_t k,
                        const CodegenOptions& options) {
  return op.format == ir::QuantFormat::bf16 && m > kQuantRows && k % 32 == 0 &&
         n / 8 >= options.multiprocessors / 2;
}

}  // namespace

KernelLaunch quant_matmul_kernel(const ir::KernelGraph& graph, const ir::Node& node,
                                 const ir::QuantMatmulOp& op, const std::vector<int>& in,
                                 const std::vector<int>& out, const CodegenOptions& options) {
  const ir::Dims& x = graph.type(node.inputs[0]).dims;
  if (ir::quant_reads_float_activations(op.format)) {
    const int64_t k = x.back(), n = graph.type(node.inputs[1]).dims[0];
    const int64_t m = ir::num_elements(x) / k;
    if (takes_tensor_cores(op, m, n, k, options))
      return bf16_tensor_core_matmul_kernel(node, in, out, m, n, k, options);
    return float_weight_matmul_kernel(graph, node, op, in, out, options);
  }
  const ir::Dims& w = graph.type(node.inputs[1]).dims;
  const int64_t k = x.back(), n = w[0], row_bytes = w[1];
  const int64_t m = ir::num_elements(x) / k, blocks = k / ir::kQuantBlock;
  const BlockFormat f = block_format(op.format);
  // Rows of x per thread block: as many as fit beside the quantized copies in shared memory.
  const auto shared_for = [&](int64_t rows) { return size_t(rows * (k + 8 * blocks)); };
  int64_t rows = std::min(m, kQuantRows);
  while (rows > 1 && int64_t(shared_for(rows)) > options.max_shared_bytes) --rows;
  if (int64_t(shared_for(rows)) > options.max_shared_bytes)
    fail(
        "cuda: {}: a row of {} activations needs {} bytes of shared memory, more than the {} a "
        "block has",
        what_of(node), k, shared_for(1), options.max_shared_bytes);

  const int per_warp = rows_per_warp(n, options);
  KernelLaunch kl = gemv_launch(node, in, out, m, n, rows, per_warp);
  kl.shared_bytes = shared_for(rows);
  const std::string body = fmt::format(
      R"(  constexpr long long M = {m}ll, N = {n}ll, K = {k}ll, ROW_BYTES = {row_bytes}ll;
  constexpr int KB = {blocks}, MT = {rows};
  extern __shared__ __align__(16) unsigned char yr_smem[];
  int* xq = (int*)yr_smem;                       // [MT][K] int8, as words of 4
  float* xd = (float*)(yr_smem + MT * K);        // [MT][KB] the blocks' scales
  float* xs = xd + MT * KB;                      // [MT][KB] what the format reads besides
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long m0 = (long long)blockIdx.y * MT;
  // Quantize: a warp a 32-element block, a lane an element.
  for (int t = warp; t < MT * KB; t += {warps}) {{
    const int r = t / KB, b = t % KB;
    const float v = m0 + r < M ? in0[(m0 + r) * K + b * 32 + lane] : 0.0f;
    const float amax = yr_warp_max(fabsf(v));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int q = yr_round_half_even(v * id);
    const int sum = yr_warp_isum(q);
    ((signed char*)xq)[r * K + b * 32 + lane] = (signed char)q;
    if (lane == 0) {{
      xd[t] = yr_round_f16(amax / 127.0f);
      xs[t] = {block_sum};
    }}
  }}
  __syncthreads();
  const int rows_here = M - m0 < MT ? int(M - m0) : MT;
  for (int j = 0; j < {per_warp}; ++j) {{
    const long long n = ((long long)blockIdx.x * {warps} + warp) * {per_warp} + j;
    if (n >= N) break;  // the same for every lane of the warp
    const unsigned char* row = in1 + n * ROW_BYTES;
    float acc[MT];
    for (int r = 0; r < MT; ++r) acc[r] = 0.0f;
    for (int b = lane; b < KB; b += 32) {{
      const unsigned short* blk = (const unsigned short*)(row + b * {block_bytes});
      {unpack}      for (int r = 0; r < MT; ++r) {{
        if (r < rows_here) {{
          const int* xr = xq + r * (K / 4) + b * 8;
          int sumi = 0;
          {dot}          acc[r] += {term};
        }}
      }}
    }}
    for (int r = 0; r < MT; ++r) {{
      const float v = yr_warp_sum(acc[r]);
      if (lane == 0 && r < rows_here) out0[(m0 + r) * N + n] = v;
    }}
  }}
)",
      fmt::arg("m", m), fmt::arg("n", n), fmt::arg("k", k), fmt::arg("row_bytes", row_bytes),
      fmt::arg("blocks", blocks), fmt::arg("rows", rows), fmt::arg("warps", kWarps),
      fmt::arg("per_warp", per_warp), fmt::arg("block_sum", block_sum_expr(op.format)),
      fmt::arg("block_bytes", f.bytes), fmt::arg("unpack", f.unpack), fmt::arg("dot", f.dot),
      fmt::arg("term", f.term));
  set_gemv_source(kl, body);
  return kl;
}

// Rows of the table gathered by id. An id outside the table cannot raise an error from a kernel:
// its row is written as NaN, which any check of the output finds (the reference executor raises).
KernelLaunch embedding_kernel(const ir::KernelGraph& graph, const ir::Node& node,
                              const std::vector<int>& in, const std::vector<int>& out) {
  const ir::TensorType& table = graph.type(node.inputs[0]);
  const int64_t vocab = table.dims[0], width = table.dims[1];
  const int64_t total = ir::num_elements(node.outputs[0].dims);
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "");
  kl.args = {in[0], in[1], out[0]};
  kl.grid = {unsigned(std::clamp<int64_t>((total + 255) / 256, 1, 8192)), 1, 1};
  kl.source =
      prelude() +
      entry(kl.name, 256,
            fmt::format("const {}* __restrict__ in0, const int* __restrict__ in1, {}* "
                        "__restrict__ out0",
                        ctype(table.dtype), ctype(node.outputs[0].dtype))) +
      fmt::format(
          R"(  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < {total}ll; i += gridDim.x * 256ll) {{
    const long long t = i / {width}ll, d = i % {width}ll;
    const int id = in1[t];
    const float v = id >= 0 && id < {vocab} ? yr_to_f(in0[(long long)id * {width}ll + d])
                                          : __int_as_float(0x7fc00000);
    yr_store(out0 + i, v);
  }}
}}
)",
          fmt::arg("total", total), fmt::arg("width", width), fmt::arg("vocab", vocab));
  kl.waits_on_prior_grids = true;
  return kl;
}

// A thread per rotated pair. The angle is computed in double, as the reference does: pos ·
// theta^(-2p/D) loses bits in float at long positions. A negative position (an error in the
// reference) writes NaN.
KernelLaunch rope_kernel(const ir::KernelGraph& graph, const ir::Node& node, const ir::RopeOp& op,
                         const std::vector<int>& in, const std::vector<int>& out) {
  const ir::Dims& dims = graph.type(node.inputs[0]).dims;
  const int64_t seq = dims[dims.size() - 3], heads = dims[dims.size() - 2], head_dim = dims.back();
  const int64_t pairs = ir::num_elements(dims) / 2;
  const bool interleaved = op.style == ir::RopeStyle::interleaved;
  KernelLaunch kl;
  kl.what = what_of(node);
  kl.name = kernel_name(node, "");
  kl.args = {in[0], in[1], out[0]};
  kl.grid = {unsigned(std::clamp<int64_t>((pairs + 255) / 256, 1, 8192)), 1, 1};
  kl.source =
      prelude() +
      entry(kl.name, 256,
            fmt::format("const {0}* __restrict__ in0, const int* __restrict__ in1, {1}* "
                        "__restrict__ out0",
                        ctype(graph.type(node.inputs[0]).dtype), ctype(node.outputs[0].dtype))) +
      fmt::format(
          R"(  constexpr long long HALF = {half}ll;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < {pairs}ll; i += gridDim.x * 256ll) {{
    const long long p = i % HALF, head = i / HALF;  // head counts every (outer, seq, head)
    const long long s = (head / {heads}ll) % {seq}ll;
    const long long base = head * {head_dim}ll;
    const long long ia = base + {ia}, ib = base + {ib};
    const int pos = in1[s];
    const double angle = double(pos) * pow({theta:.17e}, -2.0 * double(p) / {head_dim}.0);
    const double c = cos(angle), sn = sin(angle);
    const double a = yr_to_f(in0[ia]), b = yr_to_f(in0[ib]);
    const float nan = __int_as_float(0x7fc00000);
    yr_store(out0 + ia, pos < 0 ? nan : float(a * c - b * sn));
    yr_store(out0 + ib, pos < 0 ? nan : float(a * sn + b * c));
  }}
}}
)",
          fmt::arg("half", head_dim / 2), fmt::arg("pairs", pairs), fmt::arg("heads", heads),
          fmt::arg("seq", seq), fmt::arg("head_dim", head_dim),
          fmt::arg("ia", interleaved ? "2 * p" : "p"),
          fmt::arg("ib", interleaved ? "2 * p + 1" : "p + HALF"), fmt::arg("theta", op.theta));
  kl.waits_on_prior_grids = true;
  return kl;
}

std::string kernel_name(const ir::Node& node, const std::string& suffix) {
  return "yr_" + identifier(node.name) + suffix;
}

std::string what_of(const ir::Node& node) {
  return fmt::format("node '{}' ({})", node.name, ir::op_name(node.op));
}

std::string entry(const std::string& name, int threads, const std::string& params) {
  return fmt::format(
      "\nextern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n"
      "  yr_wait_prior_grids();\n",
      threads, name, params);
}

}  // namespace yirage::backend::cuda::detail
