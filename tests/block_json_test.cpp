// Block graphs as JSON (round trip, hand-written input, errors with JSON paths) and as DOT.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "block_test_graphs.h"
#include "ir/block_graph.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::ir {
namespace {

using nlohmann::json;
using test_util::error_of;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<BlockGraph> all_test_graphs() {
  std::vector<BlockGraph> graphs;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    graphs.push_back(testing::rmsnorm_linear_block(dtype));
    graphs.push_back(testing::gated_mlp_block(dtype));
    graphs.push_back(testing::attention_exp_block(dtype));
    graphs.push_back(testing::attention_softmax_block(dtype));
    graphs.push_back(testing::split_k_block(dtype));
  }
  BlockGraph extras({{1, 1, 1}}, 2, {{DType::f32, {4, 8}}, {DType::f32, {8}}});
  int32_t x = extras.iterator(0, testing::kAllReplicated, 1);
  int32_t w = extras.iterator(1, testing::kAllReplicated, 0);
  int32_t norm = extras.add(RmsNormOp{{4}, 1e-5, true}, {x, w});
  int32_t scaled = extras.add(UnaryOp{UnaryFn::mul_scalar, 0.1}, {norm});
  int32_t wide = extras.add(ConcatOp{1}, {scaled, x});
  int32_t narrow = extras.add(ReduceToWidthOp{1, 2}, {wide});
  extras.save(extras.accumulate(AccumFn::mean, narrow), testing::kAllReplicated);
  graphs.push_back(std::move(extras));
  return graphs;
}

TEST(BlockJson, RoundTripsEveryTestGraph) {
  for (const BlockGraph& g : all_test_graphs()) {
    json doc = to_json(g);
    BlockGraph back = block_graph_from_json(doc);
    EXPECT_EQ(to_json(back), doc);
    EXPECT_EQ(back.grid(), g.grid());
    EXPECT_EQ(back.output_types(), g.output_types());
    ASSERT_EQ(back.nodes().size(), g.nodes().size());
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      EXPECT_EQ(back.nodes()[i].tile, g.nodes()[i].tile) << i;
      EXPECT_EQ(back.nodes()[i].inputs, g.nodes()[i].inputs) << i;
      EXPECT_EQ(back.phase(int32_t(i)), g.phase(int32_t(i))) << i;
    }
    // And through text, as a file holds it.
    EXPECT_EQ(to_json(block_graph_from_json(json::parse(doc.dump()))), doc);
  }
}

TEST(BlockJson, WritesTheDocumentedLayout) {
  json expected = json::parse(R"({
    "grid": [2, 4, 1], "forloop_range": 2,
    "operands": [{"dtype": "f16", "shape": [1, 4, 64]}, {"dtype": "f16", "shape": [64, 16]}],
    "nodes": [
      {"op": "iterator", "operand": 0, "imap": [-1, 2, -1], "fmap": 2, "dtype": "f16",
       "shape": [1, 4, 8]},
      {"op": "iterator", "operand": 1, "imap": [1, 0, -1], "fmap": 0, "dtype": "f16",
       "shape": [8, 8]},
      {"op": "matmul", "inputs": [0, 1], "dtype": "f16", "shape": [1, 4, 8]},
      {"op": "accum", "inputs": [2], "fn": "sum", "dtype": "f16", "shape": [1, 4, 8]},
      {"op": "save", "inputs": [3], "omap": [2, 0, -1], "dtype": "f16", "shape": [1, 4, 8]}
    ]})");
  EXPECT_EQ(to_json(testing::split_k_block(DType::f16)), expected);
}

// Types may be left out and axes may count from the end; the writer fills in and normalises.
TEST(BlockJson, ReadsHandWrittenGraphs) {
  BlockGraph g = block_graph_from_json(json::parse(R"({
    "grid": [1, 1, 1], "forloop_range": 2, "operands": [{"dtype": "bf16", "shape": [4, 8]}],
    "nodes": [
      {"op": "iterator", "operand": 0, "imap": [-1, -1, -1], "fmap": 1},
      {"op": "max", "inputs": [0], "dim": -1},
      {"op": "accum", "inputs": [1], "fn": "max"},
      {"op": "save", "inputs": [2], "omap": [-1, -1, -1]}
    ]})"));
  g.validate({});
  const json written = to_json(g);
  EXPECT_EQ(written["nodes"][1]["dim"], 1);
  EXPECT_EQ(written["nodes"][1]["keepdim"], true);
  EXPECT_EQ(written["nodes"][3]["shape"], json::parse("[4, 1]"));
  EXPECT_EQ(g.output_types(), (std::vector<TensorType>{{DType::bf16, {4, 1}}}));
}

// A one-node graph document with `node` as node 1 after an iterator over f32[4, 8].
std::string node_error(const std::string& node) {
  const std::string text = R"({"grid": [1, 1, 1], "forloop_range": 2,
    "operands": [{"dtype": "f32", "shape": [4, 8]}],
    "nodes": [{"op": "iterator", "operand": 0, "imap": [-1, -1, -1], "fmap": 1}, )" +
                           node + "]}";
  return error_of([&] { block_graph_from_json(json::parse(text)); });
}

TEST(BlockJsonErrors, NodesNameTheirPath) {
  EXPECT_EQ(node_error(R"({"op": "softmax", "inputs": [0], "dim": 1})"),
            "$.nodes[1].op: \"softmax\" is not a block op; valid block ops: iterator, "
            "reduce_to_width, accum, save, matmul, exp, silu, gelu, relu, sqrt, rsqrt, square, "
            "neg, reciprocal, mul_scalar, add, sub, mul, div, pow, sum, mean, max, rms_norm, "
            "layer_norm, concat");
  EXPECT_EQ(node_error(R"({"op": "exp", "inputs": [1]})"),
            "$.nodes[1].inputs[0]: block node 1 is not listed before this node; a node reads "
            "only earlier nodes");
  EXPECT_EQ(node_error(R"({"op": "accum", "inputs": [0], "fn": "avg"})"),
            "$.nodes[1].fn: unknown accumulator function \"avg\"; valid functions: sum, mean, "
            "rms, max, rescaled_sum");
  EXPECT_EQ(node_error(R"({"op": "sum", "inputs": [0], "dim": 1, "kepdim": false})"),
            "$.nodes[1].kepdim: unknown field \"kepdim\" in a block node with op \"sum\"; allowed "
            "fields: dim, dtype, inputs, keepdim, op, shape");
  EXPECT_EQ(node_error(R"({"op": "save", "inputs": [0], "omap": [-1, -1, -1]})"),
            "$.nodes[1]: block node 1: save(f32[4, 4]): block node 0 runs in the loop body; a "
            "saver writes a tile computed after the loop (accumulate it first)");
  EXPECT_EQ(node_error(R"({"op": "save", "inputs": [0], "omap": [-1, -1]})"),
            "$.nodes[1].omap: expected 3 entries, one per grid axis (x, y, z), got 2");
  EXPECT_EQ(node_error(R"({"op": "exp", "inputs": [0], "dtype": "f32", "shape": [4, 8]})"),
            "$.nodes[1].shape: declared [4, 8], but the op produces f32[4, 4]");
  EXPECT_EQ(node_error(R"({"op": "reduce_to_width", "inputs": [0], "dim": 1})"),
            "$.nodes[1]: missing field \"width\"");
  EXPECT_EQ(node_error(R"({"op": "iterator", "operand": 0, "imap": [-1, "x", -1], "fmap": 1})"),
            "$.nodes[1].imap[1]: expected an integer, got the string \"x\"");
  EXPECT_EQ(
      node_error(R"({"op": "iterator", "inputs": [0], "operand": 0, "imap": [-1, -1, -1],
                     "fmap": 1})"),
      "$.nodes[1].inputs: unknown field \"inputs\" in a block node with op \"iterator\"; allowed "
      "fields: dtype, fmap, imap, op, operand, shape");
  EXPECT_EQ(node_error(R"({"op": "iterator", "operand": 0, "imap": [-1, -1, -1], "fmap": 2})"),
            "$.nodes[1]: block node 1: iterator(operand 0: f32[4, 8]): fmap = 2 is neither a dim "
            "of the rank-2 operand nor -1 (replicate)");
}

TEST(BlockJsonErrors, TopLevelFields) {
  auto error = [](const std::string& text) {
    return error_of([&] { block_graph_from_json(json::parse(text)); });
  };
  EXPECT_EQ(error(R"({"forloop_range": 1, "operands": [], "nodes": []})"),
            "$: missing field \"grid\"");
  EXPECT_EQ(error(R"({"grid": [1, 1], "forloop_range": 1, "operands": [], "nodes": []})"),
            "$.grid: expected 3 extents (x, y, z), got 2");
  EXPECT_EQ(error(R"({"grid": [0, 1, 1], "forloop_range": 1, "operands": [], "nodes": []})"),
            "$: block graph: grid axis x has extent 0; extents must be >= 1");
  EXPECT_EQ(error(R"({"grid": [1, 1, 1], "forloop_range": 1.5, "operands": [], "nodes": []})"),
            "$.forloop_range: expected an integer, got the number 1.5");
  EXPECT_EQ(
      error(R"({"grid": [1, 1, 1], "forloop_range": 1,
                      "operands": [{"dtype": "f64", "shape": [2]}], "nodes": []})"),
      "$.operands[0].dtype: unknown dtype \"f64\"; valid dtypes: f32, f16, bf16, i32, i8, u8");
  EXPECT_EQ(error(R"({"grid": [1, 1, 1], "forloop_range": 1, "operands": [], "nodes": {}})"),
            "$.nodes: expected an array, got an object");
  EXPECT_EQ(error(R"({"grid": [1, 1, 1], "forloop_range": 1, "operands": [], "nodes": [],
                      "range": 2})"),
            "$.range: unknown field \"range\" in a block graph; allowed fields: forloop_range, "
            "grid, nodes, operands");
  // A body nested in a kernel-graph file reports the nested path.
  EXPECT_EQ(error_of([] {
              block_graph_from_json(json::parse(R"({"grid": [1, 1, 1]})"), "$.nodes[4].body");
            }),
            "$.nodes[4].body: missing field \"forloop_range\"");
}

// ---------------------------------------------------------------------------------------------
// DOT

// The text between "subgraph <name> {" and its closing brace.
std::string cluster_text(const std::string& dot, const std::string& name) {
  size_t start = dot.find("subgraph " + name + " {");
  if (start == std::string::npos) return "";
  int depth = 0;
  for (size_t i = dot.find('{', start); i < dot.size(); ++i) {
    if (dot[i] == '{') ++depth;
    if (dot[i] == '}' && --depth == 0) return dot.substr(start, i - start);
  }
  return "";
}

TEST(BlockDot, NestsTheLoopInsideTheBlock) {
  const std::string dot = to_dot(testing::rmsnorm_linear_block(DType::f32));
  const std::string block = cluster_text(dot, "cluster_block");
  const std::string loop = cluster_text(dot, "cluster_loop");
  ASSERT_FALSE(loop.empty()) << dot;
  EXPECT_THAT(block, HasSubstr(loop));
  EXPECT_THAT(block, HasSubstr(R"d(label="grid [3, 1, 1] (3 blocks)")d"));
  EXPECT_THAT(loop, HasSubstr(R"d(label="for-loop: 4 iterations")d"));
  // In the loop: the computed tiles. Around it, in the block: iterators, accumulators, savers.
  EXPECT_THAT(loop, HasSubstr(R"d(b4 [label="b4: matmul\nf32[4, 8]"])d"));
  EXPECT_THAT(loop, Not(HasSubstr("iterator")));
  EXPECT_THAT(loop, Not(HasSubstr("accum")));
  EXPECT_THAT(
      block,
      HasSubstr(
          R"d(b2 [label="b2: iterator operand=2 imap=[1, -1, -1] fmap=0\nf32[8, 8]", shape=invhouse])d"));
  EXPECT_THAT(block,
              HasSubstr(R"d(b8 [label="b8: accum rms\nf32[4, 1]", shape=box, style=rounded])d"));
  EXPECT_THAT(block,
              HasSubstr(R"d(b10 [label="b10: save omap=[1, -1, -1]\nf32[4, 8]", shape=house])d"));
  EXPECT_THAT(block, HasSubstr("b4 -> b7;"));
  EXPECT_THAT(dot, HasSubstr("operand2 -> b2;"));
  EXPECT_THAT(dot, HasSubstr(R"d(output0 [shape=plaintext, label="output 0: f32[4, 24]"])d"));
  EXPECT_THAT(dot, HasSubstr("b10 -> output0;"));
}

TEST(BlockDot, RendersSvg) {
  if (std::system("command -v dot > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "graphviz 'dot' is not installed";
  const std::filesystem::path svg =
      std::filesystem::temp_directory_path() / fmt::format("yirage-block-{}.svg", ::getpid());
  write_svg(to_dot(testing::attention_softmax_block(DType::f16)), svg.string());
  std::ifstream file(svg);
  std::ostringstream text;
  text << file.rdbuf();
  std::filesystem::remove(svg);
  EXPECT_THAT(text.str(), HasSubstr("rescaled_sum"));
}

}  // namespace
}  // namespace yirage::ir
