// Reading eight consecutive elements of a tile at once (see block_lowering.h). A pass that
// touches elements one at a time pays its index arithmetic and a 2-byte shared-memory load for
// every element of a 16-bit tile; for the for-loop's staging and row reductions of 8 and 16
// activation rows that was most of a streamed kernel's instructions (ncu, rmsnorm_linear bs8:
// 7.7 K of 9.4 K a warp). Here a 16-bit iterator tile's run of eight is one 16-byte load, and
// the ops inlined above it are computed from its registers. The staging passes of tensor-core
// and streamed products (stage_pass()) store such runs as 16-byte vectors.
#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;
using ir::Dims;

namespace {

// Whether an operand of `in` dims, broadcast to `out`, moves with the output's last dim (its
// elements base..base+7 are consecutive too) or stays put (one element serves all eight).
bool follows_last_dim(const Dims& out, const Dims& in) {
  return !in.empty() && !out.empty() && in.back() == out.back() && out.back() != 1;
}

}  // namespace

// The 16-byte load of a 16-bit iterator tile's elements base..base+7, declared once in `loads`
// for each distinct base, and the name it is held in.
std::string BlockLowering::run_load(int32_t id, const std::string& base, RunLoads& loads) const {
  const std::string at = stored_index(id, base), key = fmt::format("{}@{}", id, at);
  for (const auto& [where, name] : loads.names)
    if (where == key) return name;
  const std::string name = fmt::format("x{}_{}", id, loads.names.size());
  loads.code += fmt::format("{}const uint4 {} = *reinterpret_cast<const uint4*>({} + {});\n",
                            loads.indent, name, tile_var(id), at);
  loads.names.emplace_back(key, name);
  return name;
}

// Whether element runs of eight of iterator `id` lie whole and 16-byte aligned in its storage.
bool BlockLowering::loads_runs(int32_t id) const {
  const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
  if (!it || swizzled(id)) return false;
  const ir::TensorType& operand = g_.operands()[size_t(it->operand)];
  const int64_t width = node(id).tile.dims.back();
  return ir::dtype_size(operand.dtype) == 2 && width % 8 == 0 && (width + row_pad(id)) % 8 == 0;
}

// A float expression for element `base` + u of tile `id` (u an int in scope, 0 to 7), where
// `base` is a multiple of 8 and the eight elements share a row of the tile.
std::string BlockLowering::read_run(int32_t id, const std::string& base, RunLoads& loads) const {
  const BlockNode& n = node(id);
  if (loads_runs(id))
    return fmt::format(
        "yr_to_f(reinterpret_cast<const {}*>(&{})[u])",
        ctype(g_.operands()[size_t(std::get<ir::InputIteratorOp>(n.op).operand)].dtype),
        run_load(id, base, loads));
  if (!schedule_.tiles[size_t(id)].inlined) return read(id, fmt::format("{} + u", base));
  auto operand = [&](size_t i) {
    const Dims& in = node(n.inputs[i]).tile.dims;
    const std::string index = broadcast_index(n.tile.dims, in, "(" + base + ")");
    return follows_last_dim(n.tile.dims, in) ? read_run(n.inputs[i], index, loads)
                                             : read(n.inputs[i], index);
  };
  if (const auto* u = std::get_if<ir::UnaryOp>(&n.op)) return unary_expr(*u, operand(0));
  return binary_expr(std::get<ir::BinaryOp>(n.op).fn, operand(0), operand(1));
}

// The 16-bit pattern of element `base` + u of tile `id` as dtype `t`, as bits() gives it.
std::string BlockLowering::bits_run(int32_t id, const std::string& base, const std::string& t,
                                    RunLoads& loads) const {
  const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
  if (it && loads_runs(id) && ctype(g_.operands()[size_t(it->operand)].dtype) == t)
    return fmt::format("reinterpret_cast<const unsigned short*>(&{})[u]",
                       run_load(id, base, loads));
  return fmt::format("yr_bits({}{{}}, {})", t, read_run(id, base, loads));
}

// A pass that writes every element e of tile `a`, rounded to the 16-bit type `t`, to the address
// `dst` (an expression in e and in the names `decls` declares from it). Where the tile has a run
// of eight for every thread at least, a thread takes eight elements of a row and stores them as
// one 16-byte vector: the caller's rows are multiples of 8 long and `dst` is 16-byte aligned at
// every run. A smaller tile takes an element a thread, since the pass's time is its slowest
// thread's: a single activation row staged by 32 threads, eight silu each, made the Llama MLP's
// down projection 25% slower.
std::string BlockLowering::stage_pass(int32_t a, const std::string& t, const std::string& decls,
                                      const std::string& dst) const {
  const int64_t count = ir::num_elements(node(a).tile.dims);
  if (count / 8 < kBlockThreads)
    return fmt::format(
        "  for (int e = threadIdx.x; e < {count}; e += {threads}) {{\n"
        "{decls}"
        "    *({dst}) = {bits};\n"
        "  }}\n",
        fmt::arg("count", count), fmt::arg("threads", kBlockThreads), fmt::arg("decls", decls),
        fmt::arg("dst", dst), fmt::arg("bits", bits(a, "e", t)));
  RunLoads loads;
  const std::string run_bits = bits_run(a, "e", t, loads);
  return fmt::format(
      "  for (int e8 = threadIdx.x; e8 < {vectors}; e8 += {threads}) {{\n"
      "    const int e = e8 * 8;\n"
      "{decls}{loads}"
      "    __align__(16) unsigned short v[8];\n"
      "#pragma unroll\n"
      "    for (int u = 0; u < 8; ++u) v[u] = {bits};\n"
      "    *reinterpret_cast<uint4*>({dst}) = *reinterpret_cast<const uint4*>(v);\n"
      "  }}\n",
      fmt::arg("vectors", count / 8), fmt::arg("threads", kBlockThreads), fmt::arg("decls", decls),
      fmt::arg("loads", loads.code), fmt::arg("bits", run_bits), fmt::arg("dst", dst));
}

}  // namespace yirage::backend::cuda::detail
