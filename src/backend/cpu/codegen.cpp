// Kernel-level lowering: one runtime call (or a short generated loop) per node, in graph order.
//
// Every tensor is stored in its own dtype, as the reference executor rounds each intermediate,
// and computed in f32. A marked output is computed straight into its output buffer; a reshape is
// a renamed pointer, since a row-major tensor's bytes do not move. Fused nodes are lowered by
// codegen_block.cpp into functions of their own.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cpu/codegen.h"
#include "support/error.h"

namespace yirage::backend::cpu {

std::vector<int64_t> pad4(const ir::Dims& dims, int64_t fill) {
  std::vector<int64_t> out(4 - dims.size(), fill);
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

std::vector<int64_t> broadcast_strides4(const ir::Dims& dims) {
  std::vector<int64_t> strides = row_major_strides(dims);
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] == 1) strides[i] = 0;
  std::vector<int64_t> out(4 - dims.size(), 0);
  out.insert(out.end(), strides.begin(), strides.end());
  return out;
}

// The runtime's name for a weight format (kernels/quant_tiles.inc's QuantKind).
std::string_view quant_kind(ir::QuantFormat format) {
  switch (format) {
    case ir::QuantFormat::q4_1: return "kQ4_1";
    case ir::QuantFormat::q8_0: return "kQ8_0";
    case ir::QuantFormat::q4_0: return "kQ4_0";
    case ir::QuantFormat::f16:
    case ir::QuantFormat::bf16: break;
  }
  // 16-bit float weights run on the LLM engine's hand-written kernels on the host instead.
  fail(
      "{} weights are not lowered on this backend (it reads q4_0, q4_1 and q8_0: capabilities "
      "\"quant_matmul_formats\")",
      ir::quant_format_name(format));
}

std::string unary_functor(const ir::UnaryOp& op) {
  switch (op.fn) {
    case ir::UnaryFn::exp: return "yr::Exp()";
    case ir::UnaryFn::silu: return "yr::Silu()";
    case ir::UnaryFn::gelu: return "yr::Gelu()";
    case ir::UnaryFn::relu: return "yr::Relu()";
    case ir::UnaryFn::sqrt: return "yr::Sqrt()";
    case ir::UnaryFn::rsqrt: return "yr::Rsqrt()";
    case ir::UnaryFn::square: return "yr::Square()";
    case ir::UnaryFn::neg: return "yr::Neg()";
    case ir::UnaryFn::reciprocal: return "yr::Recip()";
    case ir::UnaryFn::mul_scalar: return fmt::format("yr::MulScalar{{{:.9e}f}}", op.scalar);
  }
  fail("cpu codegen: unary op with unknown function code {}", int(op.fn));
}

std::string binary_functor(ir::BinaryFn fn) {
  switch (fn) {
    case ir::BinaryFn::add: return "yr::Add()";
    case ir::BinaryFn::sub: return "yr::Sub()";
    case ir::BinaryFn::mul: return "yr::Mul()";
    case ir::BinaryFn::div: return "yr::Div()";
    case ir::BinaryFn::pow: return "yr::Pow()";
  }
  fail("cpu codegen: binary op with unknown function code {}", int(fn));
}

namespace {

using ir::Dims;
using ir::DType;
using ir::TensorRef;
using ir::TensorType;

int64_t align_up(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

int64_t tensor_bytes(const TensorType& t) {
  return ir::num_elements(t.dims) * int64_t(ir::dtype_size(t.dtype));
}

class Lowering {
 public:
  explicit Lowering(const ir::KernelGraph& graph) : graph_(graph) {}

  std::string run() {
    assign_storage();
    body_.indent();
    int fused_count = 0;
    for (size_t id = 0; id < graph_.nodes().size(); ++id) {
      const ir::Node& node = graph_.nodes()[id];
      body_.line("// node {} '{}': {}", id, node.name, ir::op_name(node.op));
      try {
        lower(int32_t(id), node, fused_count);
      } catch (const Error& e) {
        fail("cpu backend: node '{}' ({}): {}", node.name, ir::op_name(node.op), e.what());
      }
    }
    copy_unplaced_outputs();
    body_.line("return 0;");
    body_.dedent();

    Emitter out;
    out.raw(kRuntimeSource);
    if (uses_quant_) {
      out.raw("\n#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))\n");
      out.raw("#error \"quant_matmul needs AVX2, FMA and F16C, which this CPU target lacks\"\n");
      out.raw("#endif\nnamespace yrq {\n");
      out.raw(kQuantTilesSource);
      out.raw(kQuantDriverSource);
      out.raw("}  // namespace yrq\n");
    }
    if (uses_blas_) {
      // blas.h BlasTable; filled by the backend after loading the module.
      out.raw("\nextern \"C\" struct YrBlas {\n");
      out.raw(
          "  void (*sgemm)(int, int, int, int, int, int, float, const float*, int, const float*,");
      out.raw(" int, float, float*, int);\n");
      out.raw("  void (*set_threads)(int);\n  int (*get_threads)();\n");
      out.raw("  void (*sgemv)(int, int, int, int, float, const float*, int, const float*, int,");
      out.raw(" float, float*, int);\n} yr_blas = {};\n");
    }
    out.raw("\n// ==== generated ====\n");
    out.raw(functions_.text());
    out.line("extern \"C\" size_t yr_workspace_bytes(int nt) {{");
    out.line("  return size_t({}) + size_t(nt) * (size_t({}) + size_t(yr::kPackFloats) * 4);",
             fixed_bytes_, thread_bytes_);
    out.line("}}");
    out.line(
        "extern \"C\" int yr_run(void* const* in, void* const* out, char* ws, int nt, char* err, "
        "size_t errlen) {{");
    out.line("  (void)in; (void)out; (void)err; (void)errlen; (void)nt;");
    out.line("  char* thr = ws + {};", fixed_bytes_);
    out.line("  const size_t thr_stride = size_t({}) + size_t(yr::kPackFloats) * 4;",
             thread_bytes_);
    out.line("  (void)thr; (void)thr_stride;");
    out.raw(body_.text());
    out.line("}}");
    return out.text();
  }

 private:
  // Where each tensor lives: an input or output buffer, an alias, or the fixed workspace.
  void assign_storage() {
    const auto& nodes = graph_.nodes();
    std::map<TensorRef, size_t> first_output;
    for (size_t o = 0; o < graph_.outputs().size(); ++o)
      first_output.emplace(graph_.outputs()[o].tensor, o);
    int input_index = 0;
    for (size_t id = 0; id < nodes.size(); ++id) {
      const ir::Node& node = nodes[id];
      for (size_t port = 0; port < node.outputs.size(); ++port) {
        const TensorRef ref{int32_t(id), int32_t(port)};
        const TensorType& type = node.outputs[port];
        std::string ptr;
        if (std::holds_alternative<ir::InputOp>(node.op)) {
          ptr = fmt::format("(({}*)in[{}])", c_type(type.dtype), input_index++);
        } else if (std::holds_alternative<ir::ReshapeOp>(node.op)) {
          ptr = fmt::format("(({}*){})", c_type(type.dtype), tensor(node.inputs[0]).ptr);
        } else if (auto it = first_output.find(ref); it != first_output.end()) {
          ptr = fmt::format("(({}*)out[{}])", c_type(type.dtype), it->second);
          placed_.insert(it->second);
        } else {
          ptr = fmt::format("(({}*)(ws + {}))", c_type(type.dtype), fixed_bytes_);
          fixed_bytes_ += align_up(tensor_bytes(type));
        }
        tensors_[ref] = CTensor{ptr, type};
      }
    }
  }

  const CTensor& tensor(TensorRef ref) const { return tensors_.at(ref); }
  const CTensor& in(const ir::Node& node, size_t i) const { return tensor(node.inputs.at(i)); }
  const CTensor& out(int32_t id, int32_t port = 0) const { return tensor({id, port}); }

  int64_t scratch(int64_t bytes) {
    const int64_t at = fixed_bytes_;
    fixed_bytes_ += align_up(bytes);
    return at;
  }

  void need_thread_bytes(int64_t bytes) {
    thread_bytes_ = std::max(thread_bytes_, align_up(bytes));
  }

  void lower(int32_t id, const ir::Node& node, int& fused_count) {
    std::visit(ir::Overloaded{
                   [&](const ir::InputOp&) {},
                   [&](const ir::ReshapeOp&) {},
                   [&](const ir::MatmulOp& op) {
                     if (op.library)
                       library_matmul(id, node);
                     else
                       matmul(id, node);
                   },
                   [&](const ir::UnaryOp& op) {
                     const CTensor& x = in(node, 0);
                     body_.line("yr::unary_par({}, {}, {}, {}, nt);", unary_functor(op), x.ptr,
                                out(id).ptr, ir::num_elements(x.type.dims));
                   },
                   [&](const ir::BinaryOp& op) {
                     const CTensor &a = in(node, 0), &b = in(node, 1);
                     const Dims& od = out(id).type.dims;
                     const size_t rank = od.size();
                     Dims ad = a.type.dims, bd = b.type.dims;
                     ad.insert(ad.begin(), rank - ad.size(), 1);
                     bd.insert(bd.begin(), rank - bd.size(), 1);
                     body_.line("{{ static const int64_t sa[] = {}, sb[] = {}, d[] = {};",
                                brace_list(broadcast_strides4(ad)),
                                brace_list(broadcast_strides4(bd)), brace_list(pad4(od, 1)));
                     body_.line("  yr::binary4_par({}, {}, sa, {}, sb, {}, d, nt); }}",
                                binary_functor(op.fn), a.ptr, b.ptr, out(id).ptr);
                   },
                   [&](const ir::ReduceOp& op) {
                     const CTensor& x = in(node, 0);
                     ir::AxisView v(x.type.dims, op.dim);
                     const char* fn = op.fn == ir::ReduceFn::sum    ? "yr::Red::sum"
                                      : op.fn == ir::ReduceFn::mean ? "yr::Red::mean"
                                                                    : "yr::Red::max";
                     body_.line("yr::reduce({}, {}, {}, {}, {}, {}, nt);", fn, x.ptr, out(id).ptr,
                                v.outer, v.extent, v.inner);
                   },
                   [&](const ir::RmsNormOp& op) {
                     norm(id, node, op.normalized_shape, op.eps, op.has_weight, false, false);
                   },
                   [&](const ir::LayerNormOp& op) {
                     norm(id, node, op.normalized_shape, op.eps, op.has_weight, op.has_bias, true);
                   },
                   [&](const ir::SoftmaxOp& op) {
                     const CTensor& x = in(node, 0);
                     ir::AxisView v(x.type.dims, op.dim);
                     need_thread_bytes(v.extent * 4);
                     body_.line("yr::softmax({}, {}, {}, {}, {}, thr, thr_stride, nt);", x.ptr,
                                out(id).ptr, v.outer, v.extent, v.inner);
                   },
                   [&](const ir::ConcatOp& op) { concat_split(id, node, op.dim, true); },
                   [&](const ir::SplitOp& op) { concat_split(id, node, op.dim, false); },
                   [&](const ir::PermuteOp& op) { permute(id, node, op); },
                   [&](const ir::EmbeddingOp&) { embedding(id, node); },
                   [&](const ir::RopeOp& op) { rope(id, node, op); },
                   [&](const ir::QuantMatmulOp& op) { quant_matmul(id, node, op); },
                   [&](const ir::PagedAttentionOp& op) { paged_attention(id, node, op); },
                   [&](const ir::FusedOp& op) {
                     std::vector<CTensor> operands, outputs;
                     for (size_t i = 0; i < node.inputs.size(); ++i)
                       operands.push_back(in(node, i));
                     for (size_t p = 0; p < node.outputs.size(); ++p)
                       outputs.push_back(out(id, int32_t(p)));
                     FusedFunction f = lower_fused(
                         *op.body, fmt::format("yr_fused_{}", fused_count++), operands, outputs);
                     functions_.raw(f.definition);
                     body_.line("{}", f.call);
                     need_thread_bytes(f.thread_scratch_bytes);
                   },
               },
               node.op);
  }

  // quant_matmuls of one format that read the same activations run as one group, emitted at the
  // first member, when every member's weight is ready by then (graph inputs always are).
  std::vector<int32_t> quant_group(int32_t id, const ir::Node& node, ir::QuantFormat format,
                                   bool prefetch) const {
    std::vector<int32_t> group{id};
    const auto& nodes = graph_.nodes();
    for (size_t other = size_t(id) + 1; other < nodes.size(); ++other) {
      const auto* op = std::get_if<ir::QuantMatmulOp>(&nodes[other].op);
      if (op && op->format == format && op->prefetch == prefetch &&
          nodes[other].inputs[0] == node.inputs[0] && nodes[other].inputs[1].node < id)
        group.push_back(int32_t(other));
    }
    return group;
  }

  void quant_matmul(int32_t id, const ir::Node& node, const ir::QuantMatmulOp& op) {
    if (grouped_.contains(id)) return;  // computed with its group's first member
    uses_quant_ = true;
    const CTensor& x = in(node, 0);
    const int64_t k = x.type.dims.back(), rows = ir::num_elements(x.type.dims) / k;
    const int64_t at = scratch(align_up(rows * k) + rows * (k / ir::kQuantBlock) * 8);
    std::vector<std::string> jobs;
    for (int32_t member : quant_group(id, node, op.format, op.prefetch)) {
      grouped_.insert(member);
      const CTensor& w = in(graph_.nodes()[size_t(member)], 1);
      jobs.push_back(fmt::format("{{(const std::byte*){}, {}, {}, {}}}", w.ptr, w.type.dims[1],
                                 w.type.dims[0], out(member).ptr));
    }
    body_.line("{{ const yrq::QuantJob jobs[] = {{{}}};", fmt::join(jobs, ", "));
    body_.line("  yrq::quant_matmul<yrq::{}, {}>({}, {}, {}, jobs, {}, ws + {}, nt); }}",
               quant_kind(op.format), op.prefetch, x.ptr, rows, k, jobs.size(), at);
  }

  struct MatmulShape {
    int64_t batches, m, n, k;
    std::vector<int64_t> a_off, b_off;  // element offsets of each batch's A and B (broadcast)
  };

  MatmulShape matmul_shape(const ir::Node& node, const CTensor& o) const {
    const Dims &ad = in(node, 0).type.dims, &bd = in(node, 1).type.dims, &od = o.type.dims;
    const int64_t m = od[od.size() - 2], n = od.back(), k = ad.back();
    const Dims batch(od.begin(), od.end() - 2);
    const Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    const int64_t batches = ir::num_elements(batch);
    std::vector<int64_t> a_off, b_off;
    for (int64_t q = 0; q < batches; ++q) {
      Dims coords(batch.size());
      int64_t rest = q;
      for (size_t j = batch.size(); j-- > 0;) {
        coords[j] = rest % batch[j];
        rest /= batch[j];
      }
      auto index = [&](const Dims& dims) {
        const size_t lead = coords.size() - dims.size();
        int64_t index = 0;
        for (size_t j = 0; j < dims.size(); ++j)
          index = index * dims[j] + (dims[j] == 1 ? 0 : coords[lead + j]);
        return index;
      };
      a_off.push_back(index(a_batch) * m * k);
      b_off.push_back(index(b_batch) * k * n);
    }
    return {batches, m, n, k, std::move(a_off), std::move(b_off)};
  }

  void matmul(int32_t id, const ir::Node& node) {
    const CTensor &a = in(node, 0), &b = in(node, 1);
    const CTensor& o = out(id);
    const auto [batches, m, n, k, a_off, b_off] = matmul_shape(node, o);
    std::string c32 = o.ptr;
    if (o.type.dtype != DType::f32)
      c32 = fmt::format("((float*)(ws + {}))", scratch(batches * m * n * 4));
    body_.line("{{ static const int64_t ao[] = {}, bo[] = {};", brace_list(a_off),
               brace_list(b_off));
    body_.line("  yr::matmul({}, ao, bo, {}, {}, {}, {}, {}, {}, {}, thr, thr_stride, nt); }}",
               batches, m, n, k, a.ptr, b.ptr, o.ptr, c32);
  }

  // cblas_sgemm (or sgemv for one row) through the table the backend fills (blas.h), row-major,
  // one call per batch: the library threads each call itself, on the module's thread count.
  void library_matmul(int32_t id, const ir::Node& node) {
    const CTensor &a = in(node, 0), &b = in(node, 1);
    const CTensor& o = out(id);
    for (const CTensor* t : {&a, &b, &o})
      if (t->type.dtype != DType::f32)
        fail("a library matmul computes in f32 only (cblas_sgemm), this one has {} {}",
             t == &o ? "a result of" : "an operand of", ir::format_type(t->type));
    const auto [batches, m, n, k, a_off, b_off] = matmul_shape(node, o);
    for (int64_t extent : {m, n, k})
      if (extent > std::numeric_limits<int>::max())
        fail("extent {} exceeds the BLAS's 32-bit integers", extent);
    uses_blas_ = true;
    body_.line("if (!yr_blas.sgemm) {{");
    body_.line(
        "  snprintf(err, errlen, \"matmul '{}': a library matmul ran before the backend set "
        "yr_blas\");",
        node.name);
    body_.line("  return 1;");
    body_.line("}}");
    body_.line("if (yr_blas.get_threads() != nt) yr_blas.set_threads(nt);");
    body_.line("{{ static const int64_t ao[] = {}, bo[] = {};", brace_list(a_off),
               brace_list(b_off));
    body_.line("  for (int64_t q = 0; q < {}; ++q)", batches);
    // 101, 111, 112: CblasRowMajor, CblasNoTrans, CblasTrans. One row is Bᵀ·a, a GEMV, as NumPy
    // calls it: OpenBLAS 0.3.21's sgemm packs B even for one row, which costs more than the
    // product when B is a large weight.
    if (m == 1)
      body_.line(
          "    yr_blas.sgemv(101, 112, {0}, {1}, 1.0f, {2} + bo[q], {1}, {3} + ao[q], 1, 0.0f, "
          "{4} + q * {1}, 1); }}",
          k, n, b.ptr, a.ptr, o.ptr);
    else
      body_.line(
          "    yr_blas.sgemm(101, 111, 111, {0}, {1}, {2}, 1.0f, {3} + ao[q], {2}, {4} + bo[q], "
          "{1}, 0.0f, {5} + q * {6}, {1}); }}",
          m, n, k, a.ptr, b.ptr, o.ptr, m * n);
  }

  void norm(int32_t id, const ir::Node& node, const Dims& shape, double eps, bool weight, bool bias,
            bool centered) {
    const CTensor& x = in(node, 0);
    const int64_t group = ir::num_elements(shape);
    const int64_t rows = ir::num_elements(x.type.dims) / group;
    const std::string null = fmt::format("(const {}*)nullptr", c_type(x.type.dtype));
    const std::string w = weight ? in(node, 1).ptr : null;
    const std::string b = bias ? in(node, weight ? 2 : 1).ptr : null;
    body_.line("yr::norm_rows({}, {}, {}, {}, {}, {}, {:.9e}f, {}, nt);", x.ptr, w, b, out(id).ptr,
               rows, group, eps, centered ? "true" : "false");
  }

  // Concat copies each operand into its slot along `dim`; split copies each slot out.
  void concat_split(int32_t id, const ir::Node& node, int dim, bool concat) {
    const TensorType& whole = concat ? out(id).type : in(node, 0).type;
    const ir::AxisView w(whole.dims, dim);
    const std::string whole_ptr = concat ? out(id).ptr : in(node, 0).ptr;
    int64_t offset = 0;
    const size_t parts = concat ? node.inputs.size() : node.outputs.size();
    for (size_t p = 0; p < parts; ++p) {
      const CTensor& part = concat ? in(node, p) : out(id, int32_t(p));
      const ir::AxisView v(part.type.dims, dim);
      const std::vector<int64_t> d{1, v.outer, v.extent, v.inner};
      const std::vector<int64_t> part_s{0, v.extent * v.inner, v.inner, 1};
      const std::vector<int64_t> whole_s{0, w.extent * w.inner, w.inner, 1};
      const std::string at = fmt::format("{} + {}", whole_ptr, offset * w.inner);
      body_.line("{{ static const int64_t s[] = {}, ds[] = {}, d[] = {};",
                 brace_list(concat ? part_s : whole_s), brace_list(concat ? whole_s : part_s),
                 brace_list(d));
      body_.line("  yr::copy4({}, s, {}, ds, d, nt); }}", concat ? part.ptr : at,
                 concat ? at : part.ptr);
      offset += v.extent;
    }
  }

  void permute(int32_t id, const ir::Node& node, const ir::PermuteOp& op) {
    const CTensor& x = in(node, 0);
    const CTensor& o = out(id);
    const std::vector<int64_t> xs = row_major_strides(x.type.dims);
    std::vector<int64_t> s;
    for (int p : op.perm) s.push_back(xs[size_t(p)]);
    s.insert(s.begin(), 4 - s.size(), 0);
    std::vector<int64_t> ds = row_major_strides(o.type.dims);
    ds.insert(ds.begin(), 4 - ds.size(), 0);
    body_.line("{{ static const int64_t s[] = {}, ds[] = {}, d[] = {};", brace_list(s),
               brace_list(ds), brace_list(pad4(o.type.dims, 1)));
    body_.line("  yr::copy4({}, s, {}, ds, d, nt); }}", x.ptr, o.ptr);
  }

  void embedding(int32_t id, const ir::Node& node) {
    const CTensor &table = in(node, 0), &ids = in(node, 1);
    const int64_t vocab = table.type.dims[0], width = table.type.dims[1];
    body_.line("for (int64_t t = 0; t < {}; ++t) {{", ir::num_elements(ids.type.dims));
    body_.line("  const int32_t id = {}[t];", ids.ptr);
    body_.line("  if (id < 0 || id >= {}) {{", vocab);
    body_.line(
        "    snprintf(err, errlen, \"embedding '{}': ids element %lld = %d is outside the "
        "table's rows [0, {})\", (long long)t, int(id));",
        node.name, vocab);
    body_.line("    return 1;");
    body_.line("  }}");
    body_.line("  std::memcpy({} + t * {}, {} + int64_t(id) * {}, {});", out(id).ptr, width,
               table.ptr, width, width * int64_t(ir::dtype_size(table.type.dtype)));
    body_.line("}}");
  }

  void rope(int32_t id, const ir::Node& node, const ir::RopeOp& op) {
    const CTensor &x = in(node, 0), &pos = in(node, 1);
    const Dims& d = x.type.dims;
    const int64_t seq = d[d.size() - 3], heads = d[d.size() - 2], hd = d.back();
    const int64_t outer = ir::num_elements(d) / (seq * heads * hd);
    const bool inter = op.style == ir::RopeStyle::interleaved;
    body_.line("for (int64_t s = 0; s < {}; ++s) {{", seq);
    body_.line("  const int32_t p = {}[s];", pos.ptr);
    body_.line("  if (p < 0) {{");
    body_.line(
        "    snprintf(err, errlen, \"rope '{}': positions[%lld] = %d is negative; positions "
        "count from 0\", (long long)s, int(p));",
        node.name);
    body_.line("    return 1;");
    body_.line("  }}");
    body_.line("  for (int64_t i = 0; i < {}; ++i) {{", hd / 2);
    body_.line("    const double ang = double(p) * std::pow({:.17g}, -2.0 * double(i) / {}.0);",
               op.theta, hd);
    body_.line("    const float c = float(std::cos(ang)), sn = float(std::sin(ang));");
    body_.line("    const int64_t ia = {}, ib = {};", inter ? "2 * i" : "i",
               inter ? "2 * i + 1" : fmt::format("i + {}", hd / 2));
    body_.line("    for (int64_t o = 0; o < {}; ++o)", outer);
    body_.line("      for (int64_t h = 0; h < {}; ++h) {{", heads);
    body_.line("        const int64_t base = ((o * {} + s) * {} + h) * {};", seq, heads, hd);
    body_.line("        const float a = yr::ld({0}[base + ia]), b = yr::ld({0}[base + ib]);",
               x.ptr);
    body_.line("        yr::st({0} + base + ia, a * c - b * sn);", out(id).ptr);
    body_.line("        yr::st({0} + base + ib, a * sn + b * c);", out(id).ptr);
    body_.line("      }}");
    body_.line("  }}");
    body_.line("}}");
  }

  // ir::PagedAttentionOp: the indices checked (a bad one is the reference executor's error), the
  // pool copied where the caller bound two buffers, the appends, then one online-softmax pass per
  // row and head over the row's keys.
  void paged_attention(int32_t id, const ir::Node& node, const ir::PagedAttentionOp& op) {
    const CTensor &q = in(node, 0), &k = in(node, 1), &v = in(node, 2), &pool_in = in(node, 3),
                  &table = in(node, 4), &pos = in(node, 5);
    const CTensor &y = out(id, 0), &pool = out(id, 1);
    const int64_t rows = q.type.dims[0], heads = q.type.dims[1], d = q.type.dims[2];
    const int64_t kvh = k.type.dims[1], blocks = pool_in.type.dims[0], bt = op.block_tokens;
    const int64_t mb = table.type.dims[1], limit = mb * bt;
    auto error = [&](const std::string& message, const std::string& args) {
      body_.line("    snprintf(err, errlen, \"paged_attention '{}': {}\", {});", node.name, message,
                 args);
      body_.line("    return 1;");
    };
    body_.line("if ((const void*){} != (const void*){})", pool.ptr, pool_in.ptr);
    body_.line("  std::memcpy({}, {}, {});", pool.ptr, pool_in.ptr, tensor_bytes(pool.type));
    body_.line("for (int64_t r = 0; r < {}; ++r) {{", rows);
    body_.line("  const int32_t p = {}[r];", pos.ptr);
    body_.line("  if (p < -1 || p >= {}) {{", limit);
    error(fmt::format("positions[%lld] = %d is outside [-1, {})", limit), "(long long)r, int(p)");
    body_.line("  }}");
    body_.line("  for (int64_t j = 0; p >= 0 && j <= p / {}; ++j) {{", bt);
    body_.line("    const int32_t b = {}[r * {} + j];", table.ptr, mb);
    body_.line("    if (b < 0 || b >= {}) {{", blocks);
    error(fmt::format("table[%lld][%lld] = %d is outside the pool's {} blocks", blocks),
          "(long long)r, (long long)j, int(b)");
    body_.line("    }}");
    body_.line("  }}");
    body_.line("  for (int64_t s = 0; p >= 0 && s < r; ++s) {{");
    body_.line("    const int32_t ps = {}[s];", pos.ptr);
    body_.line(
        "    if (ps < 0 || ps % {0} != p % {0} || {1}[s * {2} + ps / {0}] != {1}[r * {2} + p / "
        "{0}])",
        bt, table.ptr, mb);
    body_.line("      continue;");
    error(fmt::format("rows %lld and %lld both store to token %d of pool block %d"),
          fmt::format("(long long)s, (long long)r, int(p % {}), int({}[r * {} + p / {}])", bt,
                      table.ptr, mb, bt));
    body_.line("  }}");
    body_.line("  if (p < 0) continue;");
    body_.line("  const int64_t at = int64_t({}[r * {} + p / {}]) * {} + p % {};", table.ptr, mb,
               bt, 2 * kvh * bt, bt);
    body_.line("  for (int64_t h = 0; h < {}; ++h)", kvh);
    body_.line("    for (int64_t e = 0; e < {}; ++e) {{", d);
    body_.line("      yr::st({} + (at + h * {}) * {} + e, yr::ld({}[(r * {} + h) * {} + e]));",
               pool.ptr, bt, d, k.ptr, kvh, d);
    body_.line("      yr::st({} + (at + {} + h * {}) * {} + e, yr::ld({}[(r * {} + h) * {} + e]));",
               pool.ptr, kvh * bt, bt, d, v.ptr, kvh, d);
    body_.line("    }}");
    body_.line("}}");
    body_.line("#pragma omp parallel for num_threads(nt) schedule(dynamic)");
    body_.line("for (int64_t rh = 0; rh < {}; ++rh) {{", rows * heads);
    body_.line("  const int64_t r = rh / {0}, h = rh % {0}, g = h / {1};", heads, heads / kvh);
    body_.line("  const int32_t p = {}[r];", pos.ptr);
    body_.line("  float* yo = {} + rh * {};", y.ptr, d);
    body_.line("  float acc[{}] = {{}};", d);
    body_.line("  float top = -std::numeric_limits<float>::infinity(), total = 0;");
    body_.line("  const float* qr = {} + rh * {};", q.ptr, d);
    body_.line("  for (int64_t j = 0; j <= p; ++j) {{");
    body_.line("    const int64_t at = int64_t({}[r * {} + j / {}]) * {} + j % {};", table.ptr, mb,
               bt, 2 * kvh * bt, bt);
    body_.line("    const auto* kj = {} + (at + g * {}) * {};", pool.ptr, bt, d);
    body_.line("    const auto* vj = {} + (at + {} + g * {}) * {};", pool.ptr, kvh * bt, bt, d);
    body_.line("    float s = 0;");
    body_.line("    for (int64_t e = 0; e < {}; ++e) s += qr[e] * yr::ld(kj[e]);", d);
    body_.line("    s *= {:.9g}f;", 1.0 / std::sqrt(double(d)));
    body_.line(
        "    const float next = std::max(top, s), keep = std::exp(top - next), w = std::exp(s - "
        "next);");
    body_.line("    total = total * keep + w;");
    body_.line("    for (int64_t e = 0; e < {}; ++e) acc[e] = acc[e] * keep + w * yr::ld(vj[e]);",
               d);
    body_.line("    top = next;");
    body_.line("  }}");
    body_.line("  for (int64_t e = 0; e < {}; ++e) yo[e] = p < 0 ? 0.0f : acc[e] / total;", d);
    body_.line("}}");
  }

  // Outputs that are inputs, reshapes of something, or marked twice get a byte copy at the end.
  void copy_unplaced_outputs() {
    for (size_t o = 0; o < graph_.outputs().size(); ++o) {
      if (placed_.count(o)) continue;
      const CTensor& t = tensor(graph_.outputs()[o].tensor);
      body_.line("std::memcpy(out[{}], {}, {});", o, t.ptr, tensor_bytes(t.type));
    }
  }

  const ir::KernelGraph& graph_;
  std::map<TensorRef, CTensor> tensors_;
  std::set<size_t> placed_;  // outputs whose buffer a node writes directly
  int64_t fixed_bytes_ = 0;
  int64_t thread_bytes_ = 0;
  bool uses_quant_ = false;    // paste the quantized kernels
  bool uses_blas_ = false;     // define the yr_blas table
  std::set<int32_t> grouped_;  // quant_matmul nodes already emitted with their group
  Emitter functions_;
  Emitter body_;
};

}  // namespace

std::string c_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float";
    case DType::f16: return "yr::f16";
    case DType::bf16: return "yr::bf16";
    case DType::i32: return "int32_t";
    case DType::i8: return "int8_t";
    case DType::u8: return "uint8_t";
  }
  fail("cpu codegen: unknown dtype code {}", int(dtype));
}

std::vector<int64_t> row_major_strides(const Dims& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t j = dims.size(); j-- > 1;) strides[j - 1] = strides[j] * dims[j];
  return strides;
}

std::string brace_list(const std::vector<int64_t>& values) {
  return fmt::format("{{{}}}", fmt::join(values, ", "));
}

std::string generate_source(const ir::KernelGraph& graph) {
  return Lowering(graph).run();
}

}  // namespace yirage::backend::cpu
