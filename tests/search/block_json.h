// Helpers for tests that edit a block graph's JSON form (mutants of searched µGraphs).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace yirage::search::testing {

// Drops the nodes that no saver depends on, which a rewiring leaves behind and validation rejects
// (a tile that no node reads), and renumbers the inputs of the rest: the program that remains.
inline void drop_dead_block_nodes(nlohmann::json& body) {
  nlohmann::json& nodes = body["nodes"];
  std::vector<bool> live(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    live[i] = live[i] || nodes[i]["op"] == "save";
    if (live[i] && nodes[i].contains("inputs"))
      for (const nlohmann::json& in : nodes[i]["inputs"]) live[in.get<size_t>()] = true;
  }
  std::vector<size_t> renumbered(nodes.size());
  nlohmann::json kept = nlohmann::json::array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!live[i]) continue;
    renumbered[i] = kept.size();
    kept.push_back(nodes[i]);
    if (kept.back().contains("inputs"))
      for (nlohmann::json& in : kept.back()["inputs"]) in = renumbered[in.get<size_t>()];
  }
  nodes = std::move(kept);
}

}  // namespace yirage::search::testing
