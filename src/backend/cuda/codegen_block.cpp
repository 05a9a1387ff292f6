// The frame of a fused node's kernel and its non-matmul block ops (see block_lowering.h).
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"
#include "support/error.h"

namespace yirage::backend::cuda::detail {

using ir::BlockGraph;
using ir::BlockNode;
using ir::Dims;

namespace {

// Elementwise functions a matmul may recompute for every column tile that reads its operand.
bool cheap_elementwise(const ir::BlockOp& op) {
  if (const auto* u = std::get_if<ir::UnaryOp>(&op))
    return u->fn == ir::UnaryFn::square || u->fn == ir::UnaryFn::neg ||
           u->fn == ir::UnaryFn::relu || u->fn == ir::UnaryFn::mul_scalar;
  if (const auto* b = std::get_if<ir::BinaryOp>(&op))
    return b->fn == ir::BinaryFn::add || b->fn == ir::BinaryFn::sub || b->fn == ir::BinaryFn::mul;
  return false;
}

}  // namespace

BlockLowering::BlockLowering(const BlockGraph& g, const std::string& name,
                             const CodegenOptions& options, std::vector<Dims> operand_strides)
    : g_(g),
      operand_strides_(std::move(operand_strides)),
      name_(name),
      options_(options),
      r_(g.forloop_range()) {
  if (operand_strides_.size() != g.operands().size())
    fail("cuda: fused node '{}' has {} operands but {} stride lists", name_, g.operands().size(),
         operand_strides_.size());
}

const BlockSchedule& BlockLowering::schedule() {
  if (planned_) return schedule_;
  analyse_readers();
  schedule_.register_rows = register_rows();
  if (schedule_.register_rows)
    schedule_.reduction_offset = allocate(kBlockWarps * 4);  // yr_block_reduce()'s scratch
  else
    plan();
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id)
    schedule_.tiles[size_t(id)].role = role(id);
  planned_ = true;
  return schedule_;
}

KernelLaunch BlockLowering::run(const std::vector<int>& in, const std::vector<int>& out) {
  schedule();
  KernelLaunch k;
  k.name = "yr_fused_" + identifier(name_);
  k.what = fmt::format("fused node '{}'", name_);
  for (int s : in) k.args.push_back(s);
  for (int s : out) k.args.push_back(s);
  k.grid = {unsigned(g_.grid().extent[0] * schedule_.stream_ranks), unsigned(g_.grid().extent[1]),
            unsigned(g_.grid().extent[2])};
  k.threads = kBlockThreads;
  k.shared_bytes = size_t(schedule_.shared_bytes);
  if (schedule_.shared_bytes > options_.max_shared_bytes)
    fail("cuda: fused node '{}' needs {} bytes of shared memory, more than the {} a block may have",
         name_, schedule_.shared_bytes, options_.max_shared_bytes);
  k.tensor_maps = tensor_map_args();
  k.arch_specific = uses_wgmma();
  k.source = prelude() + (any_tma() || uses_wgmma() ? tma_prelude() : std::string()) +
             wgmma_prelude() + (paired() ? cluster_prelude() : std::string()) +
             (schedule_.register_rows ? rows_kernel(k.name) : kernel(k.name));
  k.waits_on_prior_grids = true;
  return k;
}

int64_t BlockLowering::elements(int32_t id) const {
  return ir::num_elements(node(id).tile.dims);
}

int64_t BlockLowering::allocate(int64_t bytes, int64_t alignment) {
  const int64_t at = (schedule_.shared_bytes + alignment - 1) / alignment * alignment;
  schedule_.shared_bytes = at + (bytes + 15) / 16 * 16;
  return at;
}

void BlockLowering::analyse_readers() {
  const size_t count = g_.nodes().size();
  schedule_.tiles.assign(count, TileSchedule{});
  for (int32_t id = 0; id < int32_t(count); ++id)
    for (int32_t in : node(id).inputs) {
      ++schedule_.tiles[size_t(in)].readers;
      schedule_.tiles[size_t(in)].reader = id;
    }
  // An accumulator reads its input inside the loop, though its own value exists only after it;
  // a saver reads its input after the post-loop ops.
  auto read_phase = [&](int32_t reader) {
    const ir::BlockOp& op = node(reader).op;
    if (std::holds_alternative<ir::AccumulatorOp>(op)) return ir::BlockPhase::in_loop;
    if (std::holds_alternative<ir::OutputSaverOp>(op)) return ir::BlockPhase::post_loop;
    return g_.phase(reader);
  };
  for (int32_t id = 0; id < int32_t(count); ++id) {
    const ir::BlockOp& op = node(id).op;
    if (!std::holds_alternative<ir::UnaryOp>(op) && !std::holds_alternative<ir::BinaryOp>(op))
      continue;
    if (schedule_.tiles[size_t(id)].readers != 1) continue;
    const int32_t reader = schedule_.tiles[size_t(id)].reader;
    if (read_phase(reader) != g_.phase(id)) continue;
    if (std::holds_alternative<ir::MatmulOp>(node(reader).op) && !cheap_elementwise(op)) continue;
    schedule_.tiles[size_t(id)].inlined = true;
  }
  // A reduction in the loop whose only reader is an adding accumulator adds its results straight
  // into the accumulator's tile: no tile of its own, no pass and barrier for the accumulator.
  for (int32_t id = 0; id < int32_t(count); ++id) {
    const ir::BlockOp& op = node(id).op;
    const auto* reduce = std::get_if<ir::ReduceOp>(&op);
    const bool adds = (reduce && reduce->fn != ir::ReduceFn::max) ||
                      std::holds_alternative<ir::ReduceToWidthOp>(op);
    if (!adds || g_.phase(id) != ir::BlockPhase::in_loop ||
        schedule_.tiles[size_t(id)].readers != 1)
      continue;
    const auto* acc = std::get_if<ir::AccumulatorOp>(&node(schedule_.tiles[size_t(id)].reader).op);
    schedule_.tiles[size_t(id)].reduced_into =
        acc && (acc->fn == ir::AccumFn::sum || acc->fn == ir::AccumFn::mean ||
                acc->fn == ir::AccumFn::rms);
  }
  for (int32_t id = 0; id < int32_t(count); ++id)
    if (can_be_resident(id)) {
      schedule_.tiles[size_t(id)].resident = true;
      schedule_.tiles[size_t(schedule_.tiles[size_t(id)].reader)].resident_of = id;
    }
  find_chains();
  find_streamed_with_halved_staging();
  find_tma_tiles();
}

// Tiles the loop walks are kept in `schedule_.stages` buffers, so that schedule_.stages - 1
// iterations' loads are in flight while one computes. Three at least (where the loop is that long);
// deeper where the shared memory allows it: a memory-bound kernel of one or two blocks per
// multiprocessor keeps too few bytes in flight with three (ncu: rmsnorm_linear at 34% of DRAM
// bandwidth, 18% occupancy). Each block gets the multiprocessor's shared memory (the opt-in limit
// plus the 1 KB the driver reserves per block) divided among the blocks the grid puts on it.
void BlockLowering::plan() {
  plan_loop();
  // A TMA stream gives up stages, then the TMA, where the block's shared memory is short.
  // (A weight too narrow for the registers' column groups stays with the TMA: the lowering then
  // fails on the shared memory, naming the node.)
  while (schedule_.shared_bytes > options_.max_shared_bytes &&
         !schedule_.stream_tma_order.empty()) {
    if (schedule_.stream_stage_cap > 2)
      --schedule_.stream_stage_cap;
    else if (std::all_of(schedule_.stream_tma_order.begin(), schedule_.stream_tma_order.end(),
                         [&](int32_t id) { return register_streamable(id); }))
      schedule_.stream_tma_order.clear();
    else
      break;
    plan_loop();
  }
  if (schedule_.halved_staging && !paired())
    fail("cuda: fused node '{}' stages half of A's K for a block pair that it no longer runs as",
         name_);
  // A pair's blocks must run on two multiprocessors, not share one: each asks for more than
  // half of a multiprocessor's shared memory.
  if (paired())
    schedule_.shared_bytes = std::max(schedule_.shared_bytes, options_.max_shared_bytes / 2 + 1024);
}

void BlockLowering::plan_loop() {
  choose_stream_ranks();
  schedule_.stages = int(std::min<int64_t>(r_, kMinPipelineStages));
  allocate_storage();
  const int64_t per_stage = pipelined_bytes();
  if (options_.multiprocessors <= 0 || r_ <= kMinPipelineStages || per_stage == 0) return;
  const int64_t fixed = schedule_.shared_bytes - kMinPipelineStages * per_stage;
  const int64_t blocks = g_.grid().extent[0] * g_.grid().extent[1] * g_.grid().extent[2];
  const int64_t per_sm = (blocks + options_.multiprocessors - 1) / options_.multiprocessors;
  const int64_t budget = (options_.max_shared_bytes + 1024) / per_sm - 1024;
  const int64_t fits = std::min<int64_t>((budget - fixed) / per_stage, 8);
  schedule_.stages = int(std::min<int64_t>(r_, std::max<int64_t>(kMinPipelineStages, fits)));
  if (schedule_.stages == kMinPipelineStages) return;
  allocate_storage();
  if (schedule_.shared_bytes > options_.max_shared_bytes) {
    schedule_.stages = kMinPipelineStages;
    allocate_storage();
  }
}

// The shared memory one pipeline stage takes: a buffer of every tile the loop walks.
int64_t BlockLowering::pipelined_bytes() const {
  int64_t bytes = 0;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id)
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&node(id).op);
        it && it->fmap != ir::kReplicate && !streamed_tile(id) && !staged_directly(id))
      bytes +=
          stored_elements(id) * int64_t(ir::dtype_size(g_.operands()[size_t(it->operand)].dtype));
  return bytes;
}

void BlockLowering::allocate_storage() {
  schedule_.shared_bytes = 0;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    const BlockNode& n = node(id);
    TileStorage s;
    if (streamed_tile(id) || staged_directly(id)) {
      schedule_.tiles[size_t(id)].storage = s;  // in registers, or in a stream's staged A
      continue;
    }
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&n.op)) {
      s.stages = it->fmap != ir::kReplicate ? pipeline_stages() : 1;
      const int64_t bytes =
          stored_elements(id) * int64_t(ir::dtype_size(g_.operands()[size_t(it->operand)].dtype));
      // A swizzled tile's stages start where the 128-byte swizzle's 1024-byte period does.
      s.offset = allocate(bytes * s.stages, swizzled(id) ? 1024 : 16);
    } else if (!std::holds_alternative<ir::OutputSaverOp>(n.op) &&
               !schedule_.tiles[size_t(id)].inlined && !schedule_.tiles[size_t(id)].resident &&
               !schedule_.tiles[size_t(id)].reduced_into && !absorbed_by_chain(id)) {
      s.offset = allocate(elements(id) * 4);
      const auto* acc = std::get_if<ir::AccumulatorOp>(&n.op);
      if (acc && acc->fn == ir::AccumFn::rescaled_sum)
        s.max_offset = allocate(elements(n.inputs[1]) * 4);
    }
    if (schedule_.tiles[size_t(id)].streamed) {
      if (schedule_.tiles[size_t(id)].stream_owner == id)
        s.staged_a = allocate(stream_staged_elements(id) * 2);
      if (stream_tma(id)) {
        const TmaStreamPlan t = tma_stream_plan(id);
        s.stream_stages = allocate(t.stages * t.chunk * stream_plan(id).n * 2, 1024);
        s.stream_barriers = allocate(8 * t.stages, 8);
      }
    } else if (std::holds_alternative<ir::MatmulOp>(n.op) && a_staged(id)) {
      s.staged_a = allocate(staged_a_elements(id) * 2);
    }
    schedule_.tiles[size_t(id)].storage = s;
  }
  // The reduction scratch: a float per thread for block reductions and split reductions, more
  // for the K-split partials of matmuls. Sized to need, since a kernel of many small blocks (a
  // row each) fits more of them on a multiprocessor.
  int64_t red_floats = kBlockThreads;
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) {
    if (!std::holds_alternative<ir::MatmulOp>(node(id).op) ||
        schedule_.tiles[size_t(id)].chain >= 0)
      continue;
    if (schedule_.tiles[size_t(id)].streamed) {
      const StreamPlan p = stream_plan(id);
      // Split K steps meet in `red`; otherwise the warps write the accumulator directly.
      const int64_t splits = stream_tma(id) ? tma_stream_plan(id).splits : p.splits;
      if (splits > 1) red_floats = std::max(red_floats, splits * p.m * p.n);
    } else if (tensor_core(id)) {
      const MmaPlan p = mma_plan(id);
      red_floats = std::max(red_floats, p.splits * p.mp * p.n);
    } else {
      red_floats = std::max<int64_t>(red_floats, kBlockThreads * 16);
    }
  }
  schedule_.reduction_offset = allocate(red_floats * 4);
  schedule_.barrier_offset = uses_tma() ? allocate(8 * pipeline_stages(), 8) : -1;
}

std::string BlockLowering::tile_var(int32_t id) const {
  return fmt::format("t{}", id);
}

// A float expression for element `index` of tile `id`; an inlined op is computed from its
// operands' elements there.
std::string BlockLowering::read(int32_t id, const std::string& index) const {
  const BlockNode& n = node(id);
  if (std::holds_alternative<ir::InputIteratorOp>(n.op))
    return fmt::format("yr_to_f({}[{}])", tile_var(id), stored_index(id, index));
  if (!schedule_.tiles[size_t(id)].inlined) return fmt::format("{}[{}]", tile_var(id), index);
  auto operand = [&](size_t i) {
    return read(n.inputs[i],
                broadcast_index(n.tile.dims, node(n.inputs[i]).tile.dims, "(" + index + ")"));
  };
  if (const auto* u = std::get_if<ir::UnaryOp>(&n.op)) return unary_expr(*u, operand(0));
  return binary_expr(std::get<ir::BinaryOp>(n.op).fn, operand(0), operand(1));
}

std::string BlockLowering::elementwise(int32_t id, const std::string& expr) const {
  return fmt::format("  for (int e = threadIdx.x; e < {}; e += {}) {}[e] = {};\n", elements(id),
                     kBlockThreads, tile_var(id), expr);
}

// Reduces `dim` in runs: output (outer, w, inner) sums or maxes `run` input elements. A group
// of `lanes` threads (a power of two within a warp) shares each output and combines by shuffles.
// Over the last dim, each thread takes `vec` consecutive elements a step (8 where the runs
// allow): with one element a step, the index arithmetic of every element cost more than its
// value (rmsnorm's sum of squares over 16 rows of 4096, rmsnorm_linear bs8).
std::string BlockLowering::reduce(int32_t id, int dim, int64_t width, bool is_max,
                                  bool mean) const {
  const BlockNode& n = node(id);
  const Dims& x = node(n.inputs[0]).tile.dims;
  int64_t inner = 1;
  for (size_t j = size_t(dim) + 1; j < x.size(); ++j) inner *= x[j];
  const int64_t extent = x[size_t(dim)], run = extent / width;
  const int64_t vec = inner == 1 && run % 8 == 0 && run / 8 >= 32 ? 8 : 1, steps = run / vec;
  int64_t lanes = 1;
  while (lanes < 32 && lanes * 2 <= steps && elements(id) * lanes * 2 <= kBlockThreads * 4)
    lanes *= 2;
  // A few long outputs: `parts` warps share each output, each reducing a slice of its run, so
  // that the reduction does not fall to one or two warps while the others wait. Added into an
  // accumulator, the slices add atomically; otherwise they meet in the reduction scratch.
  const bool into = schedule_.tiles[size_t(id)].reduced_into;
  const int64_t groups = kBlockThreads / lanes;
  int64_t parts = 1;
  while (lanes == 32 && elements(id) * parts * 2 <= groups && lanes * parts * 2 <= steps)
    parts *= 2;
  const std::string out = tile_var(into ? schedule_.tiles[size_t(id)].reader : id);
  const std::string scale = mean ? fmt::format(" / {}.0f", run) : std::string();
  RunLoads loads;
  loads.indent = "        ";
  const std::string element =
      vec == 8
          ? read_run(n.inputs[0], fmt::format("(oo * {} + w * {} + r * 8)", extent, run), loads)
          : read(n.inputs[0], fmt::format("(oo * {} + w * {} + r) * {} + ii", extent, run, inner));
  return fmt::format(
      "  for (int o0 = 0; o0 < {outputs}; o0 += {per_pass}) {{\n"
      "    const int o = o0 + threadIdx.x / {lanes} / {parts}, part = threadIdx.x / {lanes} % "
      "{parts};\n"
      "    float acc = {init};\n"
      "    if (o < {outputs}) {{\n"
      "      const int oo = o / ({width} * {inner}), w = (o / {inner}) % {width}, ii = o % "
      "{inner};\n"
      "      for (int r = part * {lanes} + threadIdx.x % {lanes}; r < {steps}; r += {stride}) {{\n"
      "{loads}"
      "#pragma unroll\n"
      "        for (int u = 0; u < {vec}; ++u) {{\n"
      "          const float v = {x};\n"
      "          acc = {combine};\n"
      "        }}\n"
      "      }}\n"
      "    }}\n"
      "    for (int off = {lanes} / 2; off > 0; off >>= 1) {{\n"
      "      const float v = __shfl_xor_sync(0xffffffffu, acc, off);\n"
      "      acc = {combine};\n"
      "    }}\n"
      "{finish}"
      "  }}\n",
      fmt::arg("outputs", elements(id)), fmt::arg("per_pass", groups / parts),
      fmt::arg("lanes", lanes), fmt::arg("parts", parts), fmt::arg("stride", lanes * parts),
      fmt::arg("width", width), fmt::arg("inner", inner), fmt::arg("steps", steps),
      fmt::arg("vec", vec), fmt::arg("init", is_max ? "-INFINITY" : "0.0f"), fmt::arg("x", element),
      fmt::arg("loads", loads.code), fmt::arg("combine", is_max ? "fmaxf(acc, v)" : "acc + v"),
      fmt::arg("finish", reduce_finish(out, into, parts, groups / parts, elements(id), lanes,
                                       is_max, scale)));
}

// How reduce() stores each output once its groups have their values in `acc`.
std::string BlockLowering::reduce_finish(const std::string& out, bool into, int64_t parts,
                                         int64_t per_pass, int64_t outputs, int64_t lanes,
                                         bool is_max, const std::string& scale) const {
  if (parts == 1)
    return fmt::format("    if (o < {} && threadIdx.x % {} == 0) {}[o] {} acc{};\n", outputs, lanes,
                       out, into ? "+=" : "=", scale);
  if (into)
    return fmt::format("    if (o < {} && threadIdx.x % {} == 0) atomicAdd(&{}[o], acc{});\n",
                       outputs, lanes, out, scale);
  // The barriers keep the scratch clear of an earlier pass's block reduction and of the next
  // round's partials.
  return fmt::format(
      "    __syncthreads();\n"
      "    if (threadIdx.x % {lanes} == 0) red[threadIdx.x / {lanes}] = acc;\n"
      "    __syncthreads();\n"
      "    if (threadIdx.x < {per_pass} && o0 + threadIdx.x < {outputs}) {{\n"
      "      float r = red[threadIdx.x * {parts}];\n"
      "      for (int p = 1; p < {parts}; ++p) r = {combine};\n"
      "      {out}[o0 + threadIdx.x] = r{scale};\n"
      "    }}\n",
      fmt::arg("lanes", lanes), fmt::arg("per_pass", per_pass), fmt::arg("outputs", outputs),
      fmt::arg("parts", parts), fmt::arg("out", out), fmt::arg("scale", scale),
      fmt::arg("combine", is_max ? fmt::format("fmaxf(r, red[threadIdx.x * {} + p])", parts)
                                 : fmt::format("r + red[threadIdx.x * {} + p]", parts)));
}

// rms_norm / layer_norm of a tile over its trailing `normalized` dims: a warp per row.
std::string BlockLowering::norm(int32_t id, const Dims& normalized, double eps, bool layer,
                                bool has_weight, bool has_bias) const {
  const BlockNode& n = node(id);
  const int64_t len = ir::num_elements(normalized), rows = elements(id) / len;
  if (rows < kBlockWarps) return block_norm(id, len, rows, eps, layer, has_weight, has_bias);
  std::string s = fmt::format(
      "  for (int row = threadIdx.x / 32; row < {rows}; row += {warps}) {{\n"
      "    const int lane = threadIdx.x % 32, base = row * {len};\n"
      "    float mean = 0.0f;\n",
      fmt::arg("rows", rows), fmt::arg("warps", kBlockWarps), fmt::arg("len", len));
  if (layer)
    s += fmt::format(
        "    {{ float a = 0.0f; for (int r = lane; r < {0}; r += 32) a += {1};\n"
        "      mean = yr_warp_sum(a) / {0}.0f; }}\n",
        len, read(n.inputs[0], "base + r"));
  s += fmt::format(
      "    float a = 0.0f;\n"
      "    for (int r = lane; r < {0}; r += 32) {{ const float d = {1} - mean; a += d * d; }}\n"
      "    const float scale = 1.0f / sqrtf(yr_warp_sum(a) / {0}.0f + {2:.9e}f);\n"
      "    for (int r = lane; r < {0}; r += 32) {{\n"
      "      float y = ({1} - mean) * scale;\n",
      len, read(n.inputs[0], "base + r"), float(eps));
  if (has_weight) s += fmt::format("      y *= {};\n", read(n.inputs[1], "r"));
  if (has_bias) s += fmt::format("      y += {};\n", read(n.inputs[has_weight ? 2 : 1], "r"));
  s += fmt::format("      {}[base + r] = y;\n    }}\n  }}\n", tile_var(id));
  return s;
}

// The same for few rows: the whole block works on one row at a time.
std::string BlockLowering::block_norm(int32_t id, int64_t len, int64_t rows, double eps, bool layer,
                                      bool has_weight, bool has_bias) const {
  const BlockNode& n = node(id);
  const std::string x = read(n.inputs[0], "base + r");
  std::string s = fmt::format(
      "  for (int row = 0; row < {rows}; ++row) {{\n"
      "    const int base = row * {len};\n"
      "    float mean = 0.0f;\n",
      fmt::arg("rows", rows), fmt::arg("len", len));
  if (layer)
    s += fmt::format(
        "    {{ float a = 0.0f; for (int r = threadIdx.x; r < {0}; r += {1}) a += {2};\n"
        "      mean = yr_block_reduce(a, red, false) / {0}.0f; }}\n",
        len, kBlockThreads, x);
  s += fmt::format(
      "    float a = 0.0f;\n"
      "    for (int r = threadIdx.x; r < {0}; r += {1}) {{ const float d = {2} - mean; a += d * "
      "d; }}\n"
      "    const float scale = 1.0f / sqrtf(yr_block_reduce(a, red, false) / {0}.0f + "
      "{3:.9e}f);\n"
      "    for (int r = threadIdx.x; r < {0}; r += {1}) {{\n"
      "      float y = ({2} - mean) * scale;\n",
      len, kBlockThreads, x, float(eps));
  if (has_weight) s += fmt::format("      y *= {};\n", read(n.inputs[1], "r"));
  if (has_bias) s += fmt::format("      y += {};\n", read(n.inputs[has_weight ? 2 : 1], "r"));
  s += fmt::format("      {}[base + r] = y;\n    }}\n    __syncthreads();\n  }}\n", tile_var(id));
  return s;
}

std::string BlockLowering::concat(int32_t id, int dim) const {
  const BlockNode& n = node(id);
  const Dims& c = n.tile.dims;
  const Dims cs = ir::row_major_strides(c);
  std::string s = fmt::format(
      "  for (int e = threadIdx.x; e < {}; e += {}) {{\n"
      "    const int outer = e / {}, at = (e / {}) % {}, inner = e % {};\n",
      elements(id), kBlockThreads, cs[size_t(dim)] * c[size_t(dim)], cs[size_t(dim)],
      c[size_t(dim)], cs[size_t(dim)]);
  int64_t offset = 0;
  for (int32_t in : n.inputs) {
    const int64_t extent = node(in).tile.dims[size_t(dim)];
    s += fmt::format("    {}if (at < {}) {}[e] = {};\n", offset ? "else " : "", offset + extent,
                     tile_var(id),
                     read(in, fmt::format("(outer * {0} + at - {1}) * {2} + inner", extent, offset,
                                          cs[size_t(dim)])));
    offset += extent;
  }
  return s + "  }\n";
}

// The code of one compute op (neither iterator, accumulator nor saver).
std::string BlockLowering::op(int32_t id) const {
  const BlockNode& n = node(id);
  auto operand = [&](size_t i) {
    return read(n.inputs[i], broadcast_index(n.tile.dims, node(n.inputs[i]).tile.dims, "e"));
  };
  auto not_here = [&]() -> std::string {
    fail("cuda: fused node '{}': block op {} at node {} is not a compute op", name_,
         ir::block_op_label(n.op), id);
  };
  return std::visit(
      ir::Overloaded{
          [&](const ir::InputIteratorOp&) { return not_here(); },
          [&](const ir::AccumulatorOp&) { return not_here(); },
          [&](const ir::OutputSaverOp&) { return not_here(); },
          [&](const ir::MatmulOp&) { return matmul(id); },
          [&](const ir::UnaryOp& u) { return elementwise(id, unary_expr(u, operand(0))); },
          [&](const ir::BinaryOp& b) {
            return elementwise(id, binary_expr(b.fn, operand(0), operand(1)));
          },
          [&](const ir::ReduceOp& r) {
            return reduce(id, r.dim, 1, r.fn == ir::ReduceFn::max, r.fn == ir::ReduceFn::mean);
          },
          [&](const ir::ReduceToWidthOp& r) { return reduce(id, r.dim, r.width, false, false); },
          [&](const ir::RmsNormOp& r) {
            return norm(id, r.normalized_shape, r.eps, false, r.has_weight, false);
          },
          [&](const ir::LayerNormOp& l) {
            return norm(id, l.normalized_shape, l.eps, true, l.has_weight, l.has_bias);
          },
          [&](const ir::ConcatOp& c) { return concat(id, c.dim); },
      },
      n.op);
}

std::string BlockLowering::accumulate(int32_t id) const {
  const BlockNode& n = node(id);
  const auto& acc = std::get<ir::AccumulatorOp>(n.op);
  if (acc.fn == ir::AccumFn::rescaled_sum) {
    const int32_t m = n.inputs[1];
    const std::string mi = broadcast_index(n.tile.dims, node(m).tile.dims, "e");
    return fmt::format(
        "  for (int e = threadIdx.x; e < {0}; e += {1}) {{\n"
        "    const float mo = {2}_max[{3}], mv = {4}, mn = fmaxf(mo, mv);\n"
        "    {2}[e] = (mo == -INFINITY ? 0.0f : {2}[e] * expf(mo - mn)) + {5} * expf(mv - mn);\n"
        "  }}\n",
        elements(id), kBlockThreads, tile_var(id), mi, read(m, mi), read(n.inputs[0], "e"));
  }
  return elementwise(id, acc.fn == ir::AccumFn::max
                             ? fmt::format("fmaxf({}[e], {})", tile_var(id), read(n.inputs[0], "e"))
                             : fmt::format("{}[e] + {}", tile_var(id), read(n.inputs[0], "e")));
}

// The kernel's parameters: the operands in<k>, then the outputs out<k>.
std::string BlockLowering::kernel_params() const {
  std::string params;
  for (size_t i = 0; i < g_.operands().size(); ++i)
    params += fmt::format("{}const {}* __restrict__ in{}", i ? ", " : "",
                          ctype(g_.operands()[i].dtype), i);
  const std::vector<ir::TensorType> outputs = g_.output_types();
  for (size_t i = 0; i < outputs.size(); ++i)
    params += fmt::format(", {}* __restrict__ out{}", ctype(outputs[i].dtype), i);
  return params;
}

// The offset of this block's tile in output `output` of saver `id`: " + (long long)... " terms.
std::string BlockLowering::saver_base(int32_t id, int output) const {
  const BlockNode& n = node(id);
  const auto& saver = std::get<ir::OutputSaverOp>(n.op);
  const Dims strides = ir::row_major_strides(g_.output_types()[size_t(output)].dims);
  std::string base;
  for (int a = 0; a < ir::kGridAxes; ++a) {
    if (saver.omap[size_t(a)] == ir::kReplicate) continue;
    const size_t j = size_t(saver.omap[size_t(a)]);
    base += fmt::format(" + (long long){} * {}ll", block_index(a), n.tile.dims[j] * strides[j]);
  }
  return base;
}

std::string BlockLowering::save(int32_t id, int output) const {
  const BlockNode& n = node(id);
  const ir::TensorType out = g_.output_types()[size_t(output)];
  const Dims& tile = n.tile.dims;
  const Dims strides = ir::row_major_strides(out.dims);
  const std::string base = saver_base(id, output);
  const int64_t vec = 16 / int64_t(ir::dtype_size(out.dtype));
  const std::string t = ctype(out.dtype);
  if (tile.back() % vec == 0 && out.dims.back() % vec == 0) {
    // A stored f32 tile is read 16 bytes at a time: a thread's `vec` consecutive floats read one
    // by one put a warp's lanes `vec` banks apart (8-way conflicts for a 16-bit output).
    const int32_t in = n.inputs[0];
    const bool stored_floats = !std::holds_alternative<ir::InputIteratorOp>(node(in).op) &&
                               !schedule_.tiles[size_t(in)].inlined &&
                               schedule_.tiles[size_t(in)].storage.offset >= 0;
    const std::string gather =
        stored_floats ? fmt::format(
                            "    float f[{0}];\n"
                            "#pragma unroll\n"
                            "    for (int u = 0; u < {0}; u += 4)\n"
                            "      *reinterpret_cast<float4*>(f + u) = *reinterpret_cast<const "
                            "float4*>({1} + e + u);\n"
                            "#pragma unroll\n"
                            "    for (int u = 0; u < {0}; ++u) yr_store(v + u, f[u]);\n",
                            vec, tile_var(in))
                      : fmt::format(
                            "#pragma unroll\n"
                            "    for (int u = 0; u < {}; ++u) yr_store(v + u, {});\n",
                            vec, read(in, "e + u"));
    return fmt::format(
        "  for (int q = threadIdx.x; q < {0}; q += {1}) {{\n"
        "    const int e = q * {2};\n"
        "    __align__(16) {3} v[{2}];\n"
        "{4}"
        "    *reinterpret_cast<uint4*>(out{5} + (0ll{6} + {7})) = *reinterpret_cast<const "
        "uint4*>(v);\n"
        "  }}\n",
        elements(in) / vec, kBlockThreads, vec, t, gather, output, base,
        tile_offset(tile, strides, "e"));
  }
  return fmt::format(
      "  for (int e = threadIdx.x; e < {}; e += {}) yr_store(out{} + (0ll{} + {}), {});\n",
      elements(n.inputs[0]), kBlockThreads, output, base, tile_offset(tile, strides, "e"),
      read(n.inputs[0], "e"));
}

KernelLaunch lower_fused(const ir::BlockGraph& body, const std::string& name,
                         const std::vector<int>& input_slots, const std::vector<int>& output_slots,
                         const CodegenOptions& options, std::vector<ir::Dims> operand_strides) {
  return BlockLowering(body, name, options, std::move(operand_strides))
      .run(input_slots, output_slots);
}

BlockSchedule schedule_fused(const ir::BlockGraph& body, const CodegenOptions& options) {
  std::vector<Dims> strides;
  for (const ir::TensorType& operand : body.operands())
    strides.push_back(ir::row_major_strides(operand.dims));
  return BlockLowering(body, "scheduled", options, std::move(strides)).schedule();
}

}  // namespace yirage::backend::cuda::detail

namespace yirage::backend::cuda {

std::string reject_body(const ir::BlockGraph& body, const CodegenOptions& options) {
  try {
    const int64_t bytes = detail::schedule_fused(body, options).shared_bytes;
    if (bytes > options.max_shared_bytes)
      return fmt::format(
          "its tiles need {} bytes of shared memory, more than the {} a block may have", bytes,
          options.max_shared_bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace yirage::backend::cuda
