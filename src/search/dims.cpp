// Fusion groups and the block configurations their dims allow.
//
// Dim correspondence: every dim of every tensor of the group is a member of a union-find class
// ("a dim variable"); an op joins the dims its semantics ties together (a matmul's M with the
// output's M, its K of both operands, the dims an elementwise op or a norm keeps). A variable is
// *contracted* when a matmul or a reduction sums over it, and *whole* when a norm or softmax
// needs all of it at once. Grid axes may split a variable that every output has and that is
// neither contracted nor whole (no block then needs another block's data); the for-loop may walk
// a contracted variable (the accumulators finish the sum), or none. A grid axis over the walked
// contracted variable is not a configuration here: split_reduced.cpp derives it from the block
// graphs found with the loop, as a kernel of partials and a finishing kernel. Extents (grid blocks
// along a variable, or loop iterations) divide the variable and are limited by capabilities.search:
// grid blocks, loop-body tile bytes and total tile bytes. They are split_extents(): the powers of
// two; the extents whose tile width is a power of two no narrower than a granule of 16 elements (or
// the variable's own factor of two when smaller), so that a dim with an odd factor still splits
// into aligned tiles (6144 = 96 tiles of 64); and, for the grid, the divisor with aligned tiles
// that fills the device's waves of parallel units best. That is at most about 2·log2(extent) + 1
// options per variable whatever the extent's factors: an odd dim gets 1, itself and its wave fit.
// The tile limits still bound the loop from below, except for a weight tile that the backend
// streams into a product of few rows instead of holding it (capabilities.search.streamed_weights,
// ir::StreamedWeights): such a tile is left out of the limits (its traffic still counts in the
// load model), and the product's A, held for every iteration, counts against the staged limit.
//
// To keep the block-level enumeration within budget, each loop choice keeps the configurations
// that a load model ranks best: (bytes loaded by all blocks and iterations) / (bandwidth times
// the fraction of parallel units busy), plus a per-iteration overhead; the final ranking uses
// the full cost model of cost/cost_model.h. A grid of fewer blocks than parallel units loads at the
// fraction of the bandwidth it keeps busy, so on the H200's 132 multiprocessors 96 blocks rank
// below 128 or 192 (which is what the H200 measured at 8 iterations: n48_k512 beat n64_k512).
#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "search/internal.h"
#include "support/error.h"

namespace yirage::search {
namespace {

constexpr double kIterationSeconds = 1e-7;  // loop overhead per block iteration, load model only

bool fusable(const ir::Op& op) {
  // A library matmul is a call of the backend's BLAS, which cannot share a kernel.
  if (ir::is_library_matmul(op)) return false;
  return std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::UnaryOp>(op) ||
         std::holds_alternative<ir::BinaryOp>(op) || std::holds_alternative<ir::ReduceOp>(op) ||
         std::holds_alternative<ir::RmsNormOp>(op) || std::holds_alternative<ir::LayerNormOp>(op) ||
         std::holds_alternative<ir::SoftmaxOp>(op);
}

std::string tensor_name(const ir::KernelGraph& graph, ir::TensorRef t) {
  const ir::Node& node = graph.node(t.node);
  return node.outputs.size() == 1 ? node.name : fmt::format("{}_{}", node.name, t.port);
}

class DimVars {
 public:
  explicit DimVars(const ir::KernelGraph& g) : graph_(g) {
    for (const ir::Node& node : g.nodes()) {
      offsets_.emplace_back();
      for (const ir::TensorType& t : node.outputs) {
        offsets_.back().push_back(int(parent_.size()));
        for (int64_t e : t.dims) {
          parent_.push_back(int(parent_.size()));
          extent_.push_back(e);
        }
      }
    }
    contracted_.assign(parent_.size(), false);
    whole_.assign(parent_.size(), false);
    for (size_t id = 0; id < g.nodes().size(); ++id) relate(int32_t(id));
    for (size_t i = 0; i < parent_.size(); ++i) {
      if (contracted_[i]) contracted_[size_t(find(int(i)))] = true;
      if (whole_[i]) whole_[size_t(find(int(i)))] = true;
    }
  }

  int var(ir::TensorRef t, int dim) { return find(offsets_[size_t(t.node)][size_t(t.port)] + dim); }
  int64_t extent(int v) const { return extent_[size_t(v)]; }
  bool contracted(int v) const { return contracted_[size_t(v)]; }
  bool whole(int v) const { return whole_[size_t(v)]; }

 private:
  int find(int x) {
    while (parent_[size_t(x)] != x) x = parent_[size_t(x)] = parent_[size_t(parent_[size_t(x)])];
    return x;
  }
  int at(ir::TensorRef t, int dim) const { return offsets_[size_t(t.node)][size_t(t.port)] + dim; }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent_[size_t(std::max(a, b))] = std::min(a, b);
  }
  int rank(ir::TensorRef t) const { return int(graph_.type(t).dims.size()); }
  int64_t dim_of(ir::TensorRef t, int d) const { return graph_.type(t).dims[size_t(d)]; }

  // Joins the dims of `a` and `b` aligned from the right where their extents agree.
  void align(ir::TensorRef a, ir::TensorRef b, int skip_a = 0, int skip_b = 0) {
    int i = rank(a) - 1 - skip_a, j = rank(b) - 1 - skip_b;
    for (; i >= 0 && j >= 0; --i, --j)
      if (dim_of(a, i) == dim_of(b, j) && dim_of(a, i) > 1) unite(at(a, i), at(b, j));
  }

  void relate(int32_t id) {
    const ir::Node& node = graph_.node(id);
    const ir::TensorRef out{id, 0};
    std::visit(ir::Overloaded{
                   [&](const ir::MatmulOp&) {
                     const ir::TensorRef a = node.inputs[0], b = node.inputs[1];
                     const int ra = rank(a), rb = rank(b), ro = rank(out);
                     unite(at(a, ra - 2), at(out, ro - 2));
                     unite(at(b, rb - 1), at(out, ro - 1));
                     unite(at(a, ra - 1), at(b, rb - 2));
                     contracted_[size_t(at(a, ra - 1))] = true;
                     align(a, out, 2, 2);
                     align(b, out, 2, 2);
                   },
                   [&](const ir::ReduceOp& r) {
                     const ir::TensorRef x = node.inputs[0];
                     contracted_[size_t(at(x, r.dim))] = true;
                     for (int d = 0; d < rank(x); ++d)
                       if (d != r.dim && r.keepdim) unite(at(x, d), at(out, d));
                   },
                   [&](const ir::RmsNormOp& n) { norm(node, out, n.normalized_shape.size()); },
                   [&](const ir::LayerNormOp& n) { norm(node, out, n.normalized_shape.size()); },
                   [&](const ir::SoftmaxOp& s) {
                     align(node.inputs[0], out);
                     whole_[size_t(at(out, s.dim))] = true;
                   },
                   [&](const ir::ReshapeOp&) {
                     // Only a reshape that adds or drops dims of extent 1 relates dims.
                     std::vector<int> a, b;
                     for (int d = 0; d < rank(node.inputs[0]); ++d)
                       if (dim_of(node.inputs[0], d) > 1) a.push_back(at(node.inputs[0], d));
                     for (int d = 0; d < rank(out); ++d)
                       if (dim_of(out, d) > 1) b.push_back(at(out, d));
                     if (a.size() == b.size())
                       for (size_t i = 0; i < a.size(); ++i)
                         if (extent_[size_t(a[i])] == extent_[size_t(b[i])]) unite(a[i], b[i]);
                   },
                   [&](const ir::InputOp&) {},
                   [&](const auto&) {
                     for (const ir::TensorRef& in : node.inputs) align(in, out);
                   },
               },
               node.op);
  }

  void norm(const ir::Node& node, ir::TensorRef out, size_t normalized) {
    const ir::TensorRef x = node.inputs[0];
    align(x, out);
    for (size_t i = 1; i < node.inputs.size(); ++i) align(node.inputs[i], x);
    for (size_t k = 0; k < normalized; ++k) whole_[size_t(at(x, rank(x) - 1 - int(k)))] = true;
  }

  const ir::KernelGraph& graph_;
  std::vector<std::vector<int>> offsets_;
  std::vector<int> parent_;
  std::vector<int64_t> extent_;
  std::vector<bool> contracted_, whole_;
};

// Tiles stay a multiple of this many elements where the extent allows: whole vector lanes and
// memory transactions (16 f16 elements are 32 bytes, a DRAM sector).
constexpr int64_t kGranule = 16;

// A wider granule for divisor extents: 128 elements, 256 bytes of f16, two DRAM bursts.
constexpr int64_t kWideGranule = 128;

// The granule of `extent`: kGranule, or its own largest power-of-two factor when that is smaller.
int64_t granule_of(int64_t extent) {
  int64_t g = 1;
  while (g < kGranule && extent % (2 * g) == 0) g *= 2;
  return g;
}

// Of the extents d dividing `extent` (d <= limit) whose tiles extent/d are a multiple of the
// granule, the one whose blocks fill their waves of `units` best: the most busy units on
// average, the fewer blocks on a tie. Divisors come in pairs, so this is O(sqrt(extent)).
int64_t best_wave_fit(int64_t extent, int64_t limit, int64_t units) {
  const int64_t granule = granule_of(extent);
  int64_t best = 1;
  double best_fill = 0;
  auto consider = [&](int64_t d) {
    if (d > limit || (extent / d) % granule != 0) return;
    const int64_t slots = (d + units - 1) / units * units;
    const double fill = double(d) / double(slots);
    if (fill > best_fill || (fill == best_fill && d < best)) best = d, best_fill = fill;
  };
  for (int64_t i = 1; i * i <= extent; ++i)
    if (extent % i == 0) {
      consider(i);
      consider(extent / i);
    }
  return best;
}

}  // namespace

std::vector<int64_t> split_extents(int64_t extent, int64_t limit, int64_t units) {
  std::vector<int64_t> out;
  if (extent < 1 || limit < 1) return out;
  auto add = [&](int64_t d) {
    if (d <= limit && extent % d == 0) out.push_back(d);
  };
  for (int64_t p = 1; p <= extent; p *= 2) add(p);
  for (int64_t tile = granule_of(extent); tile <= extent; tile *= 2)
    if (extent % tile == 0) add(extent / tile);
  // Tiles of whole wide granules: where the odd part of a dim has more than one factor (32000 =
  // 2^8 · 5^3), the divisors between its powers of two (50 blocks of 640 columns) are extents
  // that neither rule above reaches. A dim whose odd part is 1 or prime gains none.
  if (extent % kWideGranule == 0)
    for (int64_t d = 1; d * d <= extent / kWideGranule; ++d)
      if ((extent / kWideGranule) % d == 0) {
        add(d);
        add(extent / kWideGranule / d);
      }
  if (units > 1) add(best_wave_fit(extent, limit, units));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool has_rank1_operand(const ir::KernelGraph& graph, uint64_t mask) {
  for (size_t id = 0; id < graph.nodes().size(); ++id) {
    if (!(mask >> id & 1)) continue;
    for (const ir::TensorRef& in : graph.node(int32_t(id)).inputs)
      if (!(mask >> in.node & 1) && graph.type(in).dims.size() == 1) return true;
  }
  return false;
}

std::optional<Group> make_group(const ir::KernelGraph& graph, uint64_t mask, bool columns,
                                std::string& why) {
  Group group;
  group.mask = mask;
  for (size_t id = 0; id < graph.nodes().size() && id < 64; ++id)
    if (mask >> id & 1) group.nodes.push_back(int32_t(id));
  for (int32_t id : group.nodes) {
    const ir::Node& node = graph.node(id);
    if (!fusable(node.op)) {
      why = fmt::format("op {}{} ('{}') cannot run inside a fused kernel",
                        ir::is_library_matmul(node.op) ? "library " : "", ir::op_name(node.op),
                        node.name);
      return std::nullopt;
    }
    for (const ir::TensorRef& in : node.inputs)
      if (!(mask >> in.node & 1) &&
          std::find(group.operands.begin(), group.operands.end(), in) == group.operands.end())
        group.operands.push_back(in);
  }
  for (int32_t id : group.nodes)
    for (int32_t port = 0; port < int32_t(graph.node(id).outputs.size()); ++port) {
      const ir::TensorRef t{id, port};
      bool used_outside = false;
      for (const ir::GraphOutput& o : graph.outputs()) used_outside |= o.tensor == t;
      for (size_t other = 0; other < graph.nodes().size(); ++other)
        if (!(mask >> other & 1))
          for (const ir::TensorRef& in : graph.node(int32_t(other)).inputs) used_outside |= in == t;
      if (used_outside) group.outputs.push_back(t);
    }

  std::map<ir::TensorRef, ir::TensorRef> mapped;
  for (const ir::TensorRef& operand : group.operands) {
    const ir::TensorType& type = graph.type(operand);
    const bool column = columns && type.dims.size() == 1;
    group.column.push_back(column);
    const std::string name = tensor_name(graph, operand);
    if (!column) {
      mapped[operand] = group.target.input(name, type.dims, type.dtype);
      continue;
    }
    ir::TensorRef in = group.target.input(name, {type.dims[0], 1}, type.dtype);
    // The group's own nodes keep their names below, so the reshape takes one that none of the
    // original graph's nodes has; the builder's default "t<n>" could collide with them.
    std::string reshape_name = name + ".column";
    while (graph.find(reshape_name) >= 0) reshape_name += "'";
    mapped[operand] =
        group.target.add_node(ir::ReshapeOp{type.dims}, {in}, std::move(reshape_name)).at(0);
  }
  for (int32_t id : group.nodes) {
    const ir::Node& node = graph.node(id);
    std::vector<ir::TensorRef> inputs;
    for (const ir::TensorRef& in : node.inputs) inputs.push_back(mapped.at(in));
    std::vector<ir::TensorRef> outs = group.target.add_node(node.op, inputs, node.name);
    for (size_t port = 0; port < outs.size(); ++port) mapped[{id, int32_t(port)}] = outs[port];
  }
  for (const ir::TensorRef& out : group.outputs)
    group.target.mark_output(mapped.at(out), tensor_name(graph, out));
  return group;
}

std::string BlockConfig::describe() const {
  std::vector<std::string> its;
  for (const ir::InputIteratorOp& it : iterators)
    its.push_back(fmt::format("{}:{}/{}", it.operand, fmt::join(it.imap, ","), it.fmap));
  return fmt::format("grid [{}] range {} iterators {}", fmt::join(grid.extent, ", "), range,
                     fmt::join(its, " "));
}

std::vector<BlockConfig> block_configs(const ir::KernelGraph& target, const SearchSpace& space,
                                       size_t per_loop_choice) {
  DimVars vars(target);
  const std::vector<ir::TensorRef> inputs = target.inputs();
  auto dims_vars = [&](ir::TensorRef t) {
    std::vector<int> v;
    for (int d = 0; d < int(target.type(t).dims.size()); ++d) v.push_back(vars.var(t, d));
    return v;
  };
  std::vector<std::vector<int>> operand_vars, output_vars;
  for (const ir::TensorRef& in : inputs) operand_vars.push_back(dims_vars(in));
  for (const ir::GraphOutput& out : target.outputs()) output_vars.push_back(dims_vars(out.tensor));

  // Grid variables: in every output, neither contracted nor whole; in output 0's dim order.
  std::vector<int> grid_vars;
  for (int v : output_vars.at(0)) {
    bool everywhere = true;
    for (const auto& o : output_vars) everywhere &= std::count(o.begin(), o.end(), v) > 0;
    if (everywhere && vars.extent(v) > 1 && !vars.contracted(v) && !vars.whole(v) &&
        std::count(grid_vars.begin(), grid_vars.end(), v) == 0 && grid_vars.size() < 3)
      grid_vars.push_back(v);
  }
  std::vector<int> loop_vars = {-1};
  for (const auto& op_vars : operand_vars)
    for (int v : op_vars)
      if (vars.contracted(v) && vars.extent(v) > 1 &&
          std::count(loop_vars.begin(), loop_vars.end(), v) == 0)
        loop_vars.push_back(v);

  auto dim_with = [](const std::vector<int>& vs, int v) {
    auto it = std::find(vs.begin(), vs.end(), v);
    return it == vs.end() ? ir::kReplicate : int(it - vs.begin());
  };

  // The A, and its bytes, that a product streaming input `in` holds (ir::StreamedWeights, as
  // BlockGraph::streams() decides for the block graph), or 0 bytes when `in` cannot stream: a
  // 16-bit 2-D weight walked along its first dim that one matmul alone reads, as B, with few rows.
  struct StreamedA {
    ir::TensorRef a;
    int64_t bytes = 0;
  };
  auto streamed_a = [&](ir::TensorRef in, int fmap, const ir::Dims& tile, const ir::GridDims& grid,
                        const std::vector<std::pair<int, int>>& axis_var) -> StreamedA {
    const ir::StreamedWeights& sw = space.streamed;
    const ir::TensorType& type = target.type(in);
    if (sw.max_rows <= 0 || fmap != 0 || type.dims.size() != 2 ||
        (type.dtype != ir::DType::f16 && type.dtype != ir::DType::bf16) ||
        (sw.max_blocks > 0 && grid.blocks() > sw.max_blocks) || tile[0] % sw.k_multiple != 0 ||
        std::count(sw.column_widths.begin(), sw.column_widths.end(), tile[1]) == 0)
      return {};
    const ir::Node* product = nullptr;
    for (const ir::Node& node : target.nodes())
      for (const ir::TensorRef& t : node.inputs)
        if (t == in) {
          if (product) return {};
          product = &node;
        }
    if (!product || !std::holds_alternative<ir::MatmulOp>(product->op) ||
        product->inputs.size() != 2 || product->inputs[1] != in || product->inputs[0] == in)
      return {};
    const ir::Dims& a = target.type(product->inputs[0]).dims;
    if (a.size() != 2) return {};
    int64_t rows = a[0];
    for (auto [axis, v] : axis_var)
      if (v == vars.var(product->inputs[0], 0)) rows /= grid.extent[size_t(axis)];
    if (rows > sw.max_rows) return {};
    return {product->inputs[0], rows * a[1] * 2};
  };

  // The nodes whose tiles the lowering keeps out of the block's memory (ir::RegisterTiles), as
  // the group's graph shows them: an elementwise op that one op of the group reads, and a
  // product or sum whose share of the walked dim folds into its accumulator from registers.
  const size_t count = target.nodes().size();
  std::vector<int> readers(count, 0);
  for (const ir::Node& node : target.nodes())
    for (const ir::TensorRef& t : node.inputs) ++readers[size_t(t.node)];
  for (const ir::GraphOutput& out : target.outputs()) ++readers[size_t(out.tensor.node)];
  std::vector<bool> in_registers(count, false), summed_in_registers(count, false);
  for (size_t id = 0; id < count; ++id) {
    const ir::Op& op = target.nodes()[id].op;
    in_registers[id] =
        space.in_registers.single_use_elementwise && readers[id] == 1 &&
        (std::holds_alternative<ir::UnaryOp>(op) || std::holds_alternative<ir::BinaryOp>(op));
    const auto* reduce = std::get_if<ir::ReduceOp>(&op);
    summed_in_registers[id] =
        space.in_registers.summed_into_accumulator &&
        (std::holds_alternative<ir::MatmulOp>(op) ||
         (reduce && (reduce->fn == ir::ReduceFn::sum || reduce->fn == ir::ReduceFn::mean)));
  }

  std::vector<BlockConfig> all;
  for (int loop : loop_vars) {
    struct Scored {
      double score;
      std::string key;
      BlockConfig config;
    };
    std::vector<Scored> scored;
    std::vector<int64_t> ranges = {1};
    if (loop >= 0) {
      // A loop of one iteration over the whole dim differs from the no-loop choice only where a
      // product in the loop streams its weight (ir::StreamedWeights); it is kept for that alone.
      ranges = split_extents(vars.extent(loop), vars.extent(loop), 0);
    }
    std::vector<std::vector<int64_t>> options;
    for (int v : grid_vars)
      options.push_back(split_extents(vars.extent(v), space.max_grid_blocks, space.parallel_units));
    std::vector<size_t> pick(grid_vars.size(), 0);
    while (true) {
      for (int64_t range : ranges) {
        BlockConfig c;
        c.range = range;
        int axis = 0;
        std::vector<std::pair<int, int>> axis_var;  // (axis, var)
        for (size_t i = 0; i < grid_vars.size(); ++i)
          if (options[i][pick[i]] > 1) {
            c.grid.extent[size_t(axis)] = options[i][pick[i]];
            axis_var.push_back({axis++, grid_vars[i]});
          }
        if (space.max_grid_blocks > 0 && c.grid.blocks() > space.max_grid_blocks) continue;
        int64_t in_loop = 0, streamed_bytes = 0, staged = 0, walked_bytes = 0;
        std::vector<ir::TensorRef> staged_as;
        for (size_t i = 0; i < inputs.size(); ++i) {
          ir::InputIteratorOp it{int(i),
                                 {ir::kReplicate, ir::kReplicate, ir::kReplicate},
                                 loop >= 0 ? dim_with(operand_vars[i], loop) : ir::kReplicate};
          ir::Dims tile = target.type(inputs[i]).dims;
          for (auto [a, v] : axis_var) {
            it.imap[size_t(a)] = dim_with(operand_vars[i], v);
            if (it.imap[size_t(a)] != ir::kReplicate)
              tile[size_t(it.imap[size_t(a)])] /= c.grid.extent[size_t(a)];
          }
          if (it.fmap != ir::kReplicate) tile[size_t(it.fmap)] /= range;
          const int64_t bytes =
              ir::num_elements(tile) * int64_t(ir::dtype_size(target.type(inputs[i]).dtype));
          in_loop += bytes;
          // Products that share A share its staged copy; a weight whose product's A would
          // overflow the staged copies is held instead.
          const StreamedA a = streamed_a(inputs[i], it.fmap, tile, c.grid, axis_var);
          const bool shared = std::count(staged_as.begin(), staged_as.end(), a.a) > 0;
          if (a.bytes > 0 && (shared || staged + a.bytes <= space.streamed.max_staged_bytes)) {
            streamed_bytes += bytes;
            if (!shared) {
              staged += a.bytes;
              staged_as.push_back(a.a);
            }
          } else if (it.fmap != ir::kReplicate) {
            walked_bytes += bytes;
          }
          c.iterators.push_back(it);
        }
        if (range == 1 && loop >= 0 && streamed_bytes == 0) continue;
        int64_t out_bytes = 0;
        for (const auto& ov : output_vars) {
          ir::AxisMap omap{ir::kReplicate, ir::kReplicate, ir::kReplicate};
          for (auto [a, v] : axis_var) omap[size_t(a)] = dim_with(ov, v);
          c.omaps.push_back(omap);
          int64_t elements = 1;
          for (int v : ov) elements *= vars.extent(v);
          out_bytes += elements / c.grid.blocks() * 4;
        }
        // The ops' tiles need room too: estimate them from the group's own tensors, split like
        // their dims (in the loop when they carry the walked dim; a sum over it is one tile in
        // the loop, its share of the sum, and one after it, the accumulator). A softmax is two
        // tiles in a block, x - max(x) and its exp (block_search.cpp builds its safe form).
        auto carries_loop = [&](ir::TensorRef t) {
          const std::vector<int> tv = dims_vars(t);
          return loop >= 0 && std::count(tv.begin(), tv.end(), loop) > 0;
        };
        int64_t loop_tiles = 0, other_tiles = 0;
        for (size_t id = 0; id < target.nodes().size(); ++id) {
          const ir::Node& node = target.nodes()[id];
          if (std::holds_alternative<ir::InputOp>(node.op) || in_registers[id]) continue;
          const bool softmax = std::holds_alternative<ir::SoftmaxOp>(node.op);
          const int64_t tiles = softmax && !space.in_registers.single_use_elementwise ? 2 : 1;
          const bool sums_walked =
              std::any_of(node.inputs.begin(), node.inputs.end(), carries_loop);
          const std::vector<int> tv = dims_vars({int32_t(id), 0});
          int64_t elements = 1;
          bool walked = false;
          for (int v : tv) {
            int64_t e = vars.extent(v);
            for (auto [a, gv] : axis_var)
              if (gv == v) e /= c.grid.extent[size_t(a)];
            if (v == loop) {
              e /= range;
              walked = true;
            }
            elements *= std::max<int64_t>(e, 1);
          }
          (walked ? loop_tiles : other_tiles) += tiles * elements * 4;
          if (!walked && sums_walked && !summed_in_registers[id]) loop_tiles += elements * 4;
        }
        const int64_t held = in_loop - streamed_bytes;
        // The walked tiles' other pipeline buffers (ir::BlockLimits::pipeline_stages).
        const int64_t buffers =
            (ir::pipeline_buffers(space.pipeline_stages, range) - 1) * walked_bytes;
        if (space.max_tile_bytes_in_loop > 0 && held + loop_tiles > space.max_tile_bytes_in_loop)
          continue;
        if (space.max_tile_bytes_total > 0 &&
            held + buffers + staged + loop_tiles + other_tiles + out_bytes >
                space.max_tile_bytes_total)
          continue;
        const double busy =
            double(std::min(c.grid.blocks(), space.parallel_units)) / double(space.parallel_units);
        const double waves =
            double((c.grid.blocks() + space.parallel_units - 1) / space.parallel_units);
        const double score = double(in_loop) * double(c.grid.blocks() * range) /
                                 (space.rates.dram_bytes_per_second * busy) +
                             waves * double(range) * kIterationSeconds;
        scored.push_back({score, c.describe(), std::move(c)});
      }
      size_t i = 0;
      while (i < pick.size() && ++pick[i] == options[i].size()) pick[i++] = 0;
      if (i == pick.size()) break;
    }
    std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
      return std::tie(a.score, a.key) < std::tie(b.score, b.key);
    });
    // The best loops of one iteration come on top of the others' quota rather than in it: their
    // few iterations score well, but they are the streaming exception, not the rule.
    size_t kept = 0, kept_single = 0;
    for (Scored& s : scored) {
      size_t& quota = loop >= 0 && s.config.range == 1 ? kept_single : kept;
      if (quota < per_loop_choice) {
        all.push_back(std::move(s.config));
        ++quota;
      }
    }
  }
  return all;
}

}  // namespace yirage::search
