// The block graph: the inside of one fused kernel, after Mirage's µGraph model.
//
// A fused kernel runs a grid of up to three axes of independent blocks. Each block runs a
// for-loop of `forloop_range` iterations. Per iteration, *input iterators* load one tile of each
// kernel operand, *in-loop ops* compute on tiles, and *accumulators* fold the iterations
// together. After the loop, *post-loop ops* compute on the accumulated tiles and *output savers*
// write the block's tile of each kernel output.
//
// Tiles. An iterator's imap says, for each grid axis, which operand dim that axis partitions
// (or kReplicate: every block along the axis sees the whole dim). Its fmap says which dim the
// for-loop walks (or kReplicate: every iteration sees the same tile). A dim of extent E
// partitioned by an axis of g blocks gives each block E/g; walked by a loop of R iterations, each
// iteration sees E/(g·R). Extents must divide exactly. A saver's omap says, for each grid axis,
// which output dim the blocks along that axis are laid out on; the output's extent there is the
// tile's times the axis size. Every grid axis of size > 1 must appear in every saver's omap, so
// no two blocks write the same elements.
//
// A tile's type carries the dtype of the operands it derives from, which is the dtype of the
// outputs its savers write; the values are computed in f32 (see tile_bytes()) and rounded once,
// by the saver.
//
// Validity (validate()): every path from an iterator to a saver crosses exactly one iterator,
// one accumulator and one saver; in-loop ops read only iterator or in-loop tiles, post-loop ops
// only accumulator or post-loop tiles; every tile of the loop body and after it fits the
// device's limits.
//
// Accumulators fold the per-iteration tiles t_0 .. t_{R-1} of one in-loop tensor:
//   sum   Σ t_i                   mean  (Σ t_i) / R
//   rms   sqrt((Σ t_i) / R + eps) (t_i are typically chunk means of x², so this is rms(x) with
//         rms_norm's eps; eps is 0 unless set, and only rms has one)
//   max   elementwise max of t_i
//   rescaled_sum  two operands (v_i, m_i), m_i broadcasting to v_i:
//         Σ exp(m_i - M) · v_i with M = max_i m_i — the online-softmax rescale: with
//         m_i the chunk's row max, v_i = exp(s_i - m_i)·V_i and l_i = rowsum(exp(s_i - m_i)),
//         rescaled_sum(v, m) / rescaled_sum(l, m) is softmax(s)·V.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/kernel_graph.h"

namespace yirage::ir {

inline constexpr int kReplicate = -1;
inline constexpr int kGridAxes = 3;  // x, y, z

using AxisMap = std::array<int, kGridAxes>;  // per grid axis: a tensor dim or kReplicate

struct GridDims {
  std::array<int64_t, kGridAxes> extent{1, 1, 1};
  int64_t blocks() const { return extent[0] * extent[1] * extent[2]; }
  friend bool operator==(const GridDims&, const GridDims&) = default;
};

// Loads, per block and iteration, one tile of the fused node's operand `operand`.
struct InputIteratorOp {
  int operand;
  AxisMap imap{kReplicate, kReplicate, kReplicate};
  int fmap = kReplicate;
};

// How the tile an iterator yields moves through its operand: block b along grid axis a starts
// b · block[a] elements further along dim imap[a] (the block's chunk of that dim: one tile, or
// the loop's tiles where the loop walks the same dim), and iteration i starts i · loop elements
// further along dim fmap. The reference executor, the verifier and every code generator place
// tiles by this one rule, so that none of them can drift from the others.
struct IteratorSteps {
  std::array<int64_t, kGridAxes> block{};  // 0 where the axis replicates
  int64_t loop = 0;                        // 0 where the loop does not walk the operand
};
inline IteratorSteps iterator_steps(const InputIteratorOp& it, const Dims& tile,
                                    int64_t forloop_range) {
  IteratorSteps steps;
  for (int a = 0; a < kGridAxes; ++a) {
    const int d = it.imap[size_t(a)];
    if (d != kReplicate)
      steps.block[size_t(a)] = tile[size_t(d)] * (it.fmap == d ? forloop_range : 1);
  }
  if (it.fmap != kReplicate) steps.loop = tile[size_t(it.fmap)];
  return steps;
}

// Reduces `dim` of extent E to `width` (width divides E) by summing each run of E/width
// consecutive elements; width 1 is a plain sum with keepdim. Like the kernel-level axes, `dim`
// may count from the end when added and is stored as 0..rank-1.
struct ReduceToWidthOp {
  int dim;
  int64_t width;
};

enum class AccumFn : uint8_t { sum, mean, rms, max, rescaled_sum };

struct AccumulatorOp {
  AccumFn fn;
  double eps = 0.0;  // rms only
};

// Writes the block's tile of one fused-node output; outputs are numbered by saver order.
struct OutputSaverOp {
  AxisMap omap{kReplicate, kReplicate, kReplicate};
};

// Block-level ops reuse the kernel-level attribute structs where the meaning is the same,
// applied to tiles.
using BlockOp =
    std::variant<InputIteratorOp, MatmulOp, UnaryOp, BinaryOp, ReduceOp, ReduceToWidthOp, RmsNormOp,
                 LayerNormOp, ConcatOp, AccumulatorOp, OutputSaverOp>;

// "iterator", "reduce_to_width", "accum", "save", or the kernel-level op_name of a shared op.
std::string_view block_op_name(const BlockOp& op);
std::string_view accum_name(AccumFn fn);
// block_op_name, with an accumulator's function: "accum rescaled_sum". Errors and DOT use it.
std::string block_op_label(const BlockOp& op);

// The kernel-level op a shared block op applies to tiles; nullopt for the block-only ops.
std::optional<Op> shared_kernel_op(const BlockOp& op);
// The block op for a kernel-level op that may run on tiles; nullopt for the others.
std::optional<BlockOp> shared_block_op(const Op& op);

// Weights a backend reads from memory straight into a product of few rows instead of holding
// them as a tile (the cuda backend's streamed weights, codegen_block_stream.cpp). Such a tile is
// not counted in the tile limits; the product's A is held instead, for every iteration at once,
// in 16 bits. BlockGraph::streams() states which tiles qualify. max_rows 0: none stream.
struct StreamedWeights {
  int64_t max_rows = 0;                // rows of the product at most
  int64_t k_multiple = 1;              // the tile's K (rows) a multiple of this
  std::vector<int64_t> column_widths;  // the tile's N (columns) one of these
  int64_t max_staged_bytes = 0;        // A's held copies together, every iteration's
  int64_t max_blocks = 0;              // grids of at most this many blocks (0: any)
};

// Tiles a backend's lowering keeps out of the block's memory, so that the limits do not count
// them: each is a rule of the cuda lowering (backend/cuda/block_lowering.h) stated on the block
// graph. BlockGraph::in_registers() says which nodes qualify.
struct RegisterTiles {
  // An elementwise op whose one reader runs in its phase: the reader computes it where it reads it.
  bool single_use_elementwise = false;
  // An in-loop matmul or sum/mean reduction whose one reader is a sum, mean or rms accumulator:
  // its partial tile stays in registers and folds into the accumulator.
  bool summed_into_accumulator = false;
};

// What a backend allows a block to hold; the search reads these from the device description.
struct BlockLimits {
  int64_t max_tile_bytes_in_loop = 0;  // all in-loop tiles of one iteration together
  int64_t max_tile_bytes_total = 0;    // in-loop tiles plus accumulators and post-loop tiles
  int64_t max_grid_blocks = 0;
  StreamedWeights streamed;
  // Buffers the backend keeps of each tile the loop walks, so that the next iterations' loads
  // are in flight while one computes (at most the loop's range of them): the total counts every
  // buffer. 1: the tile is loaded where it is used.
  int64_t pipeline_stages = 1;
  RegisterTiles in_registers;
};

// The buffers kept of each walked tile of a loop of `range` iterations, at `pipeline_stages`
// (BlockLimits): never more than the loop has iterations, never fewer than one.
inline int64_t pipeline_buffers(int64_t pipeline_stages, int64_t range) {
  return std::max<int64_t>(std::min(pipeline_stages, range), 1);
}

struct BlockNode {
  BlockOp op;
  std::vector<int32_t> inputs;  // block node ids
  TensorType tile;              // for a saver: the tile it writes
};

// Where a block node runs: in the loop body, after it, or as a saver.
enum class BlockPhase : uint8_t { in_loop, post_loop, saver };

// Nodes are kept in insertion order, which is topological. Builders check operands and infer
// tile types as nodes are added, throwing yirage::Error with a one-line message that names the
// block op, its operand tiles and the rule broken; validate() checks the whole-graph rules.
class BlockGraph {
 public:
  // `operands` are the types of the fused node's kernel-level operands.
  BlockGraph(GridDims grid, int64_t forloop_range, std::vector<TensorType> operands);

  int32_t add(BlockOp op, std::vector<int32_t> inputs);
  int32_t iterator(int operand, AxisMap imap, int fmap);
  int32_t accumulate(AccumFn fn, int32_t x, double eps = 0.0);
  int32_t rescaled_sum(int32_t v, int32_t m);
  int32_t save(int32_t x, AxisMap omap);

  const GridDims& grid() const { return grid_; }
  int64_t forloop_range() const { return forloop_range_; }
  const std::vector<TensorType>& operands() const { return operands_; }
  const std::vector<BlockNode>& nodes() const { return nodes_; }
  BlockPhase phase(int32_t node) const { return phases_.at(size_t(node)); }
  // Kernel-level types of the fused node's outputs, one per saver in insertion order.
  std::vector<TensorType> output_types() const;

  // Throws yirage::Error naming the first broken rule (see the header comment). Beyond the
  // path rule it rejects a graph without savers, an operand no iterator loads and a tile no node
  // reads. A limit of 0 means unlimited.
  void validate(const BlockLimits& limits) const;

  // What the memory limits count. Tiles are computed in f32, so every tile takes 4 bytes per
  // element, except an iterator's, which holds operand data at the operand's element size, and a
  // saver's, which is its operand's tile. A rescaled_sum also keeps its running max.
  int64_t tile_bytes(int32_t node) const;
  // The in-loop tiles of one iteration, and every tile, less the tiles that stream under
  // `streamed` (with `pending`, as streams() counts them in a graph still being built).
  int64_t in_loop_bytes(const StreamedWeights& streamed = {}, bool pending = false) const;
  int64_t total_bytes(const StreamedWeights& streamed = {}, bool pending = false) const;

  // Whether iterator `node`'s tile streams under `s`: a 2-D tile of a 16-bit 2-D operand that the
  // loop walks along its first dim, of s's K multiple and column widths, in a grid of at most
  // s.max_blocks, read by one node only, an in-loop matmul of at most s.max_rows rows that takes
  // it as B, whose A for every iteration fits s.max_staged_bytes, and whose result one sum
  // accumulator alone reads. `pending`: a graph still being built, in which a tile nothing reads
  // yet, or a matmul nothing reads yet, may still become that.
  bool streams(int32_t node, const StreamedWeights& s, bool pending = false) const;
  // What the streamed tiles' products hold instead: each one's A, rows x K x range, in 16 bits,
  // once for products that share it.
  int64_t staged_bytes(const StreamedWeights& s, bool pending = false) const;

  // The first of `limits`' tile limits the graph breaks (the loop body's tiles, the streamed
  // products' staged A, all tiles with that A and every pipeline buffer of the walked tiles),
  // with its bytes and the limit; kind none when it
  // breaks none. validate() reports it; the search prunes by it while a graph is being built
  // (`pending`, as streams() takes it). The grid limit is validate()'s alone.
  struct TileOverrun {
    enum class Kind { none, in_loop, staged, total } kind = Kind::none;
    int64_t bytes = 0, limit = 0;
  };
  TileOverrun tile_overrun(const BlockLimits& limits, bool pending = false) const;
  // Whether node `id`'s tile is kept out of the block's memory under `r` (RegisterTiles); an
  // unread node (in a graph still being built) is not.
  bool in_registers(int32_t id, const RegisterTiles& r) const;

 private:
  int64_t staged_a_bytes(const BlockNode& matmul) const;
  // in_registers() for every node, in one pass over the readers.
  std::vector<bool> register_nodes(const RegisterTiles& r) const;
  // streams() for every node, in one pass over the readers.
  std::vector<bool> streamed_nodes(const StreamedWeights& s, bool pending) const;
  int64_t staged_bytes(const std::vector<bool>& streamed) const;
  TensorType infer_tile(BlockOp& op, const std::vector<TensorType>& tiles) const;
  TensorType iterator_tile(const InputIteratorOp& it, size_t operand_count) const;
  BlockPhase infer_phase(const BlockOp& op, const std::vector<int32_t>& inputs,
                         const std::vector<TensorType>& tiles) const;
  void check_structure() const;

  GridDims grid_;
  int64_t forloop_range_;
  std::vector<TensorType> operands_;
  std::vector<BlockNode> nodes_;
  std::vector<BlockPhase> phases_;
};

// JSON form (block_json.cpp), also the "body" of a fused kernel-graph node:
//   {"grid": [x, y, z], "forloop_range": R, "operands": [{"dtype", "shape"}, ...],
//    "nodes": [{"op": "iterator", "operand": 0, "imap": [1, -1, -1], "fmap": 0, ...}, ...]}
nlohmann::json to_json(const BlockGraph& graph);
// Throws yirage::Error naming the JSON path of the problem below `path`, e.g.
// `$.nodes[2].body.nodes[3].imap[1]: ...`.
BlockGraph block_graph_from_json(const nlohmann::json& doc, const std::string& path = "$");

// Graphviz DOT text (block_dot.cpp): the loop body as a cluster inside the block's cluster.
std::string to_dot(const BlockGraph& graph);

}  // namespace yirage::ir
