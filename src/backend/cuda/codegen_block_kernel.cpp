// The tile kernel's emitter (block_lowering.h): each node's code by its role in the schedule
// (block_schedule.h), then the kernel's frame around the pieces: declarations, the prologue's
// copies, the for-loop with its stages, the flushes and the epilogue.
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen_util.h"

namespace yirage::backend::cuda::detail {

using ir::BlockNode;

TileRole BlockLowering::role(int32_t id) const {
  const BlockNode& n = node(id);
  const TileSchedule& t = schedule_.tiles[size_t(id)];
  if (streamed_tile(id)) return TileRole::streamed_weight;
  if (staged_directly(id)) return TileRole::staged_directly;
  if (const auto* it = std::get_if<ir::InputIteratorOp>(&n.op)) {
    if (tma_tile(id)) return TileRole::iterator_tma;
    return it->fmap == ir::kReplicate ? TileRole::iterator_once : TileRole::iterator_pipelined;
  }
  if (std::holds_alternative<ir::OutputSaverOp>(n.op)) return TileRole::saver;
  if (t.inlined || absorbed_by_chain(id)) return TileRole::computed_elsewhere;
  if (chain_of(id)) return TileRole::chain;
  if (t.reduced_into) return TileRole::reduced_into;
  if (t.streamed) return TileRole::streamed_product;
  if (t.resident) return TileRole::resident_product;
  if (t.resident_of >= 0) return TileRole::resident_accumulator;
  if (std::holds_alternative<ir::AccumulatorOp>(n.op)) return TileRole::accumulator;
  return TileRole::shared_op;
}

// An iterator's tile: its stages' declaration, the copies into them (before the loop for the
// first iterations, in it for those `ahead`), and its pointer to this iteration's stage.
void BlockLowering::emit_iterator(int32_t id, KernelParts& k) const {
  const auto& it = std::get<ir::InputIteratorOp>(node(id).op);
  const TileStorage& s = schedule_.tiles[size_t(id)].storage;
  const std::string t = ctype(g_.operands()[size_t(it.operand)].dtype);
  k.decl += fmt::format("  {0}* const {1}_base = reinterpret_cast<{0}*>(smem + {2});\n", t,
                        tile_var(id), s.offset);
  switch (schedule_.tiles[size_t(id)].role) {
    case TileRole::iterator_tma:  // tma_issue() copies it
      k.stage += fmt::format("    const {0}* const {1} = {1}_base + (it % {2}) * {3};\n", t,
                             tile_var(id), s.stages, stored_elements(id));
      return;
    case TileRole::iterator_once:
      k.once += load(id, "0", tile_var(id) + "_base");
      k.stage += fmt::format("    const {0}* const {1} = {1}_base;\n", t, tile_var(id));
      return;
    default: break;
  }
  const int stages = s.stages, ahead = stages - 1;
  const int64_t n_el = stored_elements(id);
  auto copy = [&](const std::string& iteration, const std::string& slot) {
    return load(id, iteration, fmt::format("({}_base + ({}) * {})", tile_var(id), slot, n_el));
  };
  k.first += copy("0", "0");
  for (int p = 1; p < ahead; ++p)
    k.more_first[size_t(p)] += copy(std::to_string(p), std::to_string(p));
  if (ahead > 0)
    k.next += copy(fmt::format("it + {}", ahead), fmt::format("(it + {}) % {}", ahead, stages));
  k.stage += fmt::format("    const {0}* const {1} = {1}_base + (it % {2}) * {3};\n", t,
                         tile_var(id), stages, n_el);
}

// A staged A copy of a tensor-core product, zeroed once: the padding rows stay zero, the staging
// pass rewrites the others.
void BlockLowering::emit_staged_a(int32_t id, KernelParts& k) const {
  const int64_t staged = schedule_.tiles[size_t(id)].storage.staged_a;
  if (staged < 0) return;
  k.decl += fmt::format(
      "  unsigned short* const sa{} = reinterpret_cast<unsigned short*>(smem + {});\n", id, staged);
  k.init += fmt::format("  for (int e = threadIdx.x; e < {}; e += {}) sa{}[e] = 0;\n",
                        staged_a_elements(id), kBlockThreads, id);
}

void BlockLowering::emit_f32_tile(int32_t id, KernelParts& k) const {
  k.decl += fmt::format("  float* const {} = reinterpret_cast<float*>(smem + {});\n", tile_var(id),
                        schedule_.tiles[size_t(id)].storage.offset);
}

// The accumulator a resident product (or a chain, or a stream) flushes its registers into after
// the loop; zeroed first unless the flush writes every element once.
void BlockLowering::emit_resident_accumulator(int32_t id, KernelParts& k) const {
  emit_f32_tile(id, k);
  const int32_t mm = schedule_.tiles[size_t(id)].resident_of;
  const Chain* c = chain_of(mm);
  if (c && !c->writes_once())
    k.init += fmt::format("  for (int e = threadIdx.x; e < {}; e += {}) {}[e] = 0.0f;\n",
                          elements(id), kBlockThreads, tile_var(id));
  k.flush += c                                      ? chain_flush(*c)
             : schedule_.tiles[size_t(mm)].streamed ? stream_flush(mm)
                                                    : mma_flush_resident(mm);
}

// An accumulator in shared memory: its start value, its fold each iteration, and for a mean or an
// rms its finish after the loop.
void BlockLowering::emit_accumulator(int32_t id, KernelParts& k) const {
  emit_f32_tile(id, k);
  const BlockNode& n = node(id);
  const auto& acc = std::get<ir::AccumulatorOp>(n.op);
  const bool is_max = acc.fn == ir::AccumFn::max;
  if (!written_once_by_chain(n.inputs[0]))
    k.init += fmt::format("  for (int e = threadIdx.x; e < {}; e += {}) {}[e] = {};\n",
                          elements(id), kBlockThreads, tile_var(id), is_max ? "-INFINITY" : "0.0f");
  if (acc.fn == ir::AccumFn::rescaled_sum) {
    k.decl += fmt::format("  float* const {}_max = reinterpret_cast<float*>(smem + {});\n",
                          tile_var(id), schedule_.tiles[size_t(id)].storage.max_offset);
    k.init += fmt::format("  for (int e = threadIdx.x; e < {}; e += {}) {}_max[e] = -INFINITY;\n",
                          elements(n.inputs[1]), kBlockThreads, tile_var(id));
    k.rescaled.push_back(id);
  }
  if (!schedule_.tiles[size_t(n.inputs[0])].reduced_into) k.accumulate += accumulate(id);
  if (acc.fn == ir::AccumFn::mean)
    k.finalize += elementwise(id, fmt::format("{}[e] / {}.0f", tile_var(id), r_));
  if (acc.fn == ir::AccumFn::rms)
    k.finalize += elementwise(
        id, fmt::format("sqrtf({}[e] / {}.0f + {:.9e}f)", tile_var(id), r_, float(acc.eps)));
}

// Each node's code by its role (role() states their precedence).
void BlockLowering::emit_node(int32_t id, KernelParts& k) const {
  switch (schedule_.tiles[size_t(id)].role) {
    case TileRole::streamed_weight:     // stream_declare() and stream_run() load it
    case TileRole::computed_elsewhere:  // where it is read, or by its chain
      return;
    case TileRole::staged_directly: k.first += load_staged(id); return;
    case TileRole::iterator_tma:
    case TileRole::iterator_once:
    case TileRole::iterator_pipelined: emit_iterator(id, k); return;
    case TileRole::saver: k.saves += save(id, k.savers++); return;
    case TileRole::chain: {
      const Chain& c = *chain_of(id);
      k.decl += chain_declare(c);
      k.body += chain_body(c);
      return;
    }
    // Nothing in the loop reads a reduction added into its accumulator: no barrier after it.
    case TileRole::reduced_into: k.body += op(id); return;
    case TileRole::streamed_product:
      k.decl += stream_declare(id);
      k.stream_first += stream_first(id);
      k.body += stream_stage(id);
      k.streams += stream_run(id);
      return;
    case TileRole::resident_product:
      emit_staged_a(id, k);
      k.decl += mma_declare_resident(id);
      k.body += mma_matmul(id);
      return;
    case TileRole::resident_accumulator: emit_resident_accumulator(id, k); return;
    case TileRole::accumulator: emit_accumulator(id, k); return;
    case TileRole::shared_op: {
      emit_staged_a(id, k);
      emit_f32_tile(id, k);
      std::string& target = g_.phase(id) == ir::BlockPhase::in_loop ? k.body : k.post;
      target += op(id) + "  __syncthreads();\n";
      return;
    }
  }
}

std::string BlockLowering::kernel(const std::string& kname) const {
  std::string params = kernel_params();
  KernelParts k;
  k.more_first.resize(size_t(pipeline_stages()));
  for (int32_t id = 0; id < int32_t(g_.nodes().size()); ++id) emit_node(id, k);
  // The running maxima move only after every rescaled_sum has used the old ones.
  std::string max_update;
  for (int32_t id : k.rescaled) {
    const int32_t m = node(id).inputs[1];
    max_update += fmt::format(
        "  for (int e = threadIdx.x; e < {0}; e += {1}) {2}_max[e] = fmaxf({2}_max[e], {3});\n",
        elements(m), kBlockThreads, tile_var(id), read(m, "e"));
  }
  if (!max_update.empty()) max_update = "  __syncthreads();\n" + max_update;
  const int ahead = pipeline_stages() - 1;
  std::string wait_tma;
  if (uses_tma()) {
    for (size_t m = 0; m < schedule_.tma_order.size(); ++m)
      params += fmt::format(", const __grid_constant__ YrTensorMap tm{}", m);
    k.decl += fmt::format(
        "  unsigned long long* const bar = reinterpret_cast<unsigned long long*>(smem + {});\n",
        schedule_.barrier_offset);
    // The swizzle is the hardware's on address bits: a misaligned buffer would scramble tiles.
    k.init = fmt::format(
                 "  if (threadIdx.x == 0) {{\n"
                 "    if (yr_smem_address(smem) % 1024 != 0) __trap();\n"
                 "    for (int s = 0; s < {}; ++s) yr_mbar_init(bar + s, 1);\n"
                 "    yr_mbar_init_fence();\n"
                 "  }}\n"
                 "  __syncthreads();\n",
                 pipeline_stages()) +
             k.init;
    k.first += tma_issue("0", "0");
    for (int p = 1; p < ahead; ++p)
      k.more_first[size_t(p)] += tma_issue(std::to_string(p), std::to_string(p));
    if (ahead > 0)
      k.next += tma_issue(fmt::format("it + {}", ahead),
                          fmt::format("(it + {}) % {}", ahead, pipeline_stages()));
    wait_tma =
        fmt::format("    yr_mbar_wait(bar + it % {0}, (it / {0}) & 1);\n", pipeline_stages());
  }
  if (uses_wgmma()) {
    // wgmma reads the swizzled tiles through the async proxy: each thread's cp.async copies,
    // once landed, are fenced into it before the barrier that lets the warpgroups read them.
    wait_tma += "    yr_fence_proxy_async();\n";
    if (!uses_tma())
      k.init = "  if (threadIdx.x == 0 && yr_smem_address(smem) % 1024 != 0) __trap();\n" + k.init;
  }
  // The TMA streams' maps come after the for-loop's (tensor_map_args()).
  for (size_t m = 0; m < schedule_.stream_tma_order.size(); ++m)
    params +=
        fmt::format(", const __grid_constant__ YrTensorMap tm{}", schedule_.tma_order.size() + m);
  std::string prologue = k.first + "  yr_cp_commit();\n";
  for (int p = 1; p < ahead; ++p) prologue += k.more_first[size_t(p)] + "  yr_cp_commit();\n";
  if (ahead > 0) k.next = fmt::format("    if (it + {} < {}) {{\n{}    }}\n", ahead, r_, k.next);
  // One barrier opens each iteration: the tiles of iteration `it` have landed for every thread,
  // and every thread is done with iteration it - 1, whose stage the loads for it + ahead then
  // reuse, as are the reads of the staged A copies and accumulators the body rewrites. So the
  // body ends with no barrier of its own, and a resident matmul's mma loop needs none.
  return fmt::format(
      R"(
extern "C" __global__ void {cluster}__launch_bounds__({threads}) {name}({params}) {{
  yr_wait_prior_grids();
  extern __shared__ __align__({align}) unsigned char smem[];
  float* const red = reinterpret_cast<float*>(smem + {red});
{decl}{init}{once}{prologue}{stream_first}  for (int it = 0; it < {range}; ++it) {{
    asm volatile("cp.async.wait_group {pending};" ::: "memory");
{wait_tma}    __syncthreads();
{next}    yr_cp_commit();
{stage}{body}{accumulate}{max_update}  }}
  __syncthreads();
{streams}{flush}{pair}{finalize}  __syncthreads();
{post}{saves}}}
)",
      fmt::arg("cluster", paired() ? "__cluster_dims__(2, 1, 1) " : ""),
      fmt::arg("pair", pair_sum()), fmt::arg("threads", kBlockThreads), fmt::arg("name", kname),
      fmt::arg("params", params), fmt::arg("align", any_tma() || uses_wgmma() ? 1024 : 16),
      fmt::arg("wait_tma", wait_tma), fmt::arg("red", schedule_.reduction_offset),
      fmt::arg("decl", k.decl), fmt::arg("init", k.init), fmt::arg("once", k.once),
      fmt::arg("prologue", prologue), fmt::arg("stream_first", k.stream_first),
      fmt::arg("range", r_), fmt::arg("next", k.next), fmt::arg("pending", std::max(ahead - 1, 0)),
      fmt::arg("stage", k.stage), fmt::arg("body", k.body), fmt::arg("accumulate", k.accumulate),
      fmt::arg("max_update", max_update), fmt::arg("streams", k.streams),
      fmt::arg("flush", k.flush), fmt::arg("finalize", k.finalize), fmt::arg("post", k.post),
      fmt::arg("saves", k.saves));
}

}  // namespace yirage::backend::cuda::detail
