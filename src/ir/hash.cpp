// Structural hash of a kernel graph: the key of the tuning cache.
//
// Merkle style: a node's hash covers its op, attributes and result types and the hashes (and
// ports) of its operands in order, so it depends on the computation below it and on nothing
// else: not on names, not on node ids. An input has no operands; it is identified by its type
// and its canonical index, the order in which a depth-first walk from the outputs (in order,
// operands in order) first reaches it. The graph hash then covers the outputs in order and the
// multiset of inputs that no output reads, so that an extra unused input changes the key.
// Nodes that no output reads compute nothing observable and are left out. A fused node's body
// counts as its attributes and is hashed structurally the same way (block_graph_hash).
#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "ir/block_graph.h"
#include "ir/serialize.h"
#include "ir/splitmix.h"

namespace yirage::ir {
namespace {

// Bumped whenever what is hashed changes, so that a persisted cache misses instead of binding a
// stale result to a graph that merely collides with an old key.
constexpr uint64_t kHashFormat = 1;

// Domain tags keep a node hash from ever equalling a graph or type hash by construction.
constexpr uint64_t kNodeDomain = 0x6e6f6465;        // "node"
constexpr uint64_t kGraphDomain = 0x67726170;       // "grap"
constexpr uint64_t kTypeDomain = 0x74797065;        // "type"
constexpr uint64_t kBlockNodeDomain = 0x626e6f64;   // "bnod"
constexpr uint64_t kBlockGraphDomain = 0x62677261;  // "bgra"

// Folds a sequence of words; each step is a bijection in the new word, so two sequences that
// differ in one word never collide at that step.
class Hasher {
 public:
  explicit Hasher(uint64_t domain) : state_(splitmix64(domain)) {}

  void add(uint64_t word) { state_ = splitmix64(state_ ^ splitmix64(word)); }
  void add_signed(int64_t v) { add(uint64_t(v)); }
  // By bit pattern: hashing must not round, and 0.0 and -0.0 are different attributes.
  void add_double(double v) { add(std::bit_cast<uint64_t>(v)); }

  // Hashed by content rather than enum value, so that reordering an enum keeps old keys valid.
  void add_string(std::string_view s) {
    add(s.size());
    for (size_t i = 0; i < s.size(); i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
      add(word);
    }
  }

  template <typename Ints>
  void add_ints(const Ints& ints) {
    add(ints.size());
    for (auto v : ints) add_signed(v);
  }

  uint64_t value() const { return state_; }

 private:
  uint64_t state_;
};

uint64_t type_hash(const TensorType& type) {
  Hasher h(kTypeDomain);
  h.add_string(dtype_name(type.dtype));
  h.add_ints(type.dims);
  return h.value();
}

uint64_t block_graph_hash(const BlockGraph& body);

void add_attributes(Hasher& h, const Op& op) {
  std::visit(Overloaded{
                 [&](const UnaryOp& u) {
                   // Only mul_scalar reads its scalar; other functions ignore whatever is stored.
                   if (u.fn == UnaryFn::mul_scalar) h.add_double(u.scalar);
                 },
                 [&](const ReduceOp& r) {
                   h.add_signed(r.dim);
                   h.add(r.keepdim);
                 },
                 [&](const RmsNormOp& n) {
                   h.add_ints(n.normalized_shape);
                   h.add_double(n.eps);
                   h.add(n.has_weight);
                 },
                 [&](const LayerNormOp& n) {
                   h.add_ints(n.normalized_shape);
                   h.add_double(n.eps);
                   h.add(n.has_weight);
                   h.add(n.has_bias);
                 },
                 [&](const SoftmaxOp& s) { h.add_signed(s.dim); },
                 [&](const ConcatOp& c) { h.add_signed(c.dim); },
                 [&](const SplitOp& s) {
                   h.add_signed(s.dim);
                   h.add_ints(s.sizes);
                 },
                 [&](const ReshapeOp& r) { h.add_ints(r.shape); },
                 [&](const PermuteOp& p) { h.add_ints(p.perm); },
                 [&](const RopeOp& r) {
                   h.add_double(r.theta);
                   h.add_string(rope_style_name(r.style));
                 },
                 [&](const QuantMatmulOp& q) {
                   h.add_string(quant_format_name(q.format));
                   // Only when off, so that the hashes of graphs that never set it stay.
                   if (!q.prefetch) h.add_string("no_prefetch");
                 },
                 [&](const PagedAttentionOp& a) { h.add_signed(a.block_tokens); },
                 [](const InputOp&) {},
                 [&](const MatmulOp& m) {
                   // Only when set, so that the hashes of graphs without the flag stay as they
                   // were.
                   if (m.library) h.add_string("library");
                 },
                 [](const BinaryOp&) {},
                 [](const EmbeddingOp&) {},
                 [&](const FusedOp& f) { h.add(block_graph_hash(*f.body)); },
             },
             op);
}

void add_block_attributes(Hasher& h, const BlockOp& op) {
  std::visit(Overloaded{
                 [&](const InputIteratorOp& it) {
                   h.add_signed(it.operand);
                   h.add_ints(it.imap);
                   h.add_signed(it.fmap);
                 },
                 [&](const ReduceToWidthOp& r) {
                   h.add_signed(r.dim);
                   h.add_signed(r.width);
                 },
                 [&](const AccumulatorOp& acc) {
                   h.add_string(accum_name(acc.fn));
                   if (acc.eps != 0.0) h.add_double(acc.eps);
                 },
                 [&](const OutputSaverOp& save) { h.add_ints(save.omap); },
                 [&](const auto& shared) { add_attributes(h, Op(shared)); },
             },
             op);
}

// A fused kernel's body, Merkle style like the kernel graph, so that the order in which
// independent block nodes were added does not matter. Iterators are told apart by the operand
// they load, savers by their order, which numbers the fused node's outputs; a valid body has no
// node that no saver depends on.
uint64_t block_graph_hash(const BlockGraph& body) {
  const std::vector<BlockNode>& nodes = body.nodes();
  std::vector<uint64_t> node_hash(nodes.size(), 0);
  Hasher graph(kBlockGraphDomain);
  graph.add_ints(body.grid().extent);
  graph.add_signed(body.forloop_range());
  graph.add(body.operands().size());
  for (const TensorType& type : body.operands()) graph.add(type_hash(type));
  for (size_t id = 0; id < nodes.size(); ++id) {
    const BlockNode& node = nodes[id];
    Hasher h(kBlockNodeDomain);
    h.add_string(block_op_name(node.op));
    add_block_attributes(h, node.op);
    h.add(type_hash(node.tile));
    h.add(node.inputs.size());
    for (int32_t in : node.inputs) h.add(node_hash[size_t(in)]);
    node_hash[id] = h.value();
    if (std::holds_alternative<OutputSaverOp>(node.op)) graph.add(node_hash[id]);
  }
  return graph.value();
}

struct Walk {
  std::vector<bool> reachable;       // by node id
  std::vector<int32_t> input_order;  // reachable input node ids, by first reach
  std::vector<int64_t> input_index;  // by node id: position in input_order, or -1
};

// Preorder depth-first walk from the outputs. Iterative, because a JSON file can describe a
// chain deep enough to overflow the stack of a recursive walk. Marking a node when it is popped
// and pushing operands in reverse visits nodes in the same order as the recursive walk.
Walk walk_from_outputs(const KernelGraph& graph) {
  const size_t n = graph.nodes().size();
  Walk walk{std::vector<bool>(n, false), {}, std::vector<int64_t>(n, -1)};
  std::vector<int32_t> stack;
  for (auto out = graph.outputs().rbegin(); out != graph.outputs().rend(); ++out)
    stack.push_back(out->tensor.node);
  while (!stack.empty()) {
    int32_t id = stack.back();
    stack.pop_back();
    if (walk.reachable[size_t(id)]) continue;
    walk.reachable[size_t(id)] = true;
    const Node& node = graph.node(id);
    if (std::holds_alternative<InputOp>(node.op)) {
      walk.input_index[size_t(id)] = int64_t(walk.input_order.size());
      walk.input_order.push_back(id);
    }
    for (auto in = node.inputs.rbegin(); in != node.inputs.rend(); ++in) stack.push_back(in->node);
  }
  return walk;
}

}  // namespace

uint64_t structural_hash(const KernelGraph& graph) {
  const Walk walk = walk_from_outputs(graph);
  const std::vector<Node>& nodes = graph.nodes();
  // Node ids are a topological order, so operands are hashed before their readers.
  std::vector<uint64_t> node_hash(nodes.size(), 0);
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (!walk.reachable[id]) continue;
    const Node& node = nodes[id];
    Hasher h(kNodeDomain);
    h.add_string(op_name(node.op));
    h.add_signed(walk.input_index[id]);
    add_attributes(h, node.op);
    h.add(node.inputs.size());
    for (TensorRef in : node.inputs) {
      h.add(node_hash[size_t(in.node)]);
      h.add_signed(in.port);
    }
    h.add(node.outputs.size());
    for (const TensorType& type : node.outputs) h.add(type_hash(type));
    node_hash[id] = h.value();
  }

  Hasher h(kGraphDomain);
  h.add(kHashFormat);
  h.add(graph.outputs().size());
  for (const GraphOutput& out : graph.outputs()) {
    h.add(node_hash[size_t(out.tensor.node)]);
    h.add_signed(out.tensor.port);
  }
  std::vector<uint64_t> unused_inputs;
  for (TensorRef in : graph.inputs())
    if (!walk.reachable[size_t(in.node)]) unused_inputs.push_back(type_hash(graph.type(in)));
  std::sort(unused_inputs.begin(), unused_inputs.end());
  h.add(unused_inputs.size());
  for (uint64_t t : unused_inputs) h.add(t);
  return h.value();
}

std::string structural_hash_hex(const KernelGraph& graph) {
  return fmt::format("{:016x}", structural_hash(graph));
}

std::vector<TensorRef> canonical_input_order(const KernelGraph& graph) {
  const Walk walk = walk_from_outputs(graph);
  std::vector<TensorRef> order;
  for (int32_t id : walk.input_order) order.push_back({id, 0});
  for (TensorRef in : graph.inputs())
    if (!walk.reachable[size_t(in.node)]) order.push_back(in);
  return order;
}

}  // namespace yirage::ir
