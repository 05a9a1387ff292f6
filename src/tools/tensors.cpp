#include "tools/tensors.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "support/error.h"
#include "tools/npy.h"

namespace yirage::tools {
namespace {

// Ids for ops that only carry integers along (concat, reshape, ...) are kept small.
constexpr int32_t kSmallIdBound = 16;
constexpr size_t kFirstCount = 8;

// The exclusive upper bound valid for every consumer of i32 tensor `ids`.
int32_t id_bound(const ir::KernelGraph& graph, ir::TensorRef ids) {
  int64_t bound = kSmallIdBound;
  bool bounded_by_consumer = false;
  auto tighten = [&](int64_t limit) {
    bound = bounded_by_consumer ? std::min(bound, limit) : limit;
    bounded_by_consumer = true;
  };
  for (const ir::Node& node : graph.nodes()) {
    bool reads_as_indices = node.inputs.size() > 1 && node.inputs[1] == ids;
    if (!reads_as_indices) continue;
    if (std::holds_alternative<ir::EmbeddingOp>(node.op))
      tighten(graph.type(node.inputs[0]).dims.at(0));
    if (std::holds_alternative<ir::RopeOp>(node.op)) tighten(graph.type(ids).dims.at(0));
  }
  return int32_t(std::clamp<int64_t>(bound, 1, std::numeric_limits<int32_t>::max()));
}

const std::string& input_name(const ir::KernelGraph& graph, ir::TensorRef input) {
  return graph.node(input.node).name;
}

}  // namespace

std::vector<ir::HostTensor> random_inputs(const ir::KernelGraph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef input : graph.inputs()) {
    ir::HostTensor& tensor = inputs.emplace_back(graph.type(input));
    ir::fill_random(tensor, rng, -1.0f, 1.0f, id_bound(graph, input));
  }
  ir::make_paged_attention_indices_valid(graph, inputs);
  return inputs;
}

std::vector<ir::HostTensor> load_inputs(const ir::KernelGraph& graph, const std::string& dir) {
  std::vector<ir::HostTensor> inputs;
  for (ir::TensorRef input : graph.inputs()) {
    const std::string& name = input_name(graph, input);
    std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
    if (!std::filesystem::exists(path)) fail("input '{}': {} does not exist", name, path);
    inputs.push_back(tensor_from_npy(read_npy(path), graph.type(input), name, path));
  }
  return inputs;
}

void save_outputs(const ir::KernelGraph& graph, const std::vector<ir::HostTensor>& outputs,
                  const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the directory: {}", dir, ec.message());
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string path = (std::filesystem::path(dir) / (graph.outputs()[i].name + ".npy")).string();
    write_npy(path, npy_from_tensor(outputs[i]));
  }
}

TensorSummary summarize(const ir::HostTensor& tensor) {
  TensorSummary summary;
  summary.min = std::numeric_limits<double>::infinity();
  summary.max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < tensor.size(); ++i) {
    double value = tensor.get(i);
    if (size_t(i) < kFirstCount) summary.first.push_back(float(value));
    if (std::isnan(value)) {
      ++summary.nan_count;
    } else if (std::isinf(value)) {
      ++summary.inf_count;
    } else {
      summary.min = std::min(summary.min, value);
      summary.max = std::max(summary.max, value);
      sum += value;
      ++finite;
    }
  }
  if (finite == 0) {
    summary.min = summary.max = summary.mean = std::numeric_limits<double>::quiet_NaN();
  } else {
    summary.mean = sum / double(finite);
  }
  summary.abs_max = std::max(std::abs(summary.min), std::abs(summary.max));
  return summary;
}

}  // namespace yirage::tools
