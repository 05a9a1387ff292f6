#include "search/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/error.h"

namespace yirage::search {

Checkpoint::Checkpoint(std::string path, std::string graph_hash)
    : path_(std::move(path)), graph_hash_(std::move(graph_hash)) {}

size_t Checkpoint::load() {
  std::ifstream in(path_);
  if (!in) return 0;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint {}: not JSON: {}", path_, e.what());
  }
  if (doc.value("schema", "") != "yirage.search_checkpoint" || doc.value("version", 0) != 1)
    fail("checkpoint {}: not a yirage.search_checkpoint file of version 1", path_);
  if (doc.value("graph", "") != graph_hash_)
    fail("checkpoint {}: written for graph {}, not this graph ({}); remove it or pick another path",
         path_, doc.value("graph", ""), graph_hash_);
  std::lock_guard lock(mutex_);
  try {
    for (const auto& [key, item] : doc.at("items").items()) {
      ItemResult r;
      r.states = item.at("states").get<uint64_t>();
      r.pruned = item.at("pruned").get<uint64_t>();
      for (const auto& c : item.at("candidates")) {
        BlockCandidate bc;
        bc.cost = c.at("cost").get<double>();
        bc.body = std::make_shared<const ir::BlockGraph>(
            ir::block_graph_from_json(c.at("body"), "$.body"));
        bc.key = ir::to_json(*bc.body).dump();
        r.candidates.push_back(std::move(bc));
      }
      items_[key] = std::move(r);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint {}: malformed: {}", path_, e.what());
  }
  return items_.size();
}

bool Checkpoint::find(const std::string& key, ItemResult& out) const {
  std::lock_guard lock(mutex_);
  auto it = items_.find(key);
  if (it == items_.end()) return false;
  out = it->second;
  return true;
}

void Checkpoint::record(const std::string& key, const ItemResult& result) {
  std::lock_guard lock(mutex_);
  items_[key] = result;
  write_locked();
}

void Checkpoint::write_locked() const {
  nlohmann::json doc = {{"schema", "yirage.search_checkpoint"},
                        {"version", 1},
                        {"graph", graph_hash_},
                        {"items", nlohmann::json::object()}};
  for (const auto& [key, r] : items_) {
    nlohmann::json cands = nlohmann::json::array();
    for (const BlockCandidate& c : r.candidates)
      cands.push_back({{"cost", c.cost}, {"body", ir::to_json(*c.body)}});
    doc["items"][key] = {{"states", r.states}, {"pruned", r.pruned}, {"candidates", cands}};
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    out << doc.dump() << "\n";
    if (!out) fail("checkpoint {}: cannot write {}", path_, tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) fail("checkpoint {}: cannot replace it: {}", path_, ec.message());
}

}  // namespace yirage::search
