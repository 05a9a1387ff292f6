// Fused-kernel lowering: a block graph to one OpenCL kernel, one work-group per grid block.
//
// Each work-group runs its block as verify's literal executor does: every tile (iterators'
// included) is an f32 array in local memory, every block op a pass in which the group's items
// share the tile's elements, followed by a barrier; accumulators start empty, fold each
// iteration's tile, and finish after the loop; savers round once to the output's dtype. The
// work-group is as wide as the largest tile needs, within the device's limit and 256 items.
#include <algorithm>
#include <map>
#include <variant>

#include <fmt/format.h>

#include "backend/opencl/codegen.h"
#include "ir/block_graph.h"
#include "support/error.h"

namespace yirage::backend::opencl::detail {
namespace {

using ir::AccumFn;
using ir::BlockGraph;
using ir::BlockNode;
using ir::BlockPhase;
using ir::Dims;

constexpr int64_t kMaxItems = 256;

std::string tile_name(int32_t id) {
  return fmt::format("t{}", id);
}

class BlockKernel {
 public:
  BlockKernel(const BlockGraph& g, const std::vector<ir::TensorType>& operands,
              const std::vector<ir::TensorType>& outputs, const DeviceLimits& limits)
      : g_(g), operands_(operands), outputs_(outputs), limits_(limits) {}

  std::string run(const std::string& name, Step& step) {
    const auto& nodes = g_.nodes();
    int64_t largest = 1, bytes = 0;
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (std::holds_alternative<ir::OutputSaverOp>(nodes[id].op)) continue;
      largest = std::max(largest, elements(int32_t(id)));
      bytes += elements(int32_t(id)) * 4;
      if (const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[id].op);
          acc && acc->fn == AccumFn::rescaled_sum)
        bytes += elements(nodes[id].inputs[1]) * 4;
    }
    if (bytes > limits_.local_memory_bytes)
      fail("its tiles need {} bytes of local memory; the device has {}", bytes,
           limits_.local_memory_bytes);
    items_ = 1;
    while (items_ < largest && items_ < kMaxItems && items_ * 2 <= limits_.max_work_group_size)
      items_ *= 2;

    std::vector<std::string> params;
    for (const ir::TensorType& t : operands_)
      params.push_back(
          fmt::format("__global const {}* in{}", storage_type(t.dtype), params.size()));
    for (size_t o = 0; o < outputs_.size(); ++o)
      params.push_back(fmt::format("__global {}* out{}", storage_type(outputs_[o].dtype), o));
    std::string params_text;
    for (size_t i = 0; i < params.size(); ++i) params_text += (i ? ", " : "") + params[i];

    text_ = fmt::format(
        "__kernel __attribute__((reqd_work_group_size({0}, 1, 1))) void {1}({2}) {{\n"
        "  const long bx = get_group_id(0), by = get_group_id(1), bz = get_group_id(2);\n"
        "  const long lid = get_local_id(0);\n",
        items_, name, params_text);
    for (size_t id = 0; id < nodes.size(); ++id) {
      if (std::holds_alternative<ir::OutputSaverOp>(nodes[id].op)) continue;
      line("__local float {}[{}];", tile_name(int32_t(id)), elements(int32_t(id)));
      if (const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[id].op);
          acc && acc->fn == AccumFn::rescaled_sum)
        line("__local float {}_max[{}];", tile_name(int32_t(id)), elements(nodes[id].inputs[1]));
    }
    emit_block();
    text_ += "}\n";

    const auto& grid = g_.grid().extent;
    step.dims = 3;
    step.global = {size_t(grid[0] * items_), size_t(grid[1]), size_t(grid[2])};
    step.local = {size_t(items_), 1, 1};
    return text_;
  }

 private:
  template <typename... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    text_.append(size_t(indent_), ' ');
    fmt::format_to(std::back_inserter(text_), format, std::forward<Args>(args)...);
    text_ += '\n';
  }

  // Appends `text`'s lines at the current indentation.
  void indented(const std::string& text) {
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = text.find('\n', start);
      const size_t stop = end == std::string::npos ? text.size() : end;
      text_.append(size_t(indent_), ' ');
      text_.append(text, start, stop - start);
      text_ += '\n';
      start = stop + 1;
    }
  }

  int64_t elements(int32_t id) const { return ir::num_elements(node(id).tile.dims); }
  const BlockNode& node(int32_t id) const { return g_.nodes()[size_t(id)]; }
  const Dims& dims(int32_t id) const { return node(id).tile.dims; }
  std::string in(int32_t id, size_t i) const { return tile_name(node(id).inputs.at(i)); }
  const Dims& in_dims(int32_t id, size_t i) const { return dims(node(id).inputs.at(i)); }

  // A pass over `count` elements, `e` the element, then a barrier.
  void pass(int64_t count, const std::string& body) {
    line("for (long e = lid; e < {}L; e += {}L) {{", count, items_);
    indented(body);
    line("}}");
    line("barrier(CLK_LOCAL_MEM_FENCE);");
  }

  void emit_block() {
    const auto& nodes = g_.nodes();
    for (size_t id = 0; id < nodes.size(); ++id)
      if (const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[id].op)) {
        const std::string t = tile_name(int32_t(id));
        pass(elements(int32_t(id)),
             fmt::format("  {}[e] = {};\n", t, acc->fn == AccumFn::max ? "-INFINITY" : "0.0f"));
        if (acc->fn == AccumFn::rescaled_sum)
          pass(elements(nodes[id].inputs[1]), fmt::format("  {}_max[e] = -INFINITY;\n", t));
      }
    line("for (long it = 0; it < {}L; ++it) {{", g_.forloop_range());
    indent_ += 2;
    for (size_t id = 0; id < nodes.size(); ++id)
      if (g_.phase(int32_t(id)) == BlockPhase::in_loop) emit_node(int32_t(id));
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) emit_fold(int32_t(id));
    indent_ -= 2;
    line("}}");
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) emit_finish(int32_t(id));
    int saver = 0;
    for (size_t id = 0; id < nodes.size(); ++id) {
      const BlockPhase phase = g_.phase(int32_t(id));
      if (phase == BlockPhase::saver) emit_save(int32_t(id), saver++);
      if (phase == BlockPhase::post_loop &&
          !std::holds_alternative<ir::AccumulatorOp>(nodes[id].op))
        emit_node(int32_t(id));
    }
  }

  void emit_node(int32_t id) {
    const BlockNode& n = node(id);
    const std::string out = tile_name(id);
    const int64_t count = elements(id);
    std::visit(
        ir::Overloaded{
            [&](const ir::InputIteratorOp& it) { emit_iterator(id, it); },
            [&](const ir::MatmulOp&) { emit_matmul(id); },
            [&](const ir::UnaryOp& op) {
              pass(count, fmt::format("  {}[e] = {};\n", out, unary_expr(op, in(id, 0) + "[e]")));
            },
            [&](const ir::BinaryOp& op) {
              const std::string a =
                  fmt::format("{}[{}]", in(id, 0), broadcast_index(dims(id), in_dims(id, 0), "e"));
              const std::string b =
                  fmt::format("{}[{}]", in(id, 1), broadcast_index(dims(id), in_dims(id, 1), "e"));
              pass(count, fmt::format("  {}[e] = {};\n", out, binary_expr(op.fn, a, b)));
            },
            [&](const ir::ReduceOp& op) {
              const ir::AxisView v(in_dims(id, 0), op.dim);
              const bool is_max = op.fn == ir::ReduceFn::max;
              std::string body = fmt::format(
                  "  const long base = (e / {0}L) * {1}L + e % {0}L;\n  float acc = {2};\n"
                  "  for (long k = 0; k < {3}L; ++k) {{\n    const float v = {4}[base + k * "
                  "{0}L];\n"
                  "    {5}\n  }}\n",
                  v.inner, v.extent * v.inner, is_max ? "-INFINITY" : "0.0f", v.extent, in(id, 0),
                  is_max ? "if (v > acc || isnan(v)) acc = v;" : "acc += v;");
              if (op.fn == ir::ReduceFn::mean) body += fmt::format("  acc /= {}.0f;\n", v.extent);
              pass(count, body + fmt::format("  {}[e] = acc;\n", out));
            },
            [&](const ir::ReduceToWidthOp& op) {
              const ir::AxisView v(in_dims(id, 0), op.dim);
              const int64_t run = v.extent / op.width;
              pass(count,
                   fmt::format("  const long o = e / {0}L, w = (e / {1}L) % {2}L, i = e % {1}L;\n"
                               "  float acc = 0.0f;\n  for (long k = 0; k < {3}L; ++k) acc += "
                               "{4}[(o * {5}L + w * {3}L + k) * {1}L + i];\n  {6}[e] = acc;\n",
                               op.width * v.inner, v.inner, op.width, run, in(id, 0), v.extent,
                               out));
            },
            [&](const ir::RmsNormOp& op) {
              norm(id, op.normalized_shape, op.eps, op.has_weight, false, false);
            },
            [&](const ir::LayerNormOp& op) {
              norm(id, op.normalized_shape, op.eps, op.has_weight, op.has_bias, true);
            },
            [&](const ir::ConcatOp& op) { emit_concat(id, op.dim); },
            [&](const ir::AccumulatorOp&) {},
            [&](const ir::OutputSaverOp&) {},
        },
        n.op);
  }

  void norm(int32_t id, const Dims& normalized, double eps, bool has_weight, bool has_bias,
            bool centered) {
    const int64_t group = ir::num_elements(normalized);
    const std::string w = has_weight ? in(id, 1) + "[j]" : "";
    const std::string b = has_bias ? in(id, has_weight ? 2 : 1) + "[j]" : "";
    line("for (long row = lid; row < {}L; row += {}L) {{", elements(id) / group, items_);
    indented(norm_body(ir::DType::f32, in(id, 0), ir::DType::f32, tile_name(id), "row", group, eps,
                       centered, w, b));
    line("}}");
    line("barrier(CLK_LOCAL_MEM_FENCE);");
  }

  void emit_concat(int32_t id, int dim) {
    const ir::AxisView w(dims(id), dim);
    std::string body =
        fmt::format("  const long o = e / {0}L, c = (e / {1}L) % {2}L, i = e % {1}L;\n",
                    w.extent * w.inner, w.inner, w.extent);
    int64_t offset = 0;
    for (size_t p = 0; p < node(id).inputs.size(); ++p) {
      const ir::AxisView v(in_dims(id, p), dim);
      body += fmt::format("  {}if (c < {}L) {}[e] = {}[(o * {}L + c - {}L) * {}L + i];\n",
                          p ? "else " : "", offset + v.extent, tile_name(id), in(id, p), v.extent,
                          offset, v.inner);
      offset += v.extent;
    }
    pass(elements(id), body);
  }

  // The element offset of the block's (and iteration's) tile in the operand.
  std::string tile_offset(const ir::InputIteratorOp& it, const Dims& tile,
                          const Dims& strides) const {
    const ir::IteratorSteps steps = ir::iterator_steps(it, tile, g_.forloop_range());
    std::string expr = "0L";
    const char* axis[] = {"bx", "by", "bz"};
    for (int a = 0; a < ir::kGridAxes; ++a)
      if (const int d = it.imap[size_t(a)]; d != ir::kReplicate)
        expr += fmt::format(" + {} * {}L", axis[a], steps.block[size_t(a)] * strides[size_t(d)]);
    if (it.fmap != ir::kReplicate)
      expr += fmt::format(" + it * {}L", steps.loop * strides[size_t(it.fmap)]);
    return expr;
  }

  void emit_iterator(int32_t id, const ir::InputIteratorOp& it) {
    const ir::TensorType& operand = operands_.at(size_t(it.operand));
    const Dims strides = ir::row_major_strides(operand.dims);
    const Dims& td = dims(id);
    std::string index = tile_offset(it, td, strides);
    for (size_t j = 0; j < td.size(); ++j)
      if (td[j] != 1) index += fmt::format(" + {} * {}L", coordinate(td, j, "e"), strides[j]);
    pass(elements(id), fmt::format("  {}[e] = {};\n", tile_name(id),
                                   load(operand.dtype, fmt::format("in{}", it.operand), index)));
  }

  void emit_matmul(int32_t id) {
    const Dims &ad = in_dims(id, 0), &bd = in_dims(id, 1), &od = dims(id);
    const int64_t m = od[od.size() - 2], n = od.back(), k = ad.back();
    const Dims batch(od.begin(), od.end() - 2);
    const Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    pass(elements(id),
         fmt::format("  const long q = e / {0}L, r = (e / {1}L) % {2}L, c = e % {1}L;\n"
                     "  const long pa = {3} * {4}L + r * {5}L, pb = {6} * {7}L + c;\n"
                     "  float acc = 0.0f;\n"
                     "  for (long k = 0; k < {5}L; ++k) acc += {8}[pa + k] * {9}[pb + k * {1}L];\n"
                     "  {10}[e] = acc;\n",
                     m * n, n, m, broadcast_index(batch, a_batch, "q"), m * k, k,
                     broadcast_index(batch, b_batch, "q"), k * n, in(id, 0), in(id, 1),
                     tile_name(id)));
  }

  void emit_fold(int32_t id) {
    const BlockNode& n = node(id);
    const auto& acc = std::get<ir::AccumulatorOp>(n.op);
    const std::string t = tile_name(id), v = in(id, 0);
    if (acc.fn == AccumFn::rescaled_sum) {
      // Every element rescales by its row's old and new maxima; the maxima move after.
      const std::string m = in(id, 1);
      const std::string k = broadcast_index(dims(id), in_dims(id, 1), "e");
      pass(elements(id),
           fmt::format("  const long k = {0};\n  const float old_max = {1}_max[k], mk = {2}[k];\n"
                       "  const float new_max = (mk > old_max || isnan(mk)) ? mk : old_max;\n"
                       "  {1}[e] = {1}[e] * (old_max == -INFINITY ? 0.0f : exp(old_max - new_max))"
                       " + {3}[e] * (mk == -INFINITY ? 0.0f : exp(mk - new_max));\n",
                       k, t, m, v));
      pass(elements(n.inputs[1]),
           fmt::format("  if ({1}[e] > {0}_max[e] || isnan({1}[e])) {0}_max[e] = {1}[e];\n", t, m));
      return;
    }
    pass(elements(id),
         acc.fn == AccumFn::max
             ? fmt::format("  if ({1}[e] > {0}[e] || isnan({1}[e])) {0}[e] = {1}[e];\n", t, v)
             : fmt::format("  {}[e] += {}[e];\n", t, v));
  }

  void emit_finish(int32_t id) {
    const auto& acc = std::get<ir::AccumulatorOp>(node(id).op);
    const std::string t = tile_name(id);
    const int64_t r = g_.forloop_range();
    if (acc.fn == AccumFn::mean) pass(elements(id), fmt::format("  {}[e] /= {}.0f;\n", t, r));
    if (acc.fn == AccumFn::rms)
      pass(elements(id),
           fmt::format("  {0}[e] = sqrt({0}[e] / {1}.0f + {2:.9e}f);\n", t, r, acc.eps));
  }

  void emit_save(int32_t id, int output) {
    const auto& save = std::get<ir::OutputSaverOp>(node(id).op);
    const ir::TensorType& out = outputs_.at(size_t(output));
    const Dims strides = ir::row_major_strides(out.dims);
    const Dims& td = dims(id);
    std::string index = "0L";
    const char* axis[] = {"bx", "by", "bz"};
    for (int a = 0; a < ir::kGridAxes; ++a) {
      const int d = save.omap[size_t(a)];
      if (d != ir::kReplicate)
        index += fmt::format(" + {} * {}L", axis[a], td[size_t(d)] * strides[size_t(d)]);
    }
    for (size_t j = 0; j < td.size(); ++j)
      if (td[j] != 1) index += fmt::format(" + {} * {}L", coordinate(td, j, "e"), strides[j]);
    pass(elements(id),
         "  " + store(out.dtype, fmt::format("out{}", output), index, in(id, 0) + "[e]") + "\n");
  }

  const BlockGraph& g_;
  const std::vector<ir::TensorType>& operands_;
  const std::vector<ir::TensorType>& outputs_;
  DeviceLimits limits_;
  int64_t items_ = 1;
  int indent_ = 2;
  std::string text_;
};

}  // namespace

std::string lower_fused(const BlockGraph& body, const std::string& name,
                        const std::vector<ir::TensorType>& operands,
                        const std::vector<ir::TensorType>& outputs, const DeviceLimits& limits,
                        Step& step) {
  return BlockKernel(body, operands, outputs, limits).run(name, step);
}

}  // namespace yirage::backend::opencl::detail
