// Internal to the IR module: the DOT helpers that dot.cpp (kernel graphs) and block_dot.cpp
// (block graphs) share.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "ir/block_graph.h"
#include "ir/kernel_graph.h"

namespace yirage::ir::dot_util {

// Text for a DOT double-quoted string.
std::string escape(std::string_view text);

// "sum dim=1 keepdim=true", using the attribute names of the JSON format.
std::string op_text(const Op& op);

// The DOT id of block node `node` of a block graph drawn with `prefix`.
std::string block_node_id(std::string_view prefix, int32_t node);

// Writes `graph` as a cluster for the block, whose label starts with `title` and gives the grid,
// holding a cluster for the loop body. Node ids come from block_node_id(prefix, ...), so that
// several block graphs can share one DOT graph; every line starts with `indent`.
void write_block_cluster(std::ostream& out, const BlockGraph& graph, std::string_view prefix,
                         std::string_view title, std::string_view indent);

}  // namespace yirage::ir::dot_util
