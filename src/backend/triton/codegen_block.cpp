// One block graph as one Triton kernel: a program per grid block, tiles as register tensors.
//
// Triton's tensors have power-of-two extents, so every tile is held at its extents rounded up to
// powers of two. Iterators load the padding as zeros, and every place where the padding could
// reach a real element masks it first: a reduction along a padded dim, a norm's statistics, and a
// product along a padded K, whose operands' padding may hold anything once elementwise ops ran on
// it (exp(0) is 1, 1/0 is inf). Savers store only the real elements.
#include <algorithm>
#include <map>
#include <numeric>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/triton/codegen.h"
#include "ir/block_graph.h"
#include "support/error.h"

namespace yirage::backend::triton::detail {
namespace {

using ir::BlockPhase;
using ir::Dims;

// The extent a tile dim is held at. Triton's tensors have power-of-two extents, and tl.dot wants
// at least 16 along each of them, so extents above 4 are held at a power of two of at least 16.
// Extents up to 4 (1 among them, which must still broadcast) keep their own power of two: they
// are the K chunks and the few rows of products too small for tl.dot anyway, where padding to
// 16 would multiply a broadcast product's work by up to 8 for nothing. The held extent depends
// on the real one alone, so tiles whose extents along a dim are equal, or one of them 1, hold
// equal or broadcasting extents there, and elementwise ops combine them as they are.
int64_t power_of_two_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return n <= 4 ? p : std::max<int64_t>(p, 16);
}

Dims padded_dims(const Dims& dims) {
  Dims padded;
  for (int64_t d : dims) padded.push_back(power_of_two_at_least(d));
  return padded;
}

// A Python float literal that reads back as `v` in f32 arithmetic.
std::string py_float(double v) {
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  std::string text = fmt::format("{:.9g}", v);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string shape_list(const Dims& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// tl.arange along `axis` of a rank-`rank` tensor, broadcastable against it.
std::string axis_index(size_t rank, size_t axis, int64_t padded) {
  std::string index = fmt::format("tl.arange(0, {})", padded);
  if (rank <= 1) return index;
  std::vector<std::string> subscript(rank, "None");
  subscript[axis] = ":";
  return fmt::format("{}[{}]", index, fmt::join(subscript, ", "));
}

std::string dtype_of(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::f32: return "tl.float32";
    case ir::DType::f16: return "tl.float16";
    case ir::DType::bf16: return "tl.bfloat16";
    case ir::DType::i32: return "tl.int32";
    case ir::DType::i8:
    case ir::DType::u8: break;
  }
  fail("triton: dtype {} is not supported by the Triton code generator", ir::dtype_name(dtype));
}

std::string unary(const ir::UnaryOp& op, const std::string& x) {
  switch (op.fn) {
    case ir::UnaryFn::exp: return fmt::format("tl.exp({})", x);
    case ir::UnaryFn::silu: return fmt::format("{0} / (1.0 + tl.exp(-{0}))", x);
    case ir::UnaryFn::gelu:
      return fmt::format("0.5 * {0} * (1.0 + tl.math.erf({0} * 0.7071067811865476))", x);
    case ir::UnaryFn::relu: return fmt::format("tl.maximum({}, 0.0)", x);
    case ir::UnaryFn::sqrt: return fmt::format("tl.sqrt({})", x);
    case ir::UnaryFn::rsqrt: return fmt::format("1.0 / tl.sqrt({})", x);
    case ir::UnaryFn::square: return fmt::format("{0} * {0}", x);
    case ir::UnaryFn::neg: return fmt::format("-{}", x);
    case ir::UnaryFn::reciprocal: return fmt::format("1.0 / {}", x);
    case ir::UnaryFn::mul_scalar: return fmt::format("{} * {}", x, py_float(op.scalar));
  }
  fail("triton: unknown unary function");
}

std::string binary(ir::BinaryFn fn, const std::string& a, const std::string& b,
                   const std::string& what) {
  switch (fn) {
    case ir::BinaryFn::add: return fmt::format("{} + {}", a, b);
    case ir::BinaryFn::sub: return fmt::format("{} - {}", a, b);
    case ir::BinaryFn::mul: return fmt::format("{} * {}", a, b);
    case ir::BinaryFn::div: return fmt::format("{} / {}", a, b);
    case ir::BinaryFn::pow: break;
  }
  // Triton has no pow that its interpreter runs, so CI could not check one.
  fail("triton: {}: binary op {} has no Triton lowering", what, ir::binary_name(fn));
}

class BlockEmitter {
 public:
  BlockEmitter(const ir::BlockGraph& g, const std::string& what) : g_(g), what_(what) {}

  std::string function(const std::string& name) {
    std::vector<std::string> params;
    for (size_t i = 0; i < g_.operands().size(); ++i) params.push_back(fmt::format("p{}", i));
    for (size_t i = 0; i < g_.output_types().size(); ++i) params.push_back(fmt::format("o{}", i));
    std::string head = fmt::format("@triton.jit\ndef {}({}):\n", name, fmt::join(params, ", "));
    for (int a = 0; a < ir::kGridAxes; ++a)
      if (g_.grid().extent[size_t(a)] > 1)
        head += fmt::format("    b{0} = tl.program_id({0})\n", a);
    const std::vector<ir::BlockNode>& nodes = g_.nodes();
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) accumulator_init(int32_t(id));
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::InputIteratorOp>(nodes[id].op)) load_setup(int32_t(id));
    line(1, fmt::format("for it in range({}):", g_.forloop_range()));
    for (size_t id = 0; id < nodes.size(); ++id)
      if (g_.phase(int32_t(id)) == BlockPhase::in_loop) node(int32_t(id), 2);
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) accumulator_fold(int32_t(id));
    int output = 0;
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op))
        accumulator_finish(int32_t(id));
      else if (g_.phase(int32_t(id)) == BlockPhase::saver)
        save(int32_t(id), output++);
      else if (g_.phase(int32_t(id)) == BlockPhase::post_loop)
        node(int32_t(id), 1);
    }
    return head + prologue_ + text_;
  }

 private:
  const ir::BlockNode& at(int32_t id) const { return g_.nodes()[size_t(id)]; }
  const Dims& real(int32_t id) const { return at(id).tile.dims; }
  Dims padded(int32_t id) const { return padded_dims(real(id)); }
  static std::string var(int32_t id) { return fmt::format("t{}", id); }

  void line(int indent, const std::string& text) {
    text_ += std::string(size_t(indent) * 4, ' ') + text + "\n";
  }

  // The mask of the real elements along `axis` of a tile of `dims`, or "" where nothing is
  // padded: a variable computed once, before the loop.
  std::string axis_mask(const Dims& dims, size_t axis) {
    const int64_t padded = power_of_two_at_least(dims[axis]);
    if (padded == dims[axis]) return "";
    const std::string expr =
        fmt::format("{} < {}", axis_index(dims.size(), axis, padded), dims[axis]);
    auto [at, added] = masks_.emplace(expr, fmt::format("m_{}", masks_.size()));
    if (added) prologue_ += fmt::format("    {} = {}\n", at->second, expr);
    return at->second;
  }
  std::string tile_mask(const Dims& dims) {
    std::vector<std::string> masks;
    for (size_t axis = 0; axis < dims.size(); ++axis)
      if (std::string m = axis_mask(dims, axis); !m.empty()) masks.push_back(m);
    return fmt::format("{}", fmt::join(masks, " & "));
  }
  // `x` (a tile of `dims`) with its padding along `axes` replaced by `fill`.
  std::string masked(const std::string& x, const Dims& dims, const std::vector<size_t>& axes,
                     const std::string& fill) {
    std::vector<std::string> masks;
    for (size_t axis : axes)
      if (std::string m = axis_mask(dims, axis); !m.empty()) masks.push_back(m);
    if (masks.empty()) return x;
    return fmt::format("tl.where({}, {}, {})", fmt::join(masks, " & "), x, fill);
  }

  // The element offsets of a tile of `tile` dims at `origin` (per dim, a Python expression) in a
  // row-major tensor of `whole` dims.
  static std::string offsets(const Dims& whole, const Dims& tile,
                             const std::vector<std::string>& origin) {
    const Dims strides = ir::row_major_strides(whole);
    std::vector<std::string> terms;
    for (size_t k = 0; k < tile.size(); ++k) {
      std::string index = axis_index(tile.size(), k, power_of_two_at_least(tile[k]));
      if (!origin[k].empty()) index = fmt::format("({} + {})", origin[k], index);
      terms.push_back(strides[k] == 1 ? index : fmt::format("{} * {}", index, strides[k]));
    }
    if (terms.empty()) return "0";
    return fmt::format("{}", fmt::join(terms, " + "));
  }

  // Before the loop: the addresses of iterator `id`'s tile in iteration 0, and its mask. The
  // loop only adds the iteration's step, so the index arithmetic runs once a block.
  void load_setup(int32_t id) {
    const auto& it = std::get<ir::InputIteratorOp>(at(id).op);
    const Dims& tile = real(id);
    const Dims& whole = g_.operands()[size_t(it.operand)].dims;
    const ir::IteratorSteps steps = ir::iterator_steps(it, tile, g_.forloop_range());
    std::vector<std::string> origin(tile.size());
    for (int a = 0; a < ir::kGridAxes; ++a) {
      const int d = it.imap[size_t(a)];
      if (d == ir::kReplicate || g_.grid().extent[size_t(a)] == 1) continue;
      origin[size_t(d)] = fmt::format("b{} * {}", a, steps.block[size_t(a)]);
    }
    line(1, fmt::format("a{} = p{} + {}", id, it.operand, offsets(whole, tile, origin)));
    if (const std::string mask = tile_mask(tile); !mask.empty())
      line(1, fmt::format("k{} = {}", id, mask));
  }

  void load(int32_t id, const ir::InputIteratorOp& it, int indent) {
    const Dims& tile = real(id);
    std::string address = fmt::format("a{}", id);
    if (it.fmap != ir::kReplicate && g_.forloop_range() > 1) {
      const Dims strides = ir::row_major_strides(g_.operands()[size_t(it.operand)].dims);
      const int64_t step = ir::iterator_steps(it, tile, g_.forloop_range()).loop;
      address += fmt::format(" + it * {}", step * strides[size_t(it.fmap)]);
    }
    const bool masked = !tile_mask(tile).empty();
    const bool f32 = g_.operands()[size_t(it.operand)].dtype == ir::DType::f32;
    line(indent, fmt::format("{} = tl.load({}{}){}", var(id), address,
                             masked ? fmt::format(", mask=k{}, other=0.0", id) : "",
                             f32 ? "" : ".to(tl.float32)"));
  }

  void save(int32_t id, int output) {
    const auto& omap = std::get<ir::OutputSaverOp>(at(id).op).omap;
    const Dims& tile = real(id);
    const Dims whole = g_.output_types()[size_t(output)].dims;
    std::vector<std::string> origin(tile.size());
    for (int a = 0; a < ir::kGridAxes; ++a) {
      const int d = omap[size_t(a)];
      if (d != ir::kReplicate && g_.grid().extent[size_t(a)] > 1)
        origin[size_t(d)] = fmt::format("b{} * {}", a, tile[size_t(d)]);
    }
    const std::string mask = tile_mask(tile);
    const ir::DType dtype = at(id).tile.dtype;
    line(1, fmt::format("tl.store(o{} + {}, {}{}{})", output, offsets(whole, tile, origin),
                        var(at(id).inputs[0]),
                        dtype == ir::DType::f32 ? "" : fmt::format(".to({})", dtype_of(dtype)),
                        mask.empty() ? "" : fmt::format(", mask={}", mask)));
  }

  void node(int32_t id, int indent) {
    const ir::BlockNode& n = at(id);
    auto in = [&](size_t i) { return var(n.inputs[i]); };
    std::visit(ir::Overloaded{
                   [&](const ir::InputIteratorOp& it) { load(id, it, indent); },
                   [&](const ir::UnaryOp& u) { line(indent, var(id) + " = " + unary(u, in(0))); },
                   [&](const ir::BinaryOp& b) {
                     line(indent, var(id) + " = " + binary(b.fn, in(0), in(1), what_));
                   },
                   [&](const ir::MatmulOp&) { matmul(id, indent); },
                   [&](const ir::ReduceOp& r) { reduce(id, r, indent); },
                   [&](const ir::ReduceToWidthOp& r) { reduce_to_width(id, r, indent); },
                   [&](const ir::RmsNormOp& r) {
                     norm(id, r.normalized_shape.size(), r.eps, false, r.has_weight, false, indent);
                   },
                   [&](const ir::LayerNormOp& l) {
                     norm(id, l.normalized_shape.size(), l.eps, true, l.has_weight, l.has_bias,
                          indent);
                   },
                   [&](const auto& other) {
                     fail("triton: {}: block op {} has no Triton lowering", what_,
                          ir::block_op_label(ir::BlockOp(other)));
                   },
               },
               n.op);
  }

  // A sum or max of `x` (a tile of `dims`) over `axes`, each kept as extent 1.
  std::string reduced(std::string x, const Dims& dims, const std::vector<size_t>& axes,
                      bool is_max) {
    x = masked(x, dims, axes, is_max ? "float(\"-inf\")" : "0.0");
    for (size_t axis : axes)
      x = fmt::format("tl.{}({}, axis={}, keep_dims=True)", is_max ? "max" : "sum", x, axis);
    return x;
  }

  void reduce(int32_t id, const ir::ReduceOp& r, int indent) {
    const int32_t x = at(id).inputs[0];
    const Dims& dims = real(x);
    const size_t axis = size_t(r.dim);
    std::string value =
        masked(var(x), dims, {axis}, r.fn == ir::ReduceFn::max ? "float(\"-inf\")" : "0.0");
    value =
        fmt::format("tl.{}({}, axis={}, keep_dims={})", r.fn == ir::ReduceFn::max ? "max" : "sum",
                    value, axis, r.keepdim ? "True" : "False");
    if (r.fn == ir::ReduceFn::mean)
      value = fmt::format("{} / {}", value, py_float(double(dims[axis])));
    line(indent, var(id) + " = " + value);
  }

  // Sums each run of E/width elements of `dim`. E and width held unpadded split as a reshape;
  // otherwise
  // a selection tensor [E, width] picks each run, the padding of E selecting nothing.
  void reduce_to_width(int32_t id, const ir::ReduceToWidthOp& r, int indent) {
    const int32_t x = at(id).inputs[0];
    const Dims& dims = real(x);
    const size_t axis = size_t(r.dim);
    const int64_t extent = dims[axis], run = extent / r.width;
    if (r.width == 1) {
      line(indent, var(id) + " = " + reduced(var(x), dims, {axis}, false));
      return;
    }
    if (power_of_two_at_least(extent) == extent && power_of_two_at_least(r.width) == r.width) {
      Dims split = padded(x);
      split[axis] = r.width;
      split.insert(split.begin() + std::ptrdiff_t(axis) + 1, run);
      line(indent, fmt::format("{} = tl.sum(tl.reshape({}, {}), axis={})", var(id), var(x),
                               shape_list(split), axis + 1));
      return;
    }
    const size_t rank = dims.size() + 1;
    const int64_t pe = power_of_two_at_least(extent), pw = power_of_two_at_least(r.width);
    const std::string e = axis_index(rank, axis, pe), w = axis_index(rank, axis + 1, pw);
    line(indent, fmt::format("{} = tl.sum(tl.where(({} // {} == {}) & ({} < {}), "
                             "tl.expand_dims({}, {}), 0.0), axis={})",
                             var(id), e, run, w, e, extent, var(x), axis + 1, axis));
  }

  void matmul(int32_t id, int indent) {
    const int32_t a = at(id).inputs[0], b = at(id).inputs[1];
    const Dims &da = real(a), &db = real(b);
    const size_t ra = da.size(), rb = db.size();
    const std::string lhs = masked(var(a), da, {ra - 1}, "0.0");
    const std::string rhs = masked(var(b), db, {rb - 2}, "0.0");
    const Dims pa = padded(a), pb = padded(b);
    // tl.dot takes 2-D tiles, and 3-D ones of equal batch (a batched product).
    const bool dot_shapes = ra == rb && (ra == 2 || (ra == 3 && pa[0] == pb[0]));
    if (dot_shapes && std::min({pa[ra - 2], pa[ra - 1], pb[rb - 1]}) >= 16) {
      // f32 tiles multiply in full f32 ("ieee"): TF32 would miss f32's tolerance. 16-bit tiles
      // multiply on the tensor cores as TF32, whose 10-bit mantissa holds theirs and whose range
      // is f32's. (Not as bf16 operands: Triton 3.9's interpreter multiplies those wrong, and
      // CI checks these kernels there.)
      const bool f32 = at(id).tile.dtype == ir::DType::f32;
      line(indent, fmt::format("{} = tl.dot({}, {}, input_precision=\"{}\")", var(id), lhs, rhs,
                               f32 ? "ieee" : "tf32"));
      return;
    }
    // Below 16 rows, columns or K (or with broadcast batch dims), a broadcast product summed
    // over K.
    const size_t rank = std::max(ra, rb) + 1;
    line(indent,
         fmt::format("{} = tl.sum(tl.expand_dims({}, {}) * tl.expand_dims({}, {}), axis={})",
                     var(id), lhs, ra, rhs, rb - 2, rank - 2));
  }

  void norm(int32_t id, size_t normalized, double eps, bool layer, bool has_weight, bool has_bias,
            int indent) {
    const ir::BlockNode& n = at(id);
    const int32_t x = n.inputs[0];
    const Dims& dims = real(x);
    std::vector<size_t> axes;
    int64_t count = 1;
    for (size_t axis = dims.size() - normalized; axis < dims.size(); ++axis) {
      axes.push_back(axis);
      count *= dims[axis];
    }
    const std::string centred = fmt::format("c{}", id);
    if (layer) {
      line(indent, fmt::format("{} = {} - {} / {}", centred, var(x),
                               reduced(var(x), dims, axes, false), py_float(double(count))));
    } else {
      line(indent, fmt::format("{} = {}", centred, var(x)));
    }
    std::string y = fmt::format("{} / tl.sqrt({} / {} + {})", centred,
                                reduced(centred + " * " + centred, dims, axes, false),
                                py_float(double(count)), py_float(eps));
    if (has_weight) y = fmt::format("{} * {}", y, var(n.inputs[1]));
    if (has_bias) y = fmt::format("{} + {}", y, var(n.inputs[has_weight ? 2 : 1]));
    line(indent, var(id) + " = " + y);
  }

  void accumulator_init(int32_t id) {
    const auto& acc = std::get<ir::AccumulatorOp>(at(id).op);
    const std::string fill = acc.fn == ir::AccumFn::max ? "float(\"-inf\")" : "0.0";
    line(1, fmt::format("{} = tl.full({}, {}, tl.float32)", var(id), shape_list(padded(id)), fill));
    if (acc.fn == ir::AccumFn::rescaled_sum)
      line(1, fmt::format("m{} = tl.full({}, float(\"-inf\"), tl.float32)", id,
                          shape_list(padded(at(id).inputs[1]))));
  }

  void accumulator_fold(int32_t id) {
    const ir::BlockNode& n = at(id);
    const std::string t = var(n.inputs[0]);
    switch (std::get<ir::AccumulatorOp>(n.op).fn) {
      case ir::AccumFn::sum:
      case ir::AccumFn::mean:
      case ir::AccumFn::rms: line(2, fmt::format("{0} = {0} + {1}", var(id), t)); return;
      case ir::AccumFn::max: line(2, fmt::format("{0} = tl.maximum({0}, {1})", var(id), t)); return;
      case ir::AccumFn::rescaled_sum: {
        // The online-softmax rescale; a running max still at -inf (nothing seen) scales nothing.
        const std::string m = var(n.inputs[1]), run = fmt::format("m{}", id),
                          top = fmt::format("n{}", id);
        line(2, fmt::format("{} = tl.maximum({}, {})", top, run, m));
        line(2, fmt::format("{0} = {0} * tl.where({1} == float(\"-inf\"), 0.0, tl.exp({1} - {2})) "
                            "+ {3} * tl.exp({4} - {2})",
                            var(id), run, top, t, m));
        line(2, fmt::format("{} = {}", run, top));
        return;
      }
    }
  }

  void accumulator_finish(int32_t id) {
    const auto& acc = std::get<ir::AccumulatorOp>(at(id).op);
    const std::string range = py_float(double(g_.forloop_range()));
    if (acc.fn == ir::AccumFn::mean) line(1, fmt::format("{0} = {0} / {1}", var(id), range));
    if (acc.fn == ir::AccumFn::rms)
      line(1, fmt::format("{0} = tl.sqrt({0} / {1} + {2})", var(id), range, py_float(acc.eps)));
  }

  const ir::BlockGraph& g_;
  std::string what_;
  std::string prologue_;  // the masks, before everything that uses them
  std::string text_;
  std::map<std::string, std::string> masks_;  // mask expression -> its variable
};

// Warps for a program whose largest tile holds `elements`: enough threads that each holds a few
// dozen values in registers.
int warps_for(int64_t elements) {
  if (elements >= 16384) return 8;
  if (elements >= 2048) return 4;
  return elements >= 256 ? 2 : 1;
}

}  // namespace

std::string module_header() {
  return "# Generated by YiRage's Triton backend.\nimport triton\nimport triton.language as "
         "tl\n\n\n";
}

TritonKernel lower_block_graph(const ir::BlockGraph& graph, const std::string& name,
                               std::vector<int> args, const std::string& what) {
  TritonKernel k;
  k.name = name;
  k.what = what;
  k.args = std::move(args);
  k.source = module_header() + BlockEmitter(graph, what).function(name);
  for (int a = 0; a < ir::kGridAxes; ++a)
    k.grid[size_t(a)] = unsigned(graph.grid().extent[size_t(a)]);
  int64_t largest = 1;
  for (size_t id = 0; id < graph.nodes().size(); ++id)
    largest = std::max(largest, ir::num_elements(padded_dims(graph.nodes()[id].tile.dims)));
  k.num_warps = warps_for(largest);
  return k;
}

}  // namespace yirage::backend::triton::detail
