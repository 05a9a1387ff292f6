// Register rows (see block_lowering.h): a fused node whose block graph is one row-wise chain, with
// elementwise ops, norms over the whole tile and a single loop iteration (ntrans: rms(X + α ⊙
// (rms(H) + X)), a block per row), keeps every value in registers. Each thread holds the same
// elements of every tile, 8 consecutive ones per 16-byte vector, so the ops need no shared memory
// and no barrier; only a norm's block reduction does.
//
// Why: the general frame stages the inputs by cp.async, then passes each op's tile through
// shared memory with a barrier after it. ntrans took 4.6 us a call that way at bs1 and 2.6-2.8 us
// in registers. A probe found no gain in more threads a row, nor in a row split over a cluster
// (docs/design/cuda-findings.md, row kernels).
//
// Two reductions of an iterator fit the same frame, each thread reducing its own elements'
// operands straight from global memory: a sum or mean over a dimension other than the last whose
// result has the chain's shape (a split kernel's partials added up), and a sum or mean over the
// last dimension, kept, whose result is one value per row of the chain's shape (the partial row
// sums). Such a row value takes one register per vector, since a vector's 8 elements share a row.
// That is the finish of split attention, which took 3.7-4.1 us a kernel through shared memory
// (docs/design/cuda-findings.md, attention). A tile of fewer than 8 elements a thread leaves
// some threads idle; norms, whose block reductions count every thread, need them all.
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

// The chain's shape: the first saver's tile.
const Dims& BlockLowering::rows_dims() const {
  for (const BlockNode& n : g_.nodes())
    if (std::holds_alternative<ir::OutputSaverOp>(n.op)) return node(n.inputs[0]).tile.dims;
  fail("cuda: fused node '{}' saves nothing", name_);
}

// A row value: the chain's shape with a last dimension of 1 (one register per vector).
bool BlockLowering::rows_row_value(int32_t id) const {
  Dims row = rows_dims();
  row.back() = 1;
  return rows_dims().back() != 1 && node(id).tile.dims == row;
}

// An iterator that only reductions read, each straight from global memory (rows_reduce()).
bool BlockLowering::rows_reduced_iterator(int32_t id) const {
  if (!std::holds_alternative<ir::InputIteratorOp>(node(id).op) ||
      schedule_.tiles[size_t(id)].readers == 0)
    return false;
  for (const BlockNode& n : g_.nodes())
    for (int32_t in : n.inputs)
      if (in == id && !std::holds_alternative<ir::ReduceOp>(n.op)) return false;
  return true;
}

// Whether reduction `id` is one register rows compute (see the top of this file).
bool BlockLowering::rows_reduction_fits(int32_t id) const {
  const auto& r = std::get<ir::ReduceOp>(node(id).op);
  const int32_t in = node(id).inputs[0];
  if ((r.fn != ir::ReduceFn::sum && r.fn != ir::ReduceFn::mean) || !rows_reduced_iterator(in))
    return false;
  const Dims& from = node(in).tile.dims;
  const size_t k = size_t(r.dim);
  if (k + 1 == from.size()) return r.keepdim && rows_row_value(id);
  Dims kept = from;
  kept.erase(kept.begin() + std::ptrdiff_t(k));
  if (r.keepdim) kept.insert(kept.begin() + std::ptrdiff_t(k), 1);
  int64_t inner = 1;
  for (size_t j = k + 1; j < from.size(); ++j) inner *= from[j];
  return node(id).tile.dims == rows_dims() && kept == rows_dims() && inner % kVector == 0 &&
         vector_rows(in);
}

// Whether the block graph is a register-row chain: one loop iteration; every tile the chain's
// shape (whose size gives each thread whole vectors), a row value of it, or an iterator only
// reductions read; only elementwise ops, norms over the whole tile, those reductions,
// accumulators (which one iteration makes copies) and savers.
bool BlockLowering::register_rows() const {
  if (!options_.register_rows || r_ != 1) return false;
  const auto& nodes = g_.nodes();
  if (std::none_of(nodes.begin(), nodes.end(), [](const BlockNode& n) {
        return std::holds_alternative<ir::OutputSaverOp>(n.op);
      }))
    return false;
  const Dims& dims = rows_dims();
  const int64_t width = ir::num_elements(dims);
  if (width % kVector != 0 || dims.back() % kVector != 0 || rows_per_thread() > kMaxPerThread)
    return false;
  const bool every_thread = width % (kBlockThreads * kVector) == 0;
  auto same = [&](int32_t id) { return node(id).tile.dims == dims; };
  // The same shape, or both row values.
  auto like = [&](int32_t id, int32_t other) {
    return (same(id) && same(other)) || (rows_row_value(id) && rows_row_value(other));
  };
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    const BlockNode& n = node(id);
    for (int32_t in : n.inputs)
      if (in >= id) return false;  // the ops are emitted in node order
    const bool fits = std::visit(
        ir::Overloaded{
            // A norm's weight may be a [width] tile: its element e is the row's too.
            [&](const ir::InputIteratorOp&) {
              return elements(id) == width || rows_reduced_iterator(id);
            },
            [&](const ir::UnaryOp&) { return like(id, n.inputs[0]); },
            [&](const ir::BinaryOp&) {
              const int32_t a = n.inputs[0], b = n.inputs[1];
              if (rows_row_value(id)) return rows_row_value(a) && rows_row_value(b);
              return same(id) && (same(a) || rows_row_value(a)) && (same(b) || rows_row_value(b));
            },
            [&](const ir::RmsNormOp& r) {
              return every_thread && same(id) && same(n.inputs[0]) &&
                     ir::num_elements(r.normalized_shape) == width;
            },
            [&](const ir::LayerNormOp& l) {
              return every_thread && same(id) && same(n.inputs[0]) &&
                     ir::num_elements(l.normalized_shape) == width;
            },
            [&](const ir::ReduceOp&) { return rows_reduction_fits(id); },
            [&](const ir::AccumulatorOp& a) {
              return like(id, n.inputs[0]) && a.fn != ir::AccumFn::rescaled_sum;
            },
            [&](const ir::OutputSaverOp&) { return same(n.inputs[0]); },
            [&](const auto&) { return false; },  // matmuls, other reductions, concatenations
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

// Lanes that share each vector: where the tile has fewer vectors than the block has threads, the
// idle threads would otherwise leave a reduction's loads to a few (the finish of gqa bs1 split
// 32 ways, 16 vectors a block: 6.6 us a kernel with a thread a vector). Up to a warp's 32 lanes
// then split the reduced dimension, each loading every `lanes`-th operand, and meet by shuffles;
// every lane of the group holds the results, and the first stores them.
int64_t BlockLowering::rows_lanes() const {
  const int64_t vectors = ir::num_elements(rows_dims()) / kVector;
  int64_t lanes = 1;
  while (lanes < 32 && vectors * lanes * 2 <= kBlockThreads) lanes *= 2;
  return lanes;
}

// `each` (code in e, the vector's first element) for each of this thread's vectors. A tile of
// fewer vectors than the block has lane groups leaves the last groups without any.
std::string BlockLowering::rows_vectors(const std::string& each) const {
  const int64_t width = ir::num_elements(rows_dims()), groups = kBlockThreads / rows_lanes();
  return fmt::format(
      "#pragma unroll\n"
      "  for (int p = 0; p < {vectors}; ++p) {{\n"
      "    const int e = (p * {groups} + {group}) * {per};\n"
      "    {guard}{{\n{each}    }}\n"
      "  }}\n",
      fmt::arg("vectors", rows_per_thread() / kVector), fmt::arg("groups", groups),
      fmt::arg("group", rows_lanes() == 1 ? "(int)threadIdx.x"
                                          : fmt::format("(int)threadIdx.x / {}", rows_lanes())),
      fmt::arg("per", kVector), fmt::arg("each", each),
      fmt::arg("guard", width % (groups * kVector) == 0 ? std::string()
                                                        : fmt::format("if (e < {}) ", width)));
}

int64_t BlockLowering::rows_per_thread() const {
  const int64_t vectors = ir::num_elements(rows_dims()) / kVector;
  const int64_t groups = kBlockThreads / rows_lanes();
  return (vectors + groups - 1) / groups * kVector;
}

// Reduction `id` of an iterator (rows_reduction_fits()): each lane group adds up its elements'
// operands, its lanes taking every rows_lanes()-th one, all of a lane's loads unrolled so that
// they are in flight at once; then the lanes' sums meet by shuffles. The shuffles run outside the
// tile's guard, so that every lane of a warp takes part (a group's lanes are in one warp).
std::string BlockLowering::rows_reduce(int32_t id) const {
  const auto& r = std::get<ir::ReduceOp>(node(id).op);
  const int32_t in = node(id).inputs[0];
  const auto& it = std::get<ir::InputIteratorOp>(node(in).op);
  const ir::DType dtype = g_.operands()[size_t(it.operand)].dtype;
  const Dims& from = node(in).tile.dims;
  const size_t k = size_t(r.dim);
  const int64_t count = from[k], lanes = rows_lanes();
  const int64_t width = ir::num_elements(rows_dims()), groups = kBlockThreads / lanes;
  const std::string scale =
      r.fn == ir::ReduceFn::mean ? fmt::format(" * {:.9e}f", 1.0 / double(count)) : "";
  const bool row = rows_row_value(id);
  const int64_t sums = row ? 1 : kVector;  // floats a lane adds up per vector
  std::string load;
  if (row) {
    load = fmt::format(
        "a[0] += yr_to_f(*({}));",
        tile_source(in, "0", fmt::format("(e / {} * {} + j)", rows_dims().back(), count)));
  } else {
    int64_t inner = 1;
    for (size_t j = k + 1; j < from.size(); ++j) inner *= from[j];
    const int64_t vec = 16 / int64_t(ir::dtype_size(dtype));
    load = fmt::format(
        "\n#pragma unroll\n"
        "          for (int u = 0; u < {per}; u += {vec}) {{\n"
        "            const uint4 w = *reinterpret_cast<const uint4*>({src});\n"
        "            const {type}* const h = reinterpret_cast<const {type}*>(&w);\n"
        "#pragma unroll\n"
        "            for (int q = 0; q < {vec}; ++q) a[u + q] += yr_to_f(h[q]);\n"
        "          }}",
        fmt::arg("per", kVector), fmt::arg("vec", vec), fmt::arg("type", ctype(dtype)),
        fmt::arg("src", tile_source(in, "0",
                                    fmt::format("((e + u) / {0} * {1} + j * {0} + (e + u) % {0})",
                                                inner, count * inner))));
  }
  std::string meet;
  if (lanes > 1)
    meet = fmt::format(
        "#pragma unroll\n"
        "    for (int off = {lanes} / 2; off > 0; off >>= 1)\n"
        "#pragma unroll\n"
        "      for (int q = 0; q < {sums}; ++q) a[q] += __shfl_xor_sync(0xffffffffu, a[q], off);\n",
        fmt::arg("lanes", lanes), fmt::arg("sums", sums));
  return fmt::format(
      "  float v{id}[{regs}];\n"
      "#pragma unroll\n"
      "  for (int p = 0; p < {vectors}; ++p) {{\n"
      "    const int e = (p * {groups} + {group}) * {per};\n"
      "    float a[{sums}] = {{}};\n"
      "    if (e < {width}) {{\n"
      "#pragma unroll\n"
      "      for (int jj = 0; jj < {steps}; ++jj) {{\n"
      "        const int j = jj * {lanes} + {lane};\n"
      "        {inner_guard}{{ {load} }}\n"
      "      }}\n"
      "    }}\n"
      "{meet}"
      "#pragma unroll\n"
      "    for (int q = 0; q < {sums}; ++q) v{id}[p * {sums} + q] = a[q]{scale};\n"
      "  }}\n",
      fmt::arg("id", id), fmt::arg("regs", rows_per_thread() / kVector * sums),
      fmt::arg("vectors", rows_per_thread() / kVector), fmt::arg("groups", groups),
      fmt::arg("group",
               lanes == 1 ? "(int)threadIdx.x" : fmt::format("(int)threadIdx.x / {}", lanes)),
      fmt::arg("per", kVector), fmt::arg("sums", sums), fmt::arg("width", width),
      fmt::arg("steps", (count + lanes - 1) / lanes), fmt::arg("lanes", lanes),
      fmt::arg("lane", lanes == 1 ? "0" : fmt::format("(int)threadIdx.x % {}", lanes)),
      fmt::arg("inner_guard", count % lanes == 0 ? "" : fmt::format("if (j < {}) ", count)),
      fmt::arg("load", load), fmt::arg("meet", meet), fmt::arg("scale", scale));
}

// Node `id` computed elementwise from its operands' registers: `expr` in terms of element i.
// A row value's registers are one per vector: there i is the vector.
std::string BlockLowering::rows_elementwise(int32_t id, const std::string& expr) const {
  const int64_t count = rows_row_value(id) ? rows_per_thread() / kVector : rows_per_thread();
  return fmt::format(
      "  float v{0}[{1}];\n"
      "#pragma unroll\n"
      "  for (int i = 0; i < {1}; ++i) v{0}[i] = {2};\n",
      id, count, expr);
}

// Operand `in` of node `id` at its element i: a row value read by a full-shaped node takes the
// vector's register.
std::string BlockLowering::rows_operand(int32_t id, int32_t in) const {
  return rows_row_value(in) && !rows_row_value(id) ? fmt::format("v{}[i / {}]", in, kVector)
                                                   : fmt::format("v{}[i]", in);
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
  if (rows_lanes() > 1)
    each = fmt::format("      if (threadIdx.x % {} == 0) {{\n{}      }}\n", rows_lanes(), each);
  return rows_vectors(each);
}

std::string BlockLowering::rows_kernel(const std::string& kname) const {
  // Every iterator's loads go out first, all in flight at once.
  std::string loads, body;
  int saver_count = 0;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    const BlockNode& n = node(id);
    auto operand = [&](size_t i) { return rows_operand(id, n.inputs[i]); };
    std::visit(
        ir::Overloaded{
            [&](const ir::InputIteratorOp&) {
              if (!rows_reduced_iterator(id)) loads += rows_load(id);
            },
            [&](const ir::ReduceOp&) { loads += rows_reduce(id); },
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
  yr_wait_prior_grids();
  // Register rows: the group of {lanes} lane(s) g = t / {lanes} holds elements
  // (p * {groups} + g) * {per} + u of every tile.
  extern __shared__ __align__(16) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem);
{loads}{body}}}
)",
      fmt::arg("threads", kBlockThreads), fmt::arg("name", kname), fmt::arg("lanes", rows_lanes()),
      fmt::arg("groups", kBlockThreads / rows_lanes()), fmt::arg("params", kernel_params()),
      fmt::arg("per", kVector), fmt::arg("loads", loads), fmt::arg("body", body));
}

}  // namespace yirage::backend::cuda::detail
