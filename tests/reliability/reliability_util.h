// Helpers of the reliability tests: small graphs for the faulty backend and private cache files.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "ir/ir.h"

namespace yirage::reliability_test {

// relu(x + w) over [rows, cols] inputs.
inline ir::KernelGraph add_relu(int64_t rows = 4, int64_t cols = 8) {
  ir::KernelGraph g;
  auto x = g.input("x", {rows, cols}, ir::DType::f32);
  auto w = g.input("w", {rows, cols}, ir::DType::f32);
  g.mark_output(g.relu(g.add(x, w)), "y");
  return g;
}

// add_relu with one more node, unused, named `name`: a different program that computes the same.
inline ir::KernelGraph with_extra_node(const std::string& name, int64_t rows = 4,
                                       int64_t cols = 8) {
  ir::KernelGraph g;
  auto x = g.input("x", {rows, cols}, ir::DType::f32);
  auto w = g.input("w", {rows, cols}, ir::DType::f32);
  g.add_node(ir::UnaryOp{ir::UnaryFn::neg}, {x}, name);
  g.mark_output(g.relu(g.add(x, w)), "y");
  return g;
}

// "tuning.sqlite" in a new private folder.
inline std::filesystem::path fresh_cache() {
  std::string dir = (std::filesystem::temp_directory_path() / "yirage-reliability-XXXXXX").string();
  if (!mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
  return std::filesystem::path(dir) / "tuning.sqlite";
}

}  // namespace yirage::reliability_test
