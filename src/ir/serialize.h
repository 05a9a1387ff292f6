// JSON round trip, structural hash and DOT rendering of kernel graphs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/kernel_graph.h"

namespace yirage::ir {

// The "version" field of every graph file this build writes; files with another version are
// rejected with a message that says which versions are understood.
inline constexpr int kKernelGraphSchemaVersion = 1;

// Layout (json.cpp documents every field):
//   {"schema": "yirage.kernel_graph", "version": 1,
//    "nodes": [{"name": "x", "op": "input", "dtype": "f32", "shape": [2, 4096]},
//              {"name": "y", "op": "matmul", "inputs": ["x", "w"], "dtype": ..., "shape": ...}],
//    "outputs": [{"tensor": "y", "name": "y"}]}
// A tensor is named by its node, with ":port" for a port other than 0 ("parts:1").
nlohmann::json to_json(const KernelGraph& graph);
// Throws yirage::Error naming the JSON path of the problem, e.g. `$.nodes[3].inputs[1]: ...`.
KernelGraph from_json(const nlohmann::json& doc);
// Parses text first; a syntax error names the byte offset.
KernelGraph parse_kernel_graph(const std::string& text);
// Reads and parses a file; errors start with the file name.
KernelGraph load_kernel_graph(const std::string& path);
void save_kernel_graph(const KernelGraph& graph, const std::string& path);

// A 64-bit hash of the program the graph computes, independent of node insertion order and of
// all names: equal for two builds of the same program, different (up to collisions) when an op,
// attribute, shape, dtype or wiring changes. Inputs are told apart by the order in which a
// depth-first walk from the outputs first reaches them (hash.cpp).
uint64_t structural_hash(const KernelGraph& graph);
std::string structural_hash_hex(const KernelGraph& graph);

// The graph's inputs (as in KernelGraph::inputs()) in the canonical order used by the hash, so
// that a result cached under the hash can be bound to another build's inputs.
std::vector<TensorRef> canonical_input_order(const KernelGraph& graph);

// Graphviz DOT text: one box per node labelled with its op, attributes and result types.
std::string to_dot(const KernelGraph& graph);
// Renders DOT to SVG with the `dot` program; throws yirage::Error when graphviz is missing.
void write_svg(const std::string& dot, const std::string& svg_path);

}  // namespace yirage::ir
