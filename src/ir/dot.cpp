// Graphviz rendering of kernel graphs, for reading a program or a search result at a glance. A
// fused node is drawn as the cluster of its body (block_dot.cpp), wired to its neighbours.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/dot_util.h"
#include "ir/serialize.h"
#include "support/error.h"

extern char** environ;

namespace yirage::ir {

namespace dot_util {

// Text for a DOT double-quoted string. Backslashes are escaped too, since graphviz reads
// "\N", "\G" and friends in labels as placeholders; control characters are shown as \xNN.
std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out;
}

// "sum dim=1 keepdim=true", using the attribute names of the JSON format.
std::string op_text(const Op& op) {
  std::string attrs = std::visit(
      Overloaded{
          [](const UnaryOp& u) {
            return u.fn == UnaryFn::mul_scalar ? fmt::format("scalar={}", u.scalar) : "";
          },
          [](const ReduceOp& r) { return fmt::format("dim={} keepdim={}", r.dim, r.keepdim); },
          [](const RmsNormOp& n) {
            return fmt::format("normalized_shape={} eps={} has_weight={}",
                               format_dims(n.normalized_shape), n.eps, n.has_weight);
          },
          [](const LayerNormOp& n) {
            return fmt::format("normalized_shape={} eps={} has_weight={} has_bias={}",
                               format_dims(n.normalized_shape), n.eps, n.has_weight, n.has_bias);
          },
          [](const SoftmaxOp& s) { return fmt::format("dim={}", s.dim); },
          [](const ConcatOp& c) { return fmt::format("dim={}", c.dim); },
          [](const SplitOp& s) {
            return fmt::format("dim={} sizes={}", s.dim, format_dims(s.sizes));
          },
          [](const ReshapeOp& r) { return fmt::format("shape={}", format_dims(r.shape)); },
          [](const PermuteOp& p) { return fmt::format("perm=[{}]", fmt::join(p.perm, ", ")); },
          [](const RopeOp& r) {
            return fmt::format("theta={} style={}", r.theta, rope_style_name(r.style));
          },
          [](const QuantMatmulOp& q) {
            return fmt::format("format={}{}", quant_format_name(q.format),
                               q.prefetch ? "" : " no_prefetch");
          },
          [](const PagedAttentionOp& a) { return fmt::format("block_tokens={}", a.block_tokens); },
          [](const auto&) { return std::string(); },
      },
      op);
  std::string name(op_name(op));
  return attrs.empty() ? name : name + " " + attrs;
}

}  // namespace dot_util

namespace {

using dot_util::escape;
using dot_util::op_text;

std::string types_text(const std::vector<TensorType>& types) {
  if (types.size() == 1) return format_type(types[0]);
  std::vector<std::string> lines;
  for (size_t port = 0; port < types.size(); ++port)
    lines.push_back(fmt::format(":{} {}", port, format_type(types[port])));
  return fmt::format("{}", fmt::join(lines, "\\n"));
}

std::string port_label(TensorRef ref) {
  return ref.port == 0 ? "" : fmt::format(" [label=\":{}\"]", ref.port);
}

// A fused node is drawn as its body's cluster; its block nodes' DOT ids start with this.
std::string fused_prefix(int32_t node) {
  return fmt::format("n{}_", node);
}

// The block node of the saver that writes result `port` of a fused node.
int32_t saver_of(const BlockGraph& body, int32_t port) {
  int32_t seen = 0;
  for (size_t id = 0; id < body.nodes().size(); ++id)
    if (body.phase(int32_t(id)) == BlockPhase::saver && seen++ == port) return int32_t(id);
  fail("dot: a fused kernel has no result {}", port);
}

// An edge from tensor `from` to DOT node `to`; a fused node's result leaves from its saver.
void write_edge(std::ostream& out, const KernelGraph& graph, TensorRef from,
                const std::string& to) {
  if (const auto* fused = std::get_if<FusedOp>(&graph.node(from.node).op)) {
    out << fmt::format(
        "  {} -> {};\n",
        dot_util::block_node_id(fused_prefix(from.node), saver_of(*fused->body, from.port)), to);
    return;
  }
  out << fmt::format("  n{} -> {}{};\n", from.node, to, port_label(from));
}

// The body as a cluster labelled with the node; operand i flows into the iterators loading it.
void write_fused(std::ostream& out, const KernelGraph& graph, const Node& node, int32_t id,
                 const BlockGraph& body) {
  const std::string prefix = fused_prefix(id);
  dot_util::write_block_cluster(
      out, body, prefix,
      fmt::format("{}\\nfused\\n{}\\n", escape(node.name), types_text(node.outputs)), "  ");
  for (size_t b = 0; b < body.nodes().size(); ++b)
    if (const auto* it = std::get_if<InputIteratorOp>(&body.nodes()[b].op))
      write_edge(out, graph, node.inputs[size_t(it->operand)],
                 dot_util::block_node_id(prefix, int32_t(b)));
}

// Removes a temporary file when it goes out of scope, whatever path the function takes.
class TempFile {
 public:
  explicit TempFile(std::string_view stem) {
    std::string pattern = (std::filesystem::temp_directory_path() / stem).string() + "-XXXXXX";
    int fd = ::mkstemp(pattern.data());
    if (fd < 0) fail("cannot create a temporary file {}: {}", pattern, std::strerror(errno));
    ::close(fd);
    path_ = pattern;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string first_line_of(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// Runs argv with stdin from /dev/null and stderr to `stderr_path`; returns the wait status.
int run_program(std::vector<std::string> argv, const std::string& stderr_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(), O_WRONLY | O_TRUNC,
                                   0);
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err == ENOENT)
    fail(
        "cannot render SVG: graphviz 'dot' not found on PATH; install graphviz or use the DOT "
        "output");
  if (err != 0) fail("cannot render SVG: cannot start '{}': {}", argv[0], std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      fail("cannot render SVG: waiting for '{}': {}", argv[0], std::strerror(errno));
  return status;
}

}  // namespace

std::string to_dot(const KernelGraph& graph) {
  std::ostringstream out;
  out << "digraph kernel_graph {\n";
  out << "  node [shape=box, fontname=\"Helvetica\"];\n";
  const std::vector<Node>& nodes = graph.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const Node& node = nodes[id];
    if (const auto* fused = std::get_if<FusedOp>(&node.op)) {
      write_fused(out, graph, node, int32_t(id), *fused->body);
      continue;
    }
    bool is_input = std::holds_alternative<InputOp>(node.op);
    std::string label = fmt::format("{}\\n{}\\n{}", escape(node.name), escape(op_text(node.op)),
                                    types_text(node.outputs));
    out << fmt::format("  n{} [label=\"{}\"{}];\n", id, label, is_input ? ", shape=ellipse" : "");
    for (TensorRef in : node.inputs) write_edge(out, graph, in, fmt::format("n{}", id));
  }
  // Each output gets a plain label node, which shows its name and position.
  const std::vector<GraphOutput>& outputs = graph.outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    out << fmt::format("  out{} [shape=plaintext, label=\"output {}: {}\"];\n", i, i,
                       escape(outputs[i].name));
    write_edge(out, graph, outputs[i].tensor, fmt::format("out{}", i));
  }
  out << "}\n";
  return out.str();
}

void write_svg(const std::string& dot, const std::string& svg_path) {
  if (svg_path.empty()) fail("cannot render SVG: the output path is empty");
  TempFile input("yirage-graph");
  TempFile errors("yirage-dot-stderr");
  {
    std::ofstream file(input.path(), std::ios::binary | std::ios::trunc);
    file << dot;
    if (!file.flush()) fail("cannot render SVG: cannot write {}", input.path());
  }
  int status = run_program({"dot", "-Tsvg", "-o" + svg_path, input.path()}, errors.path());
  if (WIFSIGNALED(status))
    fail("cannot render SVG to {}: dot was killed by signal {}", svg_path, WTERMSIG(status));
  if (WEXITSTATUS(status) != 0)
    fail("cannot render SVG to {}: dot exited with status {}: {}", svg_path, WEXITSTATUS(status),
         first_line_of(errors.path()));
}

}  // namespace yirage::ir
