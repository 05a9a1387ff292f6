// Register rows (see block_lowering.h): a fused node whose block graph is one row-wise chain, with
// elementwise ops, norms over the whole tile and a single loop iteration (ntrans: rms(X + α ⊙
// (rms(H) + X)), a block per row), keeps every value in registers. Each thread holds the same
// elements of every tile, 8 consecutive ones per 16-byte vector, so the ops need no shared memory
// and no barrier; only a norm's block reduction does.
//
// Why: the general frame stages the inputs by cp.async, then passes each op's tile through
// shared memory with a barrier after it. ntrans took 4.6 us a call that way at bs1 and 2.6-2.8 us
// in registers (bench/results/register_rows_h200.txt). A probe found no gain in more threads a
// row, nor in a row split over a cluster (bench/row_probe.cu).
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"
#include "support/error.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

// Elements a thread keeps of each tile, at most: registers for a handful of live tiles.
constexpr int64_t kMaxPerThread = 64;
constexpr int64_t kVector = 8;  // elements a thread takes together: 16 bytes of a 16-bit tile

}  // namespace

// Whether the block graph is a register-row chain: one loop iteration; every tile but the
// savers' the same shape, whose size gives each thread whole vectors; only elementwise ops, norms
// over the whole tile, accumulators (which one iteration makes copies) and savers.
bool BlockLowering::register_rows() const {
  if (!options_.register_rows || r_ != 1) return false;
  const auto& nodes = g_.nodes();
  const auto saver = std::find_if(nodes.begin(), nodes.end(), [](const BlockNode& n) {
    return std::holds_alternative<ir::OutputSaverOp>(n.op);
  });
  if (saver == nodes.end()) return false;
  const Dims& dims = node(saver->inputs[0]).tile.dims;
  const int64_t width = ir::num_elements(dims);
  if (width % (kBlockThreads * kVector) != 0 || width / kBlockThreads > kMaxPerThread) return false;
  auto same = [&](int32_t id) { return node(id).tile.dims == dims; };
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    const BlockNode& n = node(id);
    for (int32_t in : n.inputs)
      if (in >= id) return false;  // the ops are emitted in node order
    const bool fits = std::visit(
        ir::Overloaded{
            // A norm's weight may be a [width] tile: its element e is the row's too.
            [&](const ir::InputIteratorOp&) { return elements(id) == width; },
            [&](const ir::UnaryOp&) { return same(id) && same(n.inputs[0]); },
            [&](const ir::BinaryOp&) { return same(id) && same(n.inputs[0]) && same(n.inputs[1]); },
            [&](const ir::RmsNormOp& r) {
              return same(id) && same(n.inputs[0]) && ir::num_elements(r.normalized_shape) == width;
            },
            [&](const ir::LayerNormOp& l) {
              return same(id) && same(n.inputs[0]) && ir::num_elements(l.normalized_shape) == width;
            },
            [&](const ir::AccumulatorOp& a) {
              return same(id) && same(n.inputs[0]) && a.fn != ir::AccumFn::rescaled_sum;
            },
            [&](const ir::OutputSaverOp&) { return same(n.inputs[0]); },
            [&](const auto&) { return false; },  // matmuls, reductions, concatenations
        },
        n.op);
    if (!fits) return false;
  }
  return true;
}

// Iterator `id`'s elements into this thread's registers v<id>: 16-byte vectors where its rows
// are whole vectors, else one element at a time.
std::string BlockLowering::rows_load(int32_t id) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const ir::DType dtype = g_.operands()[size_t(it.operand)].dtype;
  const int64_t vec = 16 / int64_t(ir::dtype_size(dtype));
  std::string each;
  if (vector_rows(id) && vec <= kVector) {
    each = fmt::format(
        "#pragma unroll\n"
        "      for (int u = 0; u < {per}; u += {vec}) {{\n"
        "        const uint4 w = *reinterpret_cast<const uint4*>({src});\n"
        "        const {type}* const h = reinterpret_cast<const {type}*>(&w);\n"
        "#pragma unroll\n"
        "        for (int q = 0; q < {vec}; ++q) v{id}[p * {per} + u + q] = yr_to_f(h[q]);\n"
        "      }}\n",
        fmt::arg("per", kVector), fmt::arg("vec", vec),
        fmt::arg("src", tile_source(id, "0", "(e + u)")), fmt::arg("type", ctype(dtype)),
        fmt::arg("id", id));
  } else {
    each = fmt::format(
        "#pragma unroll\n"
        "      for (int u = 0; u < {}; ++u) v{}[p * {} + u] = yr_to_f(*({}));\n",
        kVector, id, kVector, tile_source(id, "0", "(e + u)"));
  }
  return fmt::format("  float v{}[{}];\n", id, rows_per_thread()) + rows_vectors(each);
}

// `each` (code in e, the vector's first element) for each of this thread's vectors.
std::string BlockLowering::rows_vectors(const std::string& each) const {
  return fmt::format(
      "#pragma unroll\n"
      "  for (int p = 0; p < {vectors}; ++p) {{\n"
      "    const int e = (p * {threads} + threadIdx.x) * {per};\n"
      "    {{\n{each}    }}\n"
      "  }}\n",
      fmt::arg("vectors", rows_per_thread() / kVector), fmt::arg("threads", kBlockThreads),
      fmt::arg("per", kVector), fmt::arg("each", each));
}

int64_t BlockLowering::rows_per_thread() const {
  return ir::num_elements(node(0).tile.dims) / kBlockThreads;
}

// Node `id` computed elementwise from its operands' registers: `expr` in terms of element i.
std::string BlockLowering::rows_elementwise(int32_t id, const std::string& expr) const {
  return fmt::format(
      "  float v{0}[{1}];\n"
      "#pragma unroll\n"
      "  for (int i = 0; i < {1}; ++i) v{0}[i] = {2};\n",
      id, rows_per_thread(), expr);
}

// rms_norm / layer_norm over the whole tile: the block's sums, then each thread's elements.
std::string BlockLowering::rows_norm(int32_t id, double eps, bool layer, bool has_weight,
                                     bool has_bias) const {
  const BlockNode& n = node(id);
  const int64_t per = rows_per_thread(), width = per * kBlockThreads;
  const int32_t x = n.inputs[0];
  std::string s = fmt::format("  float v{}[{}];\n  {{\n    float mean = 0.0f;\n", id, per);
  if (layer)
    s += fmt::format(
        "    {{ float a = 0.0f;\n"
        "#pragma unroll\n"
        "      for (int i = 0; i < {0}; ++i) a += v{1}[i];\n"
        "      mean = yr_block_reduce(a, red, false) / {2}.0f; }}\n",
        per, x, width);
  std::string y = fmt::format("(v{}[i] - mean) * scale", x);
  if (has_weight) y = fmt::format("{} * v{}[i]", y, n.inputs[1]);
  if (has_bias) y = fmt::format("{} + v{}[i]", y, n.inputs[has_weight ? 2 : 1]);
  s += fmt::format(
      "    float a = 0.0f;\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < {per}; ++i) {{ const float d = v{x}[i] - mean; a += d * d; }}\n"
      "    const float scale = 1.0f / sqrtf(yr_block_reduce(a, red, false) / {width}.0f + "
      "{eps:.9e}f);\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < {per}; ++i) v{id}[i] = {y};\n"
      "  }}\n",
      fmt::arg("per", per), fmt::arg("x", x), fmt::arg("width", width), fmt::arg("eps", float(eps)),
      fmt::arg("id", id), fmt::arg("y", y));
  return s;
}

// Saver `id`'s tile from its input's registers into output `output`: 16-byte stores where the
// output's rows are whole vectors.
std::string BlockLowering::rows_save(int32_t id, int output) const {
  const BlockNode& n = node(id);
  const ir::TensorType out = g_.output_types()[size_t(output)];
  const Dims& tile = n.tile.dims;
  const Dims strides = ir::row_major_strides(out.dims);
  const std::string base = saver_base(id, output);
  const int32_t in = n.inputs[0];
  const int64_t vec = 16 / int64_t(ir::dtype_size(out.dtype));
  const std::string t = ctype(out.dtype);
  const std::string address =
      fmt::format("out{} + (0ll{} + {})", output, base, tile_offset(tile, strides, "(e + u)"));
  std::string each;
  if (tile.back() % vec == 0 && out.dims.back() % vec == 0 && vec <= kVector)
    each = fmt::format(
        "#pragma unroll\n"
        "      for (int u = 0; u < {per}; u += {vec}) {{\n"
        "        __align__(16) {type} w[{vec}];\n"
        "#pragma unroll\n"
        "        for (int q = 0; q < {vec}; ++q) yr_store(w + q, v{in}[p * {per} + u + q]);\n"
        "        *reinterpret_cast<uint4*>({address}) = *reinterpret_cast<const uint4*>(w);\n"
        "      }}\n",
        fmt::arg("per", kVector), fmt::arg("vec", vec), fmt::arg("type", t), fmt::arg("in", in),
        fmt::arg("address", address));
  else
    each = fmt::format(
        "#pragma unroll\n"
        "      for (int u = 0; u < {0}; ++u) yr_store({1}, v{2}[p * {0} + u]);\n",
        kVector, address, in);
  return rows_vectors(each);
}

std::string BlockLowering::rows_kernel(const std::string& kname) const {
  // Every iterator's loads go out first, all in flight at once.
  std::string loads, body;
  int saver_count = 0;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    const BlockNode& n = node(id);
    auto operand = [&](size_t i) { return fmt::format("v{}[i]", n.inputs[i]); };
    std::visit(
        ir::Overloaded{
            [&](const ir::InputIteratorOp&) { loads += rows_load(id); },
            [&](const ir::UnaryOp& u) { body += rows_elementwise(id, unary_expr(u, operand(0))); },
            [&](const ir::BinaryOp& b) {
              body += rows_elementwise(id, binary_expr(b.fn, operand(0), operand(1)));
            },
            [&](const ir::RmsNormOp& r) {
              body += rows_norm(id, r.eps, false, r.has_weight, false);
            },
            [&](const ir::LayerNormOp& l) {
              body += rows_norm(id, l.eps, true, l.has_weight, l.has_bias);
            },
            [&](const ir::AccumulatorOp& a) {
              // One iteration: the accumulated value is its input, finished as the frame would.
              body += rows_elementwise(
                  id, a.fn == ir::AccumFn::rms
                          ? fmt::format("sqrtf({} + {:.9e}f)", operand(0), float(a.eps))
                          : operand(0));
            },
            [&](const ir::OutputSaverOp&) { body += rows_save(id, saver_count++); },
            [&](const auto&) {
              fail("cuda: fused node '{}': block op {} at node {} is not a register-row op", name_,
                   ir::block_op_label(n.op), id);
            },
        },
        n.op);
  }
  return fmt::format(
      R"(
extern "C" __global__ void __launch_bounds__({threads}) {name}({params}) {{
  // Register rows: thread t holds elements (p * {threads} + t) * {per} + u of every tile.
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem);
{loads}{body}}}
)",
      fmt::arg("threads", kBlockThreads), fmt::arg("name", kname),
      fmt::arg("params", kernel_params()), fmt::arg("per", kVector), fmt::arg("loads", loads),
      fmt::arg("body", body));
}

}  // namespace yirage::backend::cuda::detail
