// A fused kernel's schedule: what the planning passes of BlockLowering decided about one block
// graph, before any code is emitted. Per tile (block-graph node): where its value lives (a
// shared-memory tile, registers, another op's tile, a stream) and which other nodes it is tied
// to; per kernel: the loop's pipeline stages, the TMA's tiles and streams, cluster pairs and the
// shared memory laid out for all of it. The passes fill it in order (readers, inlining, resident
// products, chains, streams, TMA tiles, then stages and storage); the emitters only read it.
// Internal to backend/cuda; block_lowering.h says what each placement means for the code.
#pragma once

#include <cstdint>
#include <vector>

namespace yirage::backend::cuda::detail {

// A TMA weight stream's stages, at most (the planner may lower a kernel's cap to fit its blocks).
inline constexpr int64_t kMaxTmaStages = 6;

// A tile's place in shared memory; offsets are bytes from the start of the block's dynamic
// shared memory, -1 where the tile has no such part.
struct TileStorage {
  int64_t offset = -1;      // -1: not stored (an inlined op, a resident matmul)
  int stages = 1;           // iterators walked by the loop: the kernel's pipeline stages
  int64_t max_offset = -1;  // rescaled_sum: its running max
  int64_t staged_a = -1;    // a tensor-core matmul whose A is staged: A's copy
  int64_t stream_stages = -1, stream_barriers = -1;  // a matmul whose B the TMA streams
};

// A register chain (codegen_block_chain.cpp): first = A·B [m x lc] with K = d, elementwise
// unary ops up to `last`, second = last · C [m x dv] accumulated over the loop, and `rowsum`
// (or -1) a sum or mean of `last` over its rows, added into its accumulator. Warp w takes the
// 16 rows (w % row_groups) and every `splits`-th 16-column step of the scores from w /
// row_groups.
struct Chain {
  int32_t first = -1, last = -1, second = -1, rowsum = -1;
  int64_t m = 0, d = 0, lc = 0, dv = 0, row_groups = 0, splits = 0;
  bool wgmma = false;  // its products by warpgroups (codegen_block_wgmma.cpp)
  // With no warps splitting the score columns, each element of the accumulators has one
  // writer: the flush stores it, into an accumulator never zeroed.
  bool writes_once() const { return splits == 1; }
};

// What a node's code is, decided from the flags below in one order of precedence (the first
// that applies): the kernel's emitter takes each node by its role.
enum class TileRole {
  streamed_weight,       // a weight tile its stream reads straight from memory: no code of its own
  staged_directly,       // an A iterator copied once, before the loop, into a stream's staged A
  iterator_tma,          // the TMA copies each iteration's tile into its stage
  iterator_once,         // replicated over the loop: loaded once before it
  iterator_pipelined,    // cp.async copies iterations ahead into its stages
  saver,                 // writes its input's tile into the output
  computed_elsewhere,    // inlined where its one reader reads it, or computed by a chain
  chain,                 // a register chain's second product: the chain's code
  reduced_into,          // a reduction added straight into its accumulator
  streamed_product,      // a product whose B streams
  resident_product,      // a product kept in registers over the loop
  resident_accumulator,  // the accumulator a resident product's registers flush into
  accumulator,           // folds its input's tiles in shared memory
  shared_op,             // an op on f32 tiles in shared memory, in the loop or after it
};

// What the planner decided for one node. A node none of whose flags is set, and that is not an
// output saver, has an f32 tile in shared memory (an iterator: its stages in its own dtype).
struct TileSchedule {
  int readers = 0;       // how many node inputs name this node
  int32_t reader = -1;   // the reader, where there is exactly one
  bool inlined = false;  // an elementwise op computed where its one reader reads it
  // A tensor-core matmul whose only reader is a sum accumulator: its partial products stay in
  // registers over the whole loop, written into the accumulator once after it.
  bool resident = false;
  bool reduced_into = false;     // a reduction added straight into its accumulator's tile
  bool streamed = false;         // a resident matmul whose B streams (registers, or the TMA)
  bool staged_directly = false;  // an A iterator copied straight into a stream's staged A
  int32_t resident_of = -1;      // an accumulator: its resident matmul
  int32_t stream_owner = -1;     // a streamed matmul: the one that stages its (shared) A
  int chain = -1;                // the register chain (BlockSchedule::chains) that computes it
  TileStorage storage;
  TileRole role = TileRole::shared_op;  // set last, from everything above
};

struct BlockSchedule {
  std::vector<TileSchedule> tiles;  // by block-graph node
  std::vector<Chain> chains;
  std::vector<int32_t> tma_order;            // the tiles the TMA copies; tensor map k is k-th's
  std::vector<int32_t> stream_tma_order;     // streamed matmuls whose B the TMA copies (maps last)
  int64_t stream_stage_cap = kMaxTmaStages;  // the most stages a TMA stream may take
  bool loop_free_room = false;  // the loop walks no tiles: its room goes to the TMA stages
  int stream_ranks = 1;         // 2: each block a cluster pair
  bool halved_staging = false;  // each block of a pair stages only its half of A's K
  int stages = 1;               // pipeline depth of the tiles the loop walks
  int64_t shared_bytes = 0;
  int64_t reduction_offset = 0;
  int64_t barrier_offset = -1;  // the stages' mbarriers, where the TMA copies tiles
  bool register_rows = false;   // a register-row chain: no tiles, no stages
};

}  // namespace yirage::backend::cuda::detail
