// Lowering one fused node: its block graph becomes one kernel, one thread block per grid block.
// Planning passes first fill its schedule (block_schedule.h: every tile's placement and role, the
// kernel's stages, streams and layout); emitters then read it: codegen_block_kernel.cpp the tile
// kernel, node by node by role, codegen_block_rows.cpp the register-row kernel.
// Internal to backend/cuda; codegen_block.cpp holds the planning and the elementwise,
// reduction and norm ops, codegen_block_copy.cpp the tiles' addresses, storage and copies,
// codegen_block_matmul.cpp the tile matmuls, codegen_block_vector.cpp the passes that stage a
// tile as 16-bit copies and the reads of eight consecutive elements at once they and the row
// reductions use.
//
// Shared memory holds the tiles: an iterator's tile in its operand's dtype (3 to 8 stages when
// the for-loop walks it, so that the next iterations stream in by cp.async, 16 bytes a copy,
// while one computes), every other stored tile in f32, each accumulator's running value (and a
// rescaled_sum's running max) in f32. Block ops run one after another with a barrier between
// them, each spreading its tile's elements over the block's 256 threads; one barrier opens each
// loop iteration and none closes it. Rewrites cut the passes and barriers, because the loop
// body's chain of them, not DRAM, bounded the skinny products of LLM decoding:
//   - an elementwise op with a single reader in its own phase is not stored: the reader computes
//     it from its operands where it reads it (for a matmul operand, only the cheap functions,
//     since a matmul reads each element once per column tile);
//   - a tensor-core matmul whose only reader is a sum accumulator keeps its partial products in
//     registers across the whole for-loop ("resident"), and writes the accumulator once after it;
//   - a reduction whose only reader is an adding accumulator adds into it directly;
//   - a chain S = A·B, E = f(S), O += E·C (attention's scores, exponentials and weighted values)
//     keeps S and E in registers: each warp's score fragments become the next product's A
//     fragments, and E's row sums, if a reduction reads them, stay in registers too.
// On sm_90a (CodegenOptions::wgmma), such a chain's products are warpgroup products that read
// their B tiles from shared memory, stored swizzled (codegen_block_wgmma.cpp).
// On sm_90 (CodegenOptions::tensor_maps), a weight tile the loop streams for tensor-core
// products is copied by the Tensor Memory Accelerator instead: one thread issues a few 2-D box
// copies per stage, which land 128-byte swizzled and complete on the stage's mbarrier
// (codegen_block_tma.cpp).
// A product of at most 16 rows whose B is such a weight tile skips shared memory altogether
// (CodegenOptions::register_weights): its warps load the tile into registers an iteration or two
// ahead and build the mma fragments from them, the product computed transposed
// (codegen_block_stream.cpp). On sm_90 such a kernel may run each block as a cluster of two,
// each streaming half of the weight (codegen_block_cluster.cpp).
// A block graph that is one row-wise chain of elementwise ops and norms over a single iteration
// keeps its tiles in registers instead, each thread the same elements of every tile
// (CodegenOptions::register_rows, codegen_block_rows.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/block_schedule.h"
#include "backend/cuda/codegen.h"
#include "ir/block_graph.h"

namespace yirage::backend::cuda::detail {

inline constexpr int kBlockThreads = 256;
inline constexpr int kBlockWarps = kBlockThreads / 32;
// A staged A operand's rows are padded by 8 16-bit elements (16 bytes), so the eight row
// addresses of one ldmatrix fall in different banks.
inline constexpr int64_t kStagedPad = 8;
// Columns of a 16-bit 128-byte swizzle panel: the span of the TMA's and wgmma's 128-byte swizzle.
inline constexpr int64_t kSwizzlePanel = 64;

// The flat offset, in a tensor of `strides`, of element `var` of a tile of `dims` (a C
// expression; codegen_block_copy.cpp).
std::string tile_offset(const ir::Dims& dims, const ir::Dims& strides, const std::string& var);

// The device functions of TMA copies, for kernels that make them (codegen_block_tma.cpp).
const std::string& tma_prelude();
// The device functions of a block pair's exchange (codegen_block_cluster.cpp).
const std::string& cluster_prelude();

// After a streamed product's warps wrote `splits` partial tiles of `mn` floats into `red`: the
// block's sum of them into `out` (codegen_block_stream.cpp).
std::string stream_sum_partials(const std::string& out, int64_t mn, int64_t splits);
// A lane's fragment of a staged A, read at `rows` as a `type`, or zeros past row m
// (codegen_block_stream.cpp).
std::string a_fragment(const std::string& type, const std::string& rows, int64_t m);
// The stores of one transposed mma fragment into a partial tile (codegen_block_stream.cpp).
std::string fragment_stores(const std::string& indent, int64_t m, int64_t n, int next);

class BlockLowering {
 public:
  // `operand_strides`: each operand's element strides, row-major unless it is a view into a larger
  // tensor (a split's part, codegen.h).
  BlockLowering(const ir::BlockGraph& g, const std::string& name, const CodegenOptions& options,
                std::vector<ir::Dims> operand_strides);
  // The planning passes alone: the schedule run() emits the kernel of (block_schedule.h).
  const BlockSchedule& schedule();
  KernelLaunch run(const std::vector<int>& in, const std::vector<int>& out);

 private:
  // How a tensor-core matmul spreads over the warps: 16x8 output tiles ("pairs") of the padded
  // [mp x n] product, each split `splits` ways along K; each warp takes `per_warp` work items.
  struct MmaPlan {
    int64_t m, n, k, mp, pairs, splits, per_warp, batches;
  };
  // A matmul whose B streams through registers (codegen_block_stream.cpp): B's tile is `groups`
  // column groups (8 x `vector` columns: a lane loads `vector` of them a row) by k / 16 steps,
  // `per_warp` (group, step) units a warp each iteration, `units` over the loop. A warp keeps
  // `sets` groups' accumulators of `halves` 8-row halves of A; `splits` warps share a group
  // (splitting its K steps). `depth` units of loads are in registers at once. A block of a
  // cluster pair streams `units` of the loop's 2 x `units`.
  struct StreamPlan {
    int64_t m = 0, n = 0, k = 0, halves = 0, vector = 0, groups = 0, per_warp = 0, sets = 0,
            splits = 0, units = 0, depth = 0;
  };
  // A streamed B copied by the TMA (codegen_block_stream_tma.cpp): `chunks` chunks of `chunk`
  // rows, `stages` of them in shared memory at once, 128-byte swizzled in 64-column panels where
  // the width allows (`swizzled`); `tiles` 16-column tiles, of which a warp meets `sets` (those
  // equal to it modulo `lanes`), each shared by `splits` warps; `steps` 16x16 units a warp per
  // chunk.
  struct TmaStreamPlan {
    int64_t chunk = 0, chunks = 0, stages = 0, tiles = 0, lanes = 0, sets = 0, splits = 0,
            steps = 0;
    bool swizzled = true;
  };
  // codegen_block.cpp
  const ir::BlockNode& node(int32_t id) const { return g_.nodes()[size_t(id)]; }
  int pipeline_stages() const { return schedule_.stages; }
  void plan_loop();
  void allocate_storage();
  int64_t pipelined_bytes() const;
  int64_t elements(int32_t id) const;
  int64_t allocate(int64_t bytes, int64_t alignment = 16);
  void analyse_readers();
  void plan();
  std::string tile_var(int32_t id) const;
  std::string read(int32_t id, const std::string& index) const;
  std::string elementwise(int32_t id, const std::string& expr) const;
  std::string reduce(int32_t id, int dim, int64_t width, bool is_max, bool mean) const;
  std::string reduce_finish(const std::string& out, bool into, int64_t parts, int64_t per_pass,
                            int64_t outputs, int64_t lanes, bool is_max,
                            const std::string& scale) const;
  std::string norm(int32_t id, const ir::Dims& normalized, double eps, bool layer, bool has_weight,
                   bool has_bias) const;
  std::string block_norm(int32_t id, int64_t len, int64_t rows, double eps, bool layer,
                         bool has_weight, bool has_bias) const;
  std::string concat(int32_t id, int dim) const;
  // codegen_block_vector.cpp: runs of eight consecutive elements, a 16-bit tile's by one load,
  // and the staging passes built on them.
  struct RunLoads {
    std::string indent = "    ";
    std::string code;                                        // the loads, one statement a line
    std::vector<std::pair<std::string, std::string>> names;  // (tile@offset, variable)
  };
  bool loads_runs(int32_t id) const;
  std::string run_load(int32_t id, const std::string& base, RunLoads& loads) const;
  std::string read_run(int32_t id, const std::string& base, RunLoads& loads) const;
  std::string bits_run(int32_t id, const std::string& base, const std::string& t,
                       RunLoads& loads) const;
  std::string stage_pass(int32_t a, const std::string& t, const std::string& decls,
                         const std::string& dst) const;
  std::string op(int32_t id) const;
  std::string accumulate(int32_t id) const;
  std::string kernel_params() const;
  std::string saver_base(int32_t id, int output) const;
  std::string save(int32_t id, int output) const;
  // The pieces of a tile kernel's text, gathered node by node (emit_node) and then assembled in
  // order by kernel().
  struct KernelParts {
    std::string decl, init, once, first, next, stage, body, accumulate, streams, flush, finalize,
        post, saves, stream_first;
    std::vector<std::string> more_first;  // the prologue's loads for iterations 1 .. stages - 2
    std::vector<int32_t> rescaled;        // rescaled_sum accumulators: their maxima move last
    int savers = 0;
  };
  TileRole role(int32_t id) const;
  void emit_node(int32_t id, KernelParts& k) const;
  void emit_iterator(int32_t id, KernelParts& k) const;
  void emit_staged_a(int32_t id, KernelParts& k) const;
  void emit_f32_tile(int32_t id, KernelParts& k) const;
  void emit_resident_accumulator(int32_t id, KernelParts& k) const;
  void emit_accumulator(int32_t id, KernelParts& k) const;
  std::string kernel(const std::string& kname) const;

  // codegen_block_copy.cpp
  int64_t row_pad(int32_t id) const;
  int64_t stored_elements(int32_t id) const;
  std::string stored_index(int32_t id, const std::string& index) const;
  std::string tile_source(int32_t id, const std::string& iteration, const std::string& e) const;
  const ir::Dims& operand_strides(int64_t operand) const {
    return operand_strides_[size_t(operand)];
  }
  bool vector_rows(int32_t id) const;
  std::string vector_copies(int32_t id, const std::string& iteration,
                            const std::string& dst_of_e) const;
  std::string load(int32_t id, const std::string& iteration, const std::string& dst) const;
  std::string load_staged(int32_t id) const;

  // codegen_block_matmul.cpp
  bool tensor_core(int32_t id) const;
  bool can_be_resident(int32_t id) const;
  MmaPlan mma_plan(int32_t id) const;
  std::string bits(int32_t id, const std::string& index, const std::string& t) const;
  int resident_chains(int32_t id) const;
  std::string ks_loop(const MmaPlan& p, const std::string& chain_acc) const;
  std::string mma_matmul(int32_t id) const;
  std::string mma_declare_resident(int32_t id) const;
  std::string mma_write_back(const MmaPlan& p, const std::string& out) const;
  bool a_staged(int32_t id) const;
  int64_t staged_a_elements(int32_t id) const;
  std::string mma_stage_a(int32_t id) const;
  std::string mma_flush_resident(int32_t id) const;
  std::string matmul(int32_t id) const;

  // codegen_block_tma.cpp
  void find_tma_tiles();
  bool tma_eligible(int32_t id) const;
  bool tma_tile(int32_t id) const;
  bool uses_tma() const { return !schedule_.tma_order.empty(); }  // the for-loop's tiles
  bool any_tma() const { return uses_tma() || !schedule_.stream_tma_order.empty(); }
  std::string tma_offset(int32_t id, const std::string& row, const std::string& col) const;
  std::string tma_coordinate(int32_t id, size_t dim, const std::string& iteration) const;
  std::string tma_issue(const std::string& iteration, const std::string& slot) const;
  TensorMapArg operand_map(int32_t id, std::array<uint32_t, 2> box, bool swizzle) const;
  std::vector<TensorMapArg> tensor_map_args() const;

  // codegen_block_stream.cpp
  bool streams_b(int32_t id) const;
  bool register_streamable(int32_t id) const;
  StreamPlan stream_plan(int32_t id) const;
  void find_streamed();
  bool streamed_tile(int32_t id) const;
  void find_staged_directly();
  bool staged_directly(int32_t id) const { return schedule_.tiles[size_t(id)].staged_directly; }
  int64_t staged_bytes(int64_t m, int64_t k) const;
  int64_t staged_budget() const;
  int64_t staged_iterations() const { return schedule_.halved_staging ? r_ / 2 : r_; }
  int64_t staged_stride(int64_t k) const { return staged_iterations() * k + kStagedPad; }
  std::string staged_first_iteration() const;
  void find_streamed_with_halved_staging();
  int64_t stream_staged_elements(int32_t id) const;
  std::string stream_load(int32_t id, const std::string& unit, const std::string& slot) const;
  std::string stream_declare(int32_t id) const;
  std::string stream_first(int32_t id) const;
  std::string register_stream_declare(int32_t id) const;
  std::string stream_stage(int32_t id) const;
  std::string stream_run(int32_t id) const;
  std::string stream_flush(int32_t id) const;

  // codegen_block_cluster.cpp
  bool pairable(int32_t id) const;
  void choose_stream_ranks();
  bool paired() const { return schedule_.stream_ranks > 1; }
  std::string block_index(int axis) const;
  std::string pair_offset(int64_t per_block) const;
  std::string stream_first_unit(int32_t id) const;
  std::string pair_sum() const;

  // codegen_block_stream_tma.cpp
  bool streams_by_tma(int32_t id, int64_t streams) const;
  bool stream_by_tma_together(const std::vector<int32_t>& ids) const;
  int64_t stream_tma_index(int32_t id) const;
  bool stream_tma(int32_t id) const {
    return std::find(schedule_.stream_tma_order.begin(), schedule_.stream_tma_order.end(), id) !=
           schedule_.stream_tma_order.end();
  }
  // `streams`: how many TMA streams share the stages' room; by default the kernel's.
  TmaStreamPlan tma_stream_plan(int32_t id, int64_t streams) const;
  TmaStreamPlan tma_stream_plan(int32_t id) const {
    return tma_stream_plan(id, std::max<int64_t>(1, int64_t(schedule_.stream_tma_order.size())));
  }
  std::string tma_stream_issue(int32_t id, const std::string& chunk, const std::string& slot) const;
  std::string tma_stream_declare(int32_t id) const;
  std::string tma_stream_first(int32_t id) const;
  std::string tma_stream_run(int32_t id) const;
  std::string tma_stream_chunk(int32_t id) const;
  std::string tma_stream_flush(int32_t id) const;
  TensorMapArg tma_stream_map(int32_t id) const;

  // codegen_block_rows.cpp
  bool register_rows() const;
  const ir::Dims& rows_dims() const;
  bool rows_row_value(int32_t id) const;
  bool rows_reduced_iterator(int32_t id) const;
  bool rows_reduction_fits(int32_t id) const;
  std::string rows_reduce(int32_t id) const;
  std::string rows_operand(int32_t id, int32_t in) const;
  int64_t rows_lanes() const;
  int64_t rows_per_thread() const;
  std::string rows_vectors(const std::string& each) const;
  std::string rows_load(int32_t id) const;
  std::string rows_elementwise(int32_t id, const std::string& expr) const;
  std::string rows_norm(int32_t id, double eps, bool layer, bool has_weight, bool has_bias) const;
  std::string rows_save(int32_t id, int output) const;
  std::string rows_kernel(const std::string& kname) const;

  // codegen_block_chain.cpp
  void find_chains();
  const Chain* chain_of(int32_t id) const;
  bool absorbed_by_chain(int32_t id) const;
  // Whether `id` is a chain's row sum whose accumulator the chain's flush writes whole, once.
  bool written_once_by_chain(int32_t id) const;
  std::string chain_declare(const Chain& c) const;
  std::string chain_exponentials(const Chain& c, const std::string& lo, const std::string& hi,
                                 const std::string& out) const;
  std::string chain_body(const Chain& c) const;
  std::string chain_flush(const Chain& c) const;

  // codegen_block_wgmma.cpp
  bool wgmma_chain(const Chain& c) const;
  bool uses_wgmma() const;
  bool wgmma_tile(int32_t id) const;
  // Stored 128-byte swizzled in 64-column panels: the TMA's tiles and wgmma's.
  bool swizzled(int32_t id) const { return tma_tile(id) || wgmma_tile(id); }
  std::string wgmma_prelude() const;
  std::string wgmma_chain_body(const Chain& c) const;

  const ir::BlockGraph& g_;
  std::vector<ir::Dims>
      operand_strides_;  // every operand's element strides (row-major or a view's)
  std::string name_;
  CodegenOptions options_;
  int64_t r_;
  BlockSchedule schedule_;  // what the planning passes decided (block_schedule.h)
  bool planned_ = false;
};

// The schedule lower_fused() emits the kernel of for `body`, its operands row-major: for tests
// and reports that ask what the lowering decided rather than reading its code.
BlockSchedule schedule_fused(const ir::BlockGraph& body, const CodegenOptions& options);

}  // namespace yirage::backend::cuda::detail
