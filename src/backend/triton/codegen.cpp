// The driver of the Triton lowering: slots, the flat gathers, and the program's JSON.
#include "backend/triton/codegen.h"

#include <cctype>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/passes/buffer_plan.h"
#include "ir/block_graph.h"
#include "support/error.h"

namespace yirage::backend::triton {
namespace detail {

std::string identifier(const std::string& text) {
  std::string id;
  for (char c : text) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return id;
}

}  // namespace detail

namespace {

constexpr int64_t kGatherBlock = 1024;

// Element e of a tensor of `dims`, counted row-major, moves from src[src_base + Σ c_j · src_j]
// to dst[dst_base + Σ c_j · dst_j], c its coordinates: copies, permutes, splits and concats.
struct Gather {
  ir::Dims dims, src_strides, dst_strides;
  int64_t src_base = 0, dst_base = 0;
};

std::string gather_offset(const Gather& g, const ir::Dims& strides, int64_t base) {
  const ir::Dims walk = ir::row_major_strides(g.dims);
  std::vector<std::string> terms;
  if (base != 0) terms.push_back(fmt::format("{}", base));
  for (size_t j = 0; j < g.dims.size(); ++j) {
    if (g.dims[j] == 1) continue;
    std::string coord = j == 0 ? fmt::format("(e // {})", walk[j])
                               : fmt::format("(e // {} % {})", walk[j], g.dims[j]);
    terms.push_back(strides[j] == 1 ? coord : fmt::format("{} * {}", coord, strides[j]));
  }
  if (terms.empty()) return "0";
  return fmt::format("{}", fmt::join(terms, " + "));
}

TritonKernel gather_kernel(const Gather& g, const std::string& name, int from, int to,
                           const std::string& what) {
  const int64_t n = ir::num_elements(g.dims);
  TritonKernel k;
  k.name = name;
  k.what = what;
  k.args = {from, to};
  k.grid = {unsigned((n + kGatherBlock - 1) / kGatherBlock), 1, 1};
  k.source = detail::module_header() + fmt::format(
                                           "@triton.jit\n"
                                           "def {0}(src, dst):\n"
                                           "    e = tl.program_id(0) * {1} + tl.arange(0, {1})\n"
                                           "    inside = e < {2}\n"
                                           "    v = tl.load(src + {3}, mask=inside)\n"
                                           "    tl.store(dst + {4}, v, mask=inside)\n",
                                           name, kGatherBlock, n,
                                           gather_offset(g, g.src_strides, g.src_base),
                                           gather_offset(g, g.dst_strides, g.dst_base));
  return k;
}

Gather plain_copy(const ir::Dims& dims) {
  const ir::Dims strides = ir::row_major_strides(dims);
  return {dims, strides, strides};
}

class ProgramBuilder {
 public:
  explicit ProgramBuilder(const ir::KernelGraph& graph) : graph_(graph) {}

  // Buffers by the shared planning pass (backend/passes/buffer_plan.h), with every split copied:
  // Triton's programs take no strided views.
  Program build() {
    const passes::BufferPlan plan = passes::plan_buffers(graph_, {});
    program_.slots = plan.slots;
    slot_of_ = plan.slot_of;
    for (size_t id = 0; id < graph_.nodes().size(); ++id) {
      const ir::Node& node = graph_.nodes()[id];
      if (std::holds_alternative<ir::InputOp>(node.op) || plan.aliased[id]) continue;
      std::vector<int> out;
      for (size_t port = 0; port < node.outputs.size(); ++port)
        out.push_back(slot_of_.at({int32_t(id), int32_t(port)}));
      lower_node(node, out);
    }
    const std::vector<int>& output_slots = plan.output_slots;
    for (size_t i = 0; i < graph_.outputs().size(); ++i) {
      const ir::GraphOutput& output = graph_.outputs()[i];
      const int from = slot_of_.at(output.tensor);
      if (from != output_slots[i])
        add_gather(plain_copy(graph_.type(output.tensor).dims), "output_" + output.name, from,
                   output_slots[i], fmt::format("output '{}' (copy)", output.name));
    }
    return std::move(program_);
  }

 private:
  std::string kernel_name(const std::string& what) const {
    return fmt::format("yr_{}_{}", program_.kernels.size(), detail::identifier(what));
  }

  void add_gather(const Gather& g, const std::string& name, int from, int to,
                  const std::string& what) {
    program_.kernels.push_back(gather_kernel(g, kernel_name(name), from, to, what));
  }

  void lower_node(const ir::Node& node, const std::vector<int>& out) {
    std::vector<int> in;
    for (ir::TensorRef t : node.inputs) in.push_back(slot_of_.at(t));
    const std::string what = fmt::format("node '{}' ({})", node.name, ir::op_name(node.op));
    std::vector<int> args = in;
    args.insert(args.end(), out.begin(), out.end());
    if (const auto* fused = std::get_if<ir::FusedOp>(&node.op)) {
      program_.kernels.push_back(
          detail::lower_block_graph(*fused->body, kernel_name(node.name), args, what));
    } else if (detail::has_block_graph(node.op)) {
      program_.kernels.push_back(detail::lower_block_graph(detail::block_graph_of(graph_, node),
                                                           kernel_name(node.name), args, what));
    } else if (const auto* split = std::get_if<ir::SplitOp>(&node.op)) {
      lower_split(node, *split, in[0], out, what);
    } else if (const auto* concat = std::get_if<ir::ConcatOp>(&node.op)) {
      lower_concat(node, *concat, in, out[0], what);
    } else if (const auto* permute = std::get_if<ir::PermuteOp>(&node.op)) {
      const ir::Dims src = ir::row_major_strides(graph_.type(node.inputs[0]).dims);
      Gather g = plain_copy(node.outputs[0].dims);
      for (size_t j = 0; j < permute->perm.size(); ++j)
        g.src_strides[j] = src[size_t(permute->perm[j])];
      add_gather(g, node.name, in[0], out[0], what);
    } else {
      fail("triton: {} has no Triton lowering", what);
    }
  }

  void lower_split(const ir::Node& node, const ir::SplitOp& split, int in,
                   const std::vector<int>& out, const std::string& what) {
    const ir::Dims src = ir::row_major_strides(graph_.type(node.inputs[0]).dims);
    int64_t start = 0;
    for (size_t port = 0; port < out.size(); ++port) {
      Gather g = plain_copy(node.outputs[port].dims);
      g.src_strides = src;
      g.src_base = start * src[size_t(split.dim)];
      add_gather(g, fmt::format("{}_{}", node.name, port), in, out[port],
                 fmt::format("{}, part {}", what, port));
      start += split.sizes[port];
    }
  }

  void lower_concat(const ir::Node& node, const ir::ConcatOp& concat, const std::vector<int>& in,
                    int out, const std::string& what) {
    const ir::Dims dst = ir::row_major_strides(node.outputs[0].dims);
    int64_t start = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const ir::Dims& part = graph_.type(node.inputs[i]).dims;
      Gather g = plain_copy(part);
      g.dst_strides = dst;
      g.dst_base = start * dst[size_t(concat.dim)];
      add_gather(g, fmt::format("{}_{}", node.name, i), in[i], out,
                 fmt::format("{}, operand {}", what, i));
      start += part[size_t(concat.dim)];
    }
  }

  const ir::KernelGraph& graph_;
  Program program_;
  std::map<ir::TensorRef, int> slot_of_;
};

std::string_view slot_kind_name(SlotKind kind) {
  switch (kind) {
    case SlotKind::input: return "input";
    case SlotKind::output: return "output";
    case SlotKind::scratch: return "scratch";
    case SlotKind::view: return "view";  // not planned here: splits are copied
  }
  return "?";
}

}  // namespace

Program lower(const ir::KernelGraph& graph) {
  return ProgramBuilder(graph).build();
}

nlohmann::json to_json(const Program& program) {
  nlohmann::json slots = nlohmann::json::array(), kernels = nlohmann::json::array();
  for (const Slot& slot : program.slots)
    slots.push_back({{"kind", slot_kind_name(slot.kind)},
                     {"index", slot.index},
                     {"dtype", ir::dtype_name(slot.type.dtype)},
                     {"shape", slot.type.dims}});
  for (const TritonKernel& k : program.kernels)
    kernels.push_back({{"name", k.name},
                       {"source", k.source},
                       {"grid", k.grid},
                       {"num_warps", k.num_warps},
                       {"args", k.args},
                       {"what", k.what}});
  return {{"slots", slots}, {"kernels", kernels}};
}

}  // namespace yirage::backend::triton
