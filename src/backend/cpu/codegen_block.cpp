// Fused-kernel lowering: a block graph to a function whose threads share the grid's blocks.
//
// Each block runs the for-loop exactly as verify's literal executor does, but without copies
// where they are not needed:
// - an iterator whose only readers are matmuls stays a strided view of its operand, so a weight
//   streams from memory straight into the GEMM (converted from f16/bf16 as it is loaded);
//   otherwise its tile is gathered into f32 storage;
// - a matmul whose only reader is a sum or mean accumulator accumulates into the accumulator's
//   tile instead of writing a tile that would then be added;
// - every other tile is an f32 buffer in the thread's scratch slice, at an offset fixed here.
// Savers round once to the output's dtype.
#include <algorithm>
#include <map>
#include <variant>

#include <fmt/format.h>

#include "backend/cpu/codegen.h"
#include "support/error.h"

namespace yirage::backend::cpu {
namespace {

using ir::AccumFn;
using ir::BlockGraph;
using ir::BlockNode;
using ir::BlockPhase;
using ir::Dims;

// How the generated code holds one block node's value.
struct Value {
  bool view = false;             // a strided view of an operand (iterators read only by matmuls)
  std::string ptr;               // float* tile, or `const T*` view base
  std::string ctype;             // element type behind ptr
  std::vector<int64_t> strides;  // element strides (views: the operand's; tiles: row-major)
};

class BlockLowering {
 public:
  BlockLowering(const BlockGraph& g, std::string name, const std::vector<CTensor>& operands,
                const std::vector<CTensor>& outputs)
      : g_(g), name_(std::move(name)), operands_(operands), outputs_(outputs) {}

  FusedFunction run() {
    const auto& nodes = g_.nodes();
    readers_.assign(nodes.size(), {});
    for (size_t id = 0; id < nodes.size(); ++id)
      for (int32_t in : nodes[id].inputs) readers_[size_t(in)].push_back(int32_t(id));
    values_.resize(nodes.size());
    into_acc_.assign(nodes.size(), -1);
    plan();

    const auto& grid = g_.grid().extent;
    Emitter f;
    f.line(
        "static void {}(const void* const* ops, void* const* outs, char* scratch, "
        "size_t stride, int nt) {{",
        name_);
    f.line("  (void)ops; (void)outs;");
    f.line("#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && {} > 1)",
           g_.grid().blocks());
    f.line("  for (int64_t blk = 0; blk < {}; ++blk) {{", g_.grid().blocks());
    f.line("    const int64_t bx = blk % {0}, by = (blk / {0}) % {1}, bz = blk / ({0} * {1});",
           grid[0], grid[1]);
    f.line("    (void)bx; (void)by; (void)bz;");
    f.line("    char* slice = scratch + size_t(omp_get_thread_num()) * stride;");
    f.line("    float* pack = (float*)slice;");
    f.line("    float* tiles = (float*)(slice + size_t(yr::kPackFloats) * 4);");
    f.line("    (void)pack; (void)tiles;");
    body_ = &f;
    f.indent();
    f.indent();
    emit_block();
    f.dedent();
    f.dedent();
    f.line("  }}");
    f.line("}}");

    std::string ops, outs;
    for (const CTensor& t : operands_) ops += fmt::format("(const void*){}, ", t.ptr);
    for (const CTensor& t : outputs_) outs += fmt::format("(void*){}, ", t.ptr);
    FusedFunction result;
    result.definition = f.text();
    result.call = fmt::format(
        "{{ const void* o[] = {{{}}}; void* w[] = {{{}}}; {}(o, w, thr, thr_stride, nt); }}", ops,
        outs, name_);
    result.thread_scratch_bytes = scratch_floats_ * 4;
    return result;
  }

 private:
  std::string tile(int64_t floats) {
    const int64_t at = scratch_floats_;
    scratch_floats_ += (floats + kAlign / 4 - 1) / (kAlign / 4) * (kAlign / 4);
    return fmt::format("(tiles + {})", at);
  }

  static int64_t elements(const BlockNode& n) { return ir::num_elements(n.tile.dims); }

  // Decides views, matmul-into-accumulator fusion, and every tile's place.
  void plan() {
    const auto& nodes = g_.nodes();
    for (size_t id = 0; id < nodes.size(); ++id) {
      const BlockNode& node = nodes[id];
      Value& v = values_[id];
      if (const auto* it = std::get_if<ir::InputIteratorOp>(&node.op)) {
        const bool only_matmul =
            !readers_[id].empty() &&
            std::all_of(readers_[id].begin(), readers_[id].end(), [&](int32_t r) {
              return std::holds_alternative<ir::MatmulOp>(nodes[size_t(r)].op);
            });
        const CTensor& operand = operands_.at(size_t(it->operand));
        if (only_matmul) {
          v.view = true;
          v.ctype = c_type(operand.type.dtype);
          v.ptr = fmt::format("it{}", id);
          v.strides = row_major_strides(operand.type.dims);
          continue;
        }
      }
      if (std::holds_alternative<ir::OutputSaverOp>(node.op)) continue;
      if (std::holds_alternative<ir::MatmulOp>(node.op) && readers_[id].size() == 1) {
        const int32_t r = readers_[id][0];
        const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[size_t(r)].op);
        if (acc && (acc->fn == AccumFn::sum || acc->fn == AccumFn::mean)) {
          into_acc_[id] = r;
          continue;  // its value is the accumulator's tile
        }
      }
      v.ctype = "float";
      v.ptr = tile(elements(node));
      v.strides = row_major_strides(node.tile.dims);
    }
    for (size_t id = 0; id < nodes.size(); ++id)
      if (into_acc_[id] >= 0) values_[id] = values_[size_t(into_acc_[id])];
  }

  void emit_block() {
    const auto& nodes = g_.nodes();
    Emitter& f = *body_;
    // Accumulators start empty.
    for (size_t id = 0; id < nodes.size(); ++id)
      if (const auto* acc = std::get_if<ir::AccumulatorOp>(&nodes[id].op)) {
        const bool max_like = acc->fn == AccumFn::max;
        f.line("std::fill_n({}, {}, {});", values_[id].ptr, elements(nodes[id]),
               max_like ? "-std::numeric_limits<float>::infinity()" : "0.0f");
        if (acc->fn == AccumFn::rescaled_sum) {
          const int64_t m = elements(nodes[size_t(nodes[id].inputs[1])]);
          running_max_[id] = tile(3 * m);
          f.line("std::fill_n({}, {}, -std::numeric_limits<float>::infinity());", running_max_[id],
                 m);
        }
      }
    f.line("for (int64_t it = 0; it < {}; ++it) {{", g_.forloop_range());
    f.indent();
    for (size_t id = 0; id < nodes.size(); ++id)
      if (g_.phase(int32_t(id)) == BlockPhase::in_loop) emit_node(int32_t(id));
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) emit_fold(int32_t(id));
    f.dedent();
    f.line("}}");
    for (size_t id = 0; id < nodes.size(); ++id)
      if (std::holds_alternative<ir::AccumulatorOp>(nodes[id].op)) emit_finish(int32_t(id));
    for (size_t id = 0; id < nodes.size(); ++id) {
      const BlockPhase phase = g_.phase(int32_t(id));
      if (phase == BlockPhase::saver) emit_save(int32_t(id));
      if (phase == BlockPhase::post_loop &&
          !std::holds_alternative<ir::AccumulatorOp>(nodes[id].op))
        emit_node(int32_t(id));
    }
  }

  const Value& val(const BlockNode& n, size_t i) const { return values_[size_t(n.inputs.at(i))]; }
  const Dims& dims(const BlockNode& n, size_t i) const {
    return g_.nodes()[size_t(n.inputs.at(i))].tile.dims;
  }

  void emit_node(int32_t id) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    Emitter& f = *body_;
    const Value& out = values_[size_t(id)];
    const int64_t count = elements(n);
    std::visit(
        ir::Overloaded{
            [&](const ir::InputIteratorOp& it) { emit_iterator(id, it); },
            [&](const ir::MatmulOp&) { emit_matmul(id); },
            [&](const ir::UnaryOp& op) {
              f.line("yr::unary({}, {}, {}, {});", unary_functor(op), val(n, 0).ptr, out.ptr,
                     count);
            },
            [&](const ir::BinaryOp& op) {
              Dims a = dims(n, 0), b = dims(n, 1);
              a.insert(a.begin(), n.tile.dims.size() - a.size(), 1);
              b.insert(b.begin(), n.tile.dims.size() - b.size(), 1);
              f.line("{{ static const int64_t sa[] = {}, sb[] = {}, d[] = {};",
                     brace_list(broadcast_strides4(a)), brace_list(broadcast_strides4(b)),
                     brace_list(pad4(n.tile.dims, 1)));
              f.line("  yr::binary4({}, {}, sa, {}, sb, {}, d); }}", binary_functor(op.fn),
                     val(n, 0).ptr, val(n, 1).ptr, out.ptr);
            },
            [&](const ir::ReduceOp& op) {
              const ir::AxisView v(dims(n, 0), op.dim);
              const char* fn = op.fn == ir::ReduceFn::sum    ? "yr::Red::sum"
                               : op.fn == ir::ReduceFn::mean ? "yr::Red::mean"
                                                             : "yr::Red::max";
              f.line("yr::reduce({}, {}, {}, {}, {}, {}, 1);", fn, val(n, 0).ptr, out.ptr, v.outer,
                     v.extent, v.inner);
            },
            [&](const ir::ReduceToWidthOp& op) {
              const ir::AxisView v(dims(n, 0), op.dim);
              f.line("yr::reduce_to_width({}, {}, {}, {}, {}, {});", val(n, 0).ptr, out.ptr,
                     v.outer, v.extent, v.inner, op.width);
            },
            [&](const ir::RmsNormOp& op) {
              const int64_t group = ir::num_elements(op.normalized_shape);
              f.line("yr::norm_rows({}, {}, (const float*)nullptr, {}, {}, {}, {:.9e}f, false, 1);",
                     val(n, 0).ptr, op.has_weight ? val(n, 1).ptr : "(const float*)nullptr",
                     out.ptr, count / group, group, op.eps);
            },
            [&](const ir::LayerNormOp& op) {
              const int64_t group = ir::num_elements(op.normalized_shape);
              const std::string null = "(const float*)nullptr";
              f.line("yr::norm_rows({}, {}, {}, {}, {}, {}, {:.9e}f, true, 1);", val(n, 0).ptr,
                     op.has_weight ? val(n, 1).ptr : null,
                     op.has_bias ? val(n, op.has_weight ? 2 : 1).ptr : null, out.ptr, count / group,
                     group, op.eps);
            },
            [&](const ir::ConcatOp& op) {
              const ir::AxisView w(n.tile.dims, op.dim);
              int64_t offset = 0;
              for (size_t p = 0; p < n.inputs.size(); ++p) {
                const ir::AxisView v(dims(n, p), op.dim);
                f.line("{{ static const int64_t s[] = {}, ds[] = {}, d[] = {};",
                       brace_list({0, v.extent * v.inner, v.inner, 1}),
                       brace_list({0, w.extent * w.inner, w.inner, 1}),
                       brace_list({1, v.outer, v.extent, v.inner}));
                f.line("  yr::copy4({}, s, {} + {}, ds, d, 1); }}", val(n, p).ptr, out.ptr,
                       offset * w.inner);
                offset += v.extent;
              }
            },
            [&](const ir::AccumulatorOp&) {},
            [&](const ir::OutputSaverOp&) {},
        },
        n.op);
  }

  // Element offset of the block's (and iteration's) tile in the operand.
  std::string tile_offset(const ir::InputIteratorOp& it, const Dims& tile,
                          const std::vector<int64_t>& strides) {
    const ir::IteratorSteps steps = ir::iterator_steps(it, tile, g_.forloop_range());
    std::string expr = "0";
    const char* axis[] = {"bx", "by", "bz"};
    for (int a = 0; a < ir::kGridAxes; ++a)
      if (const int d = it.imap[size_t(a)]; d != ir::kReplicate)
        expr += fmt::format(" + {} * {}", axis[a], steps.block[size_t(a)] * strides[size_t(d)]);
    if (it.fmap != ir::kReplicate)
      expr += fmt::format(" + it * {}", steps.loop * strides[size_t(it.fmap)]);
    return expr;
  }

  void emit_iterator(int32_t id, const ir::InputIteratorOp& it) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    const CTensor& operand = operands_.at(size_t(it.operand));
    const std::vector<int64_t> strides = row_major_strides(operand.type.dims);
    const std::string ctype = c_type(operand.type.dtype);
    const std::string base = fmt::format("(({0}*)ops[{1}]) + ({2})", ctype, it.operand,
                                         tile_offset(it, n.tile.dims, strides));
    const Value& v = values_[size_t(id)];
    if (v.view) {
      body_->line("const {}* it{} = {};", ctype, id, base);
      return;
    }
    std::vector<int64_t> s = strides;
    s.insert(s.begin(), 4 - s.size(), 0);
    body_->line("{{ static const int64_t s[] = {}, d[] = {};", brace_list(s),
                brace_list(pad4(n.tile.dims, 1)));
    body_->line("  yr::gather4({}, s, {}, d); }}", base, v.ptr);
  }

  void emit_matmul(int32_t id) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    const Value &a = val(n, 0), &b = val(n, 1);
    const Dims &ad = dims(n, 0), &bd = dims(n, 1), &od = n.tile.dims;
    const int64_t m = od[od.size() - 2], nn = od.back(), k = ad.back();
    const Dims batch(od.begin(), od.end() - 2);
    const int64_t batches = ir::num_elements(batch);
    // Row stride and batch offsets: a view reads with its operand's strides, a tile is dense.
    auto offsets = [&](const Value& v, const Dims& d) {
      std::vector<int64_t> offs;
      const size_t rank = d.size();
      const std::vector<int64_t> s = v.view ? v.strides : row_major_strides(d);
      for (int64_t q = 0; q < batches; ++q) {
        int64_t rest = q, off = 0;
        for (size_t j = batch.size(); j-- > 0;) {
          const int64_t c = rest % batch[j];
          rest /= batch[j];
          const size_t lead = batch.size() - (rank - 2);
          if (j < lead) continue;
          const size_t dj = j - lead;
          if (d[dj] != 1) off += c * s[dj];
        }
        offs.push_back(off);
      }
      return std::pair(offs, s[rank - 2]);
    };
    auto [ao, lda] = offsets(a, ad);
    auto [bo, ldb] = offsets(b, bd);
    const bool accumulate = into_acc_[size_t(id)] >= 0;
    const Value& c = values_[size_t(id)];
    body_->line("{{ static const int64_t ao[] = {}, bo[] = {};", brace_list(ao), brace_list(bo));
    body_->line(
        "  for (int64_t q = 0; q < {}; ++q) yr::gemm({}, {}, {}, {} + ao[q], {}, {} + bo[q], {}, "
        "{} + q * {}, {}, {}, pack); }}",
        batches, m, nn, k, a.ptr, lda, b.ptr, ldb, c.ptr, m * nn, nn,
        accumulate ? "true" : "false");
  }

  void emit_fold(int32_t id) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    const auto& acc = std::get<ir::AccumulatorOp>(n.op);
    const Value& v = values_[size_t(id)];
    const int64_t count = elements(n);
    const int32_t src = n.inputs[0];
    if (into_acc_[size_t(src)] == id) return;  // the matmul already added its product
    if (acc.fn == AccumFn::rescaled_sum) {
      const Dims& vd = dims(n, 0);
      Dims md = dims(n, 1);
      md.insert(md.begin(), vd.size() - md.size(), 1);
      body_->line("{{ static const int64_t sm[] = {}, d[] = {};",
                  brace_list(broadcast_strides4(md)), brace_list(pad4(vd, 1)));
      body_->line("  yr::rescaled_fold({}, {}, {}, {}, sm, d, {}); }}", v.ptr, running_max_[id],
                  val(n, 0).ptr, val(n, 1).ptr, ir::num_elements(md));
      return;
    }
    body_->line("yr::acc_fold({}, {}, {}, {});", acc.fn == AccumFn::max ? "true" : "false", v.ptr,
                val(n, 0).ptr, count);
  }

  void emit_finish(int32_t id) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    const auto& acc = std::get<ir::AccumulatorOp>(n.op);
    const Value& v = values_[size_t(id)];
    const int64_t count = elements(n);
    const int64_t r = g_.forloop_range();
    if (acc.fn == AccumFn::mean)
      body_->line("for (int64_t j = 0; j < {}; ++j) {}[j] /= {}.0f;", count, v.ptr, r);
    if (acc.fn == AccumFn::rms)
      body_->line("for (int64_t j = 0; j < {}; ++j) {}[j] = std::sqrt({}[j] / {}.0f + {:.9e}f);",
                  count, v.ptr, v.ptr, r, acc.eps);
  }

  void emit_save(int32_t id) {
    const BlockNode& n = g_.nodes()[size_t(id)];
    const auto& save = std::get<ir::OutputSaverOp>(n.op);
    const CTensor& out = outputs_.at(size_t(saver_index(id)));
    const std::vector<int64_t> strides = row_major_strides(out.type.dims);
    std::string offset = "0";
    const char* axis[] = {"bx", "by", "bz"};
    for (int a = 0; a < ir::kGridAxes; ++a) {
      const int d = save.omap[size_t(a)];
      if (d != ir::kReplicate)
        offset += fmt::format(" + {} * {}", axis[a], n.tile.dims[size_t(d)] * strides[size_t(d)]);
    }
    std::vector<int64_t> s = strides;
    s.insert(s.begin(), 4 - s.size(), 0);
    body_->line("{{ static const int64_t s[] = {}, d[] = {};", brace_list(s),
                brace_list(pad4(n.tile.dims, 1)));
    body_->line("  yr::scatter4({}, ({}*)outs[{}] + ({}), s, d); }}", val(n, 0).ptr,
                c_type(out.type.dtype), saver_index(id), offset);
  }

  int saver_index(int32_t id) const {
    int index = 0;
    for (int32_t j = 0; j < id; ++j)
      if (g_.phase(j) == BlockPhase::saver) ++index;
    return index;
  }

  const BlockGraph& g_;
  std::string name_;
  const std::vector<CTensor>& operands_;
  const std::vector<CTensor>& outputs_;
  std::vector<std::vector<int32_t>> readers_;
  std::vector<Value> values_;
  std::vector<int32_t> into_acc_;               // per matmul: the accumulator it adds into, or -1
  std::map<int32_t, std::string> running_max_;  // per rescaled_sum: M, then two scale rows
  int64_t scratch_floats_ = 0;
  Emitter* body_ = nullptr;
};

}  // namespace

FusedFunction lower_fused(const BlockGraph& body, const std::string& name,
                          const std::vector<CTensor>& operands,
                          const std::vector<CTensor>& outputs) {
  for (const BlockNode& n : body.nodes())
    if (n.tile.dims.size() > 4)
      fail("fused kernel: tile {} has rank above 4", ir::format_type(n.tile));
  return BlockLowering(body, name, operands, outputs).run();
}

}  // namespace yirage::backend::cpu
