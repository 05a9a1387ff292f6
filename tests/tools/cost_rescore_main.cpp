// Bench-only tool: the cost model's prediction for every candidate a tuning cache holds, under an
// H200's description (tests/cuda/h200_description.h: its nominal rates, not a calibration), so
// that bench/cost_model.py --rescore can score today's model against times a GPU measured earlier.
//
//   yirage_cost_rescore CACHE.sqlite   ->   entry_id <TAB> idx <TAB> predicted seconds, a line each
//
// A candidate whose stored graph no longer parses is skipped with a line on stderr. The file is
// read through SQLite read-only rather than tune::TuningCache, which opens for writing (WAL mode)
// and would touch a cache committed under bench/results.
#include <iostream>
#include <string>

#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include "cost/cost_model.h"
#include "cuda/h200_description.h"
#include "ir/serialize.h"
#include "search/search.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: yirage_cost_rescore CACHE.sqlite\n";
    return 2;
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::cerr << "yirage_cost_rescore: cannot open " << argv[1] << ": " << sqlite3_errmsg(db)
              << "\n";
    sqlite3_close(db);
    return 1;
  }
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT entry_id, idx, graph_json FROM candidates ORDER BY entry_id, idx",
                         -1, &s, nullptr) != SQLITE_OK) {
    std::cerr << "yirage_cost_rescore: " << argv[1] << " is no tuning cache: " << sqlite3_errmsg(db)
              << "\n";
    sqlite3_close(db);
    return 1;
  }
  const yirage::cost::Device rates =
      yirage::search::search_space(yirage::testing::h200_description()).rates;
  while (sqlite3_step(s) == SQLITE_ROW) {
    const std::string entry = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    const int idx = sqlite3_column_int(s, 1);
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
    try {
      const yirage::ir::KernelGraph graph =
          yirage::ir::from_json(nlohmann::json::parse(text ? text : ""));
      std::cout << entry << '\t' << idx << '\t'
                << yirage::cost::mugraph_phases(graph, rates).total() << '\n';
    } catch (const std::exception& e) {
      std::cerr << "yirage_cost_rescore: entry " << entry << " candidate " << idx << ": "
                << e.what() << "\n";
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return 0;
}
