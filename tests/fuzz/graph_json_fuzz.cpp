// libFuzzer target: arbitrary bytes as a kernel-graph JSON file. Loading must either succeed or
// throw yirage::Error; a graph that loads must survive the writer, the hash and DOT, and load
// back to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ir/ir.h"
#include "support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  yirage::ir::KernelGraph graph;
  try {
    graph = yirage::ir::parse_kernel_graph(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const yirage::Error&) {
    return 0;
  }
  const auto text = yirage::ir::to_json(graph).dump();
  const auto again = yirage::ir::parse_kernel_graph(text);
  if (yirage::ir::to_json(again).dump() != text ||
      yirage::ir::structural_hash(again) != yirage::ir::structural_hash(graph))
    std::abort();  // a graph that loads must round-trip exactly
  (void)yirage::ir::to_dot(graph);
  return 0;
}
