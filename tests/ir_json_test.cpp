// JSON round trip of kernel graphs, the errors a malformed document gets, and DOT/SVG output.
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/ir.h"
#include "ir_test_graphs.h"
#include "support/error.h"
#include "test_util.h"

namespace yirage::ir {
namespace {

using test_util::error_of;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// A fresh directory for the files one test writes, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("yirage-{}-{}-{}", info->test_suite_name(), info->name(), ::getpid());
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_kernel_graph(text); });
}

// ---------------------------------------------------------------------------------------------
// Round trip

TEST(IrJson, EveryOpGraphCoversEveryOp) {
  KernelGraph g = testing::every_op_graph();
  std::set<std::string_view> used;
  for (const Node& node : g.nodes()) used.insert(op_name(node.op));
  EXPECT_EQ(used, testing::all_op_names());
}

TEST(IrJson, RoundTripIsExact) {
  KernelGraph g = testing::every_op_graph();
  nlohmann::json first = to_json(g);
  KernelGraph loaded = from_json(first);
  EXPECT_EQ(to_json(loaded).dump(2), first.dump(2));
  EXPECT_EQ(structural_hash(loaded), structural_hash(g));
  ASSERT_EQ(loaded.nodes().size(), g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    EXPECT_EQ(loaded.nodes()[i].name, g.nodes()[i].name);
    EXPECT_EQ(loaded.nodes()[i].inputs, g.nodes()[i].inputs);
    EXPECT_EQ(loaded.nodes()[i].outputs, g.nodes()[i].outputs);
  }
  ASSERT_EQ(loaded.outputs().size(), g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    EXPECT_EQ(loaded.outputs()[i].tensor, g.outputs()[i].tensor);
    EXPECT_EQ(loaded.outputs()[i].name, g.outputs()[i].name);
  }
}

TEST(IrJson, LibraryMatmulFlagRoundTripsAndIsWrittenOnlyWhenSet) {
  KernelGraph g;
  TensorRef x = g.input("x", {2, 3}, DType::f32), w = g.input("w", {3, 4}, DType::f32);
  g.mark_output(g.add_node(MatmulOp{.library = true}, {x, w}, "lib")[0], "lib");
  g.mark_output(g.matmul(x, w), "gen");
  const nlohmann::json j = to_json(g);
  EXPECT_EQ(j["nodes"][2]["library"], true);
  EXPECT_FALSE(j["nodes"][3].contains("library"));
  const KernelGraph back = parse_kernel_graph(j.dump());
  EXPECT_TRUE(is_library_matmul(back.nodes()[2].op));
  EXPECT_FALSE(is_library_matmul(back.nodes()[3].op));
  EXPECT_EQ(to_json(back), j);
  nlohmann::json wrong = j;
  wrong["nodes"][2]["library"] = 1;
  EXPECT_EQ(error_of([&] { parse_kernel_graph(wrong.dump()); }),
            "$.nodes[2].library: expected a boolean (true or false), got the number 1");
}

TEST(IrJson, DoublesRoundTripBitExactly) {
  KernelGraph g;
  auto x = g.input("x", {2, 8, 2, 4}, DType::f32);
  auto pos = g.input("pos", {8}, DType::i32);
  auto a = g.mul_scalar(x, 0.1);
  auto b = g.mul_scalar(a, -0.0);
  auto c = g.mul_scalar(b, 1e-300);
  auto d = g.rms_norm(c, {4}, {}, 1e-6);
  auto e = g.layer_norm(d, {4}, {}, {}, 1.0 / 3);
  auto f = g.rope(e, pos, 1e4 + 1e-9);
  g.mark_output(f);
  KernelGraph loaded = parse_kernel_graph(to_json(g).dump());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    auto bits = [](const Node& n) -> uint64_t {
      if (auto* u = std::get_if<UnaryOp>(&n.op)) return std::bit_cast<uint64_t>(u->scalar);
      if (auto* r = std::get_if<RmsNormOp>(&n.op)) return std::bit_cast<uint64_t>(r->eps);
      if (auto* l = std::get_if<LayerNormOp>(&n.op)) return std::bit_cast<uint64_t>(l->eps);
      if (auto* r = std::get_if<RopeOp>(&n.op)) return std::bit_cast<uint64_t>(r->theta);
      return 0;
    };
    EXPECT_EQ(bits(loaded.nodes()[i]), bits(g.nodes()[i])) << "node " << g.nodes()[i].name;
  }
}

TEST(IrJson, SaveAndLoadGiveTheSameFile) {
  ScratchDir dir;
  KernelGraph g = testing::every_op_graph();
  save_kernel_graph(g, dir / "a.json");
  save_kernel_graph(load_kernel_graph(dir / "a.json"), dir / "b.json");
  std::string text = read_text(dir / "a.json");
  EXPECT_EQ(read_text(dir / "b.json"), text);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(text), to_json(g));
  // Short nodes take one line each, long ones one field per line, for people reading the file.
  EXPECT_THAT(text, HasSubstr("\n    {\"name\": \"table\", \"op\": \"input\", \"dtype\": \"f32\", "
                              "\"shape\": [32, 16]},\n"));
  EXPECT_THAT(text, HasSubstr("\n      \"normalized_shape\": [8, 16],\n"));
}

TEST(IrJson, WritesPortsAndNamesContainingColons) {
  KernelGraph g;
  auto x = g.input("x:1", {4, 6}, DType::f32);
  auto parts = g.add_node(SplitOp{1, {2, 4}}, {x}, "parts");
  auto y = g.add_node(UnaryOp{UnaryFn::relu}, {parts[1]}, "a:b");
  g.mark_output(g.neg(y[0]), "out");
  nlohmann::json j = to_json(g);
  EXPECT_EQ(j["nodes"][1]["inputs"][0], "x:1:0");
  EXPECT_EQ(j["nodes"][2]["inputs"][0], "parts:1");
  EXPECT_EQ(j["nodes"][3]["inputs"][0], "a:b:0");
  KernelGraph loaded = from_json(j);
  EXPECT_EQ(to_json(loaded), j);
}

// A hand-written file may leave out result types and defaulted attributes and use -1 and
// negative axes; the loaded graph stores them resolved.
TEST(IrJson, LoadsHandWrittenGraph) {
  KernelGraph g = parse_kernel_graph(R"({
    "schema": "yirage.kernel_graph", "version": 1,
    "nodes": [
      {"name": "x", "op": "input", "dtype": "float16", "shape": [2, 3, 4]},
      {"name": "w", "op": "input", "dtype": "f16", "shape": [4]},
      {"name": "flat", "op": "reshape", "inputs": ["x"], "shape": [-1, 4]},
      {"name": "n", "op": "rms_norm", "inputs": ["flat", "w"], "normalized_shape": [4]},
      {"name": "parts", "op": "split", "inputs": ["n"], "dim": -1, "sizes": [1, 3],
       "outputs": [{"shape": [6, 1]}, {"dtype": "f16"}]},
      {"name": "s", "op": "sum", "inputs": ["parts:1"], "dim": -1, "dtype": "f16",
       "shape": [6, 1]}
    ],
    "outputs": [{"tensor": "s"}, {"tensor": "parts:1", "name": "tail"}]
  })");
  const Node& flat = g.node(g.find("flat"));
  EXPECT_EQ(std::get<ReshapeOp>(flat.op).shape, (Dims{6, 4}));
  const auto& norm = std::get<RmsNormOp>(g.node(g.find("n")).op);
  EXPECT_TRUE(norm.has_weight);
  EXPECT_EQ(norm.eps, 1e-6);
  const auto& sum = std::get<ReduceOp>(g.node(g.find("s")).op);
  EXPECT_EQ(sum.dim, 1);
  EXPECT_TRUE(sum.keepdim);
  EXPECT_EQ(g.type(g.outputs()[1].tensor), (TensorType{DType::f16, {6, 3}}));
  EXPECT_EQ(g.outputs()[0].name, "s");
  EXPECT_EQ(g.outputs()[1].name, "tail");
}

// ---------------------------------------------------------------------------------------------
// Errors

// A valid document with `node` spliced in after inputs x: f32[2, 3] and y: f32[3, 4].
std::string with_node(const std::string& node, const std::string& outputs = "[]") {
  return R"({"schema": "yirage.kernel_graph", "version": 1, "nodes": [
    {"name": "x", "op": "input", "dtype": "f32", "shape": [2, 3]},
    {"name": "y", "op": "input", "dtype": "f32", "shape": [3, 4]},
    )" + node +
         R"(], "outputs": )" + outputs + "}";
}

struct BadDocument {
  std::string what;
  std::string text;
  std::string path;    // the error must start with it
  std::string phrase;  // and contain it
};

TEST(IrJsonErrors, NameThePathAndTheProblem) {
  const std::vector<BadDocument> cases{
      {"syntax", R"({"schema": "yirage.kernel_graph",, })", "JSON syntax error at byte 34: ",
       "line 1, column 34: syntax error while parsing object key"},
      {"not an object", "[1, 2]", "$: ", "expected an object, got an array"},
      {"wrong schema", R"({"schema": "onnx", "version": 1, "nodes": [], "outputs": []})",
       "$.schema: ", "not a YiRage kernel graph"},
      {"newer version", R"({"schema": "yirage.kernel_graph", "version": 2, "nodes": []})",
       "$.version: ", "unsupported version 2; this build reads version 1"},
      {"unknown top-level field",
       R"({"schema": "yirage.kernel_graph", "version": 1, "nodes": [], "outputs": [],
           "comment": "hi"})",
       "$.comment: ", "unknown field \"comment\""},
      {"missing nodes", R"({"schema": "yirage.kernel_graph", "version": 1, "outputs": []})",
       "$: ", "missing field \"nodes\""},
      {"missing op", with_node(R"({"name": "z", "inputs": ["x"]})"),
       "$.nodes[2]: ", "missing field \"op\""},
      {"unknown op", with_node(R"({"name": "z", "op": "matmull", "inputs": ["x", "y"]})"),
       "$.nodes[2].op: ", "unknown op \"matmull\"; valid ops: input, matmul, exp"},
      {"unknown dtype",
       R"({"schema": "yirage.kernel_graph", "version": 1, "outputs": [],
           "nodes": [{"name": "x", "op": "input", "dtype": "float64", "shape": [2]}]})",
       "$.nodes[0].dtype: ", "unknown dtype \"float64\"; valid dtypes: f32, f16, bf16"},
      {"non-integer dim",
       R"({"schema": "yirage.kernel_graph", "version": 1, "outputs": [],
           "nodes": [{"name": "x", "op": "input", "dtype": "f32", "shape": [2, 2.5]}]})",
       "$.nodes[0].shape[1]: ", "expected an integer, got the number 2.5"},
      {"wrong type", with_node(R"({"name": "z", "op": "sum", "inputs": ["x"], "dim": "1"})"),
       "$.nodes[2].dim: ", "expected an integer, got the string \"1\""},
      {"inputs not an array", with_node(R"({"name": "z", "op": "exp", "inputs": "x"})"),
       "$.nodes[2].inputs: ", "expected an array"},
      {"unknown field (typo)",
       with_node(R"({"name": "z", "op": "sum", "inputs": ["x"], "dim": 1, "kepdim": false})"),
       "$.nodes[2].kepdim: ", "unknown field \"kepdim\" in a node with op \"sum\""},
      {"attribute of another op",
       with_node(R"({"name": "z", "op": "exp", "inputs": ["x"], "scalar": 2})"),
       "$.nodes[2].scalar: ", "unknown field"},
      {"unknown tensor", with_node(R"({"name": "z", "op": "matmul", "inputs": ["x", "q"]})"),
       "$.nodes[2].inputs[1]: ", "unknown tensor \"q\""},
      {"forward reference", with_node(R"({"name": "z", "op": "exp", "inputs": ["later"]},
                    {"name": "later", "op": "exp", "inputs": ["x"]})"),
       "$.nodes[2].inputs[0]: ", "defined later, at $.nodes[3]"},
      {"self reference", with_node(R"({"name": "z", "op": "exp", "inputs": ["z"]})"),
       "$.nodes[2].inputs[0]: ", "reads its own output"},
      {"duplicate node name", with_node(R"({"name": "x", "op": "exp", "inputs": ["y"]})"),
       "$.nodes[2].name: ", "duplicate node name \"x\"; first defined at $.nodes[0]"},
      {"bad port", with_node(R"({"name": "z", "op": "exp", "inputs": ["x:1"]})"),
       "$.nodes[2].inputs[0]: ", "node \"x\" has 1 output, so port 1 does not exist"},
      {"shape inference", with_node(R"({"name": "z", "op": "matmul", "inputs": ["y", "x"]})"),
       "$.nodes[2]: ", "node 'z': matmul(f32[3, 4], f32[2, 3]): inner dims differ (4 vs 2)"},
      {"declared shape differs",
       with_node(R"({"name": "z", "op": "matmul", "inputs": ["x", "y"], "shape": [2, 5]})"),
       "$.nodes[2].shape: ", "declared [2, 5], but the op produces f32[2, 4]"},
      {"declared split results differ",
       with_node(R"({"name": "z", "op": "split", "inputs": ["x"], "dim": 1, "sizes": [1, 2],
                     "outputs": [{}, {"shape": [2, 1]}]})"),
       "$.nodes[2].outputs[1].shape: ", "declared [2, 1], but the op produces f32[2, 2]"},
      {"bad input shape",
       R"({"schema": "yirage.kernel_graph", "version": 1, "outputs": [],
           "nodes": [{"name": "x", "op": "input", "dtype": "f32", "shape": [2, 0]}]})",
       "$.nodes[0]: ", "has a dim below 1"},
      {"duplicate key", with_node(R"({"name": "z", "op": "sum", "inputs": ["x"], "dim": 0,
                                      "dim": 1})"),
       "$.nodes[2]: ", "duplicate key \"dim\""},
      {"bad rope style",
       with_node(R"({"name": "z", "op": "rope", "inputs": ["x", "y"], "style": "gptj"})"),
       "$.nodes[2].style: ", "valid styles: interleaved, neox"},
      {"unknown output tensor",
       with_node(R"({"name": "z", "op": "exp", "inputs": ["x"]})",
                 R"([{"tensor": "z"}, {"tensor": "w"}])"),
       "$.outputs[1].tensor: ", "unknown tensor \"w\""},
      {"duplicate output name",
       with_node(R"({"name": "z", "op": "exp", "inputs": ["x"]})",
                 R"([{"tensor": "z", "name": "o"}, {"tensor": "x", "name": "o"}])"),
       "$.outputs[1]: ", "an output named 'o' already exists"},
      {"number overflow",
       with_node(R"({"name": "z", "op": "rms_norm", "inputs": ["x"], "normalized_shape": [3],
                     "eps": 1e999})"),
       "JSON syntax error: ", "number overflow"},
      {"out of range dim",
       with_node(R"({"name": "z", "op": "softmax", "inputs": ["x"], "dim": 4294967296})"),
       "$.nodes[2].dim: ", "4294967296 is out of range"},
  };
  for (const BadDocument& c : cases) {
    std::string message = parse_error(c.text);
    EXPECT_THAT(message, StartsWith(c.path)) << c.what;
    EXPECT_THAT(message, HasSubstr(c.phrase)) << c.what;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what << ": not one line: " << message;
  }
}

TEST(IrJsonErrors, FileErrorsStartWithThePath) {
  ScratchDir dir;
  std::string missing = (dir / "missing.json").string();
  EXPECT_THAT(error_of([&] { load_kernel_graph(missing); }),
              StartsWith(missing + ": cannot open for reading"));

  std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << with_node(R"({"name": "z", "op": "exp", "inputs": ["nope"]})");
  EXPECT_THAT(error_of([&] { load_kernel_graph(bad); }),
              StartsWith(bad + ": $.nodes[2].inputs[0]: unknown tensor \"nope\""));

  KernelGraph g;
  g.mark_output(g.input("x", {1}, DType::f32));
  std::string unwritable = (dir / "no-such-dir" / "g.json").string();
  EXPECT_THAT(error_of([&] { save_kernel_graph(g, unwritable); }),
              StartsWith(unwritable + ": cannot open for writing"));
}

TEST(IrJsonErrors, RejectsNamesThatAreNotUtf8) {
  ScratchDir dir;
  KernelGraph g;
  g.mark_output(g.input("x\xff", {1}, DType::f32));
  std::string path = (dir / "g.json").string();
  EXPECT_THAT(error_of([&] { save_kernel_graph(g, path); }),
              StartsWith(path + ": cannot save the graph: invalid UTF-8 byte"));
}

// ---------------------------------------------------------------------------------------------
// DOT and SVG

TEST(IrDot, ShowsNodesAttributesEdgesAndOutputs) {
  KernelGraph g;
  auto x = g.input("x \"quoted\"", {2, 6}, DType::f32);
  auto parts = g.split(x, 1, {2, 4});
  auto s = g.reduce(ReduceFn::sum, parts[1], -1, false);
  g.mark_output(s, "total");
  std::string dot = to_dot(g);
  EXPECT_THAT(dot, StartsWith("digraph"));
  EXPECT_THAT(dot, HasSubstr(R"(n0 [label="x \"quoted\"\ninput\nf32[2, 6]", shape=ellipse];)"));
  EXPECT_THAT(dot, HasSubstr(R"(split dim=1 sizes=[2, 4]\n:0 f32[2, 2]\n:1 f32[2, 4]")"));
  EXPECT_THAT(dot, HasSubstr(R"(\nsum dim=1 keepdim=false\nf32[2]")"));
  EXPECT_THAT(dot, HasSubstr("n0 -> n1;"));
  EXPECT_THAT(dot, HasSubstr("n1 -> n2 [label=\":1\"];"));
  EXPECT_THAT(dot, HasSubstr("label=\"output 0: total\""));
  EXPECT_THAT(dot, HasSubstr("n2 -> out0;"));
}

TEST(IrDot, EscapesBackslashesAndControlCharacters) {
  KernelGraph g;
  g.mark_output(g.input("a\\N\tb", {1}, DType::f32));
  EXPECT_THAT(to_dot(g), HasSubstr(R"(label="a\\N\\x09b\n)"));
}

bool dot_installed() {
  return std::system("command -v dot > /dev/null 2>&1") == 0;
}

TEST(IrDot, RendersSvg) {
  if (!dot_installed()) GTEST_SKIP() << "graphviz 'dot' is not installed";
  ScratchDir dir;
  std::string svg = (dir / "every op.svg").string();
  write_svg(to_dot(testing::every_op_graph()), svg);
  std::string text = read_text(svg);
  EXPECT_THAT(text, HasSubstr("<svg"));
  EXPECT_THAT(text, HasSubstr("rms_norm"));
}

TEST(IrDot, ReportsDotFailures) {
  if (!dot_installed()) GTEST_SKIP() << "graphviz 'dot' is not installed";
  ScratchDir dir;
  std::string svg = (dir / "bad.svg").string();
  EXPECT_THAT(error_of([&] { write_svg("digraph { a -> }", svg); }),
              StartsWith("cannot render SVG to " + svg + ": dot exited with status"));
}

TEST(IrDot, ReportsMissingGraphviz) {
  std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  ScratchDir dir;
  ::setenv("PATH", (dir / "empty").c_str(), 1);
  std::string message = error_of([&] { write_svg("digraph {}", (dir / "g.svg").string()); });
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(message,
            "cannot render SVG: graphviz 'dot' not found on PATH; install graphviz or use the DOT "
            "output");
}

}  // namespace
}  // namespace yirage::ir
