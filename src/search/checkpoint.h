// The search checkpoint: which work items finished, and what they found.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "search/internal.h"

namespace yirage::search {

struct ItemResult {
  std::vector<BlockCandidate> candidates;
  uint64_t states = 0, pruned = 0;
};

// A JSON file {"schema": "yirage.search_checkpoint", "version": 1, "graph": <structural hash>,
// "items": {<item key>: {"states", "pruned", "candidates": [{"cost", "body"}]}}}, rewritten
// (to a temporary file, then renamed) after every finished item. A file for another graph is
// an error, not silently ignored.
class Checkpoint {
 public:
  Checkpoint(std::string path, std::string graph_hash);
  // Loads the file when it exists; returns how many items it holds.
  size_t load();
  bool find(const std::string& key, ItemResult& out) const;
  void record(const std::string& key, const ItemResult& result);

 private:
  void write_locked() const;

  std::string path_, graph_hash_;
  mutable std::mutex mutex_;
  std::map<std::string, ItemResult> items_;
};

}  // namespace yirage::search
