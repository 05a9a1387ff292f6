// The phase model of one kernel and of a µGraph's kernels in sequence (cost_model.h).
#include "cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include "ir/block_graph.h"
#include "support/error.h"

namespace yirage::cost {
namespace {

double bytes_of(const ir::TensorType& t) {
  return double(ir::num_elements(t.dims)) * double(ir::dtype_size(t.dtype));
}

bool is_matmul(const ir::Op& op) {
  return std::holds_alternative<ir::MatmulOp>(op) || std::holds_alternative<ir::QuantMatmulOp>(op);
}

// A matmul's 2·M·N·K; any other op one flop per element it reads or writes, whichever is more.
double op_flops(bool matmul, const std::vector<const ir::TensorType*>& in,
                const ir::TensorType& out) {
  if (matmul) return 2.0 * double(ir::num_elements(out.dims)) * double(in.at(0)->dims.back());
  double elements = double(ir::num_elements(out.dims));
  for (const ir::TensorType* t : in)
    elements = std::max(elements, double(ir::num_elements(t->dims)));
  return elements;
}

// Σ over waves of the distinct tiles of `it` its blocks load (the block's coordinates on the grid
// axes that partition the operand tell its tiles apart).
double distinct_tiles_per_wave(const ir::GridDims& grid, const ir::InputIteratorOp& it,
                               int64_t units) {
  const auto& e = grid.extent;
  const int64_t blocks = grid.blocks(), wave = std::min(blocks, units);
  double tiles = 0;
  std::vector<int64_t> seen;
  for (int64_t first = 0; first < blocks; first += wave) {
    seen.clear();
    for (int64_t b = first; b < std::min(blocks, first + wave); ++b) {
      const int64_t coord[ir::kGridAxes] = {b % e[0], b / e[0] % e[1], b / (e[0] * e[1])};
      int64_t tile = 0;
      for (int a = ir::kGridAxes; a-- > 0;)
        tile = tile * e[size_t(a)] + (it.imap[size_t(a)] == ir::kReplicate ? 0 : coord[a]);
      seen.push_back(tile);
    }
    std::sort(seen.begin(), seen.end());
    tiles += double(std::unique(seen.begin(), seen.end()) - seen.begin());
  }
  return tiles;
}

double positive(const nlohmann::json& s, const char* key, const std::string& name) {
  if (!s.contains(key) || !s[key].is_number() || !(s[key].get<double>() > 0))
    fail("device '{}': capabilities.search.{} must be a positive number", name, key);
  return s[key].get<double>();
}

}  // namespace

double Device::flops_for(ir::DType dtype) const {
  auto it = flops_per_second_by_dtype.find(dtype);
  return it != flops_per_second_by_dtype.end() ? it->second : flops_per_second;
}

double Device::unit_bytes_per_second() const {
  double fastest = dram_bytes_per_second;
  for (const MemoryLevel& level : levels) fastest = std::max(fastest, level.bytes_per_second);
  return kUnitShare * fastest / double(parallel_units);
}

double Device::reread_bytes_per_second(double bytes) const {
  for (const MemoryLevel& level : levels)
    if (bytes <= double(level.capacity_bytes)) return level.bytes_per_second;
  return dram_bytes_per_second;
}

Device device_from_capabilities(const nlohmann::json& capabilities, const std::string& name) {
  if (!capabilities.is_object() || !capabilities.contains("search") ||
      !capabilities["search"].is_object())
    fail("device '{}': its description has no capabilities.search", name);
  const nlohmann::json& s = capabilities["search"];
  Device d;
  d.parallel_units = int64_t(positive(s, "parallel_units", name));
  d.dram_bytes_per_second = positive(s, "bytes_per_second", name);
  d.flops_per_second = positive(s, "flops_per_second", name);
  d.launch_seconds = positive(s, "launch_seconds", name);
  d.dependent_launch = s.value("dependent_launch", false);
  // Cache sizes some backends state: re-reads from them at a guessed multiple of DRAM's rate.
  const std::pair<const char*, double> caches[] = {{"l2_bytes", 4.0}, {"l3_bytes", 2.0}};
  for (const auto& [key, speedup] : caches)
    if (capabilities.contains(key) && capabilities[key].is_number_integer() &&
        capabilities[key].get<int64_t>() > 0)
      d.levels.push_back({std::string(key).substr(0, 2), capabilities[key].get<int64_t>(),
                          d.dram_bytes_per_second * speedup});
  std::sort(d.levels.begin(), d.levels.end(), [](const MemoryLevel& a, const MemoryLevel& b) {
    return a.capacity_bytes < b.capacity_bytes;
  });
  return d;
}

nlohmann::json to_json(const Device& d) {
  nlohmann::json levels = nlohmann::json::array();
  for (const MemoryLevel& l : d.levels)
    levels.push_back({{"name", l.name},
                      {"capacity_bytes", l.capacity_bytes},
                      {"bytes_per_second", l.bytes_per_second}});
  nlohmann::json by_dtype = nlohmann::json::object();
  for (const auto& [dtype, rate] : d.flops_per_second_by_dtype)
    by_dtype[std::string(ir::dtype_name(dtype))] = rate;
  return {{"parallel_units", d.parallel_units},
          {"dram_bytes_per_second", d.dram_bytes_per_second},
          {"levels", levels},
          {"flops_per_second", d.flops_per_second},
          {"flops_per_second_by_dtype", by_dtype},
          {"launch_seconds", d.launch_seconds},
          {"dependent_launch", d.dependent_launch},
          {"source", d.source}};
}

Device device_from_json(const nlohmann::json& doc) {
  Device d;
  d.parallel_units = doc.at("parallel_units").get<int64_t>();
  d.dram_bytes_per_second = doc.at("dram_bytes_per_second").get<double>();
  for (const nlohmann::json& l : doc.at("levels"))
    d.levels.push_back({l.at("name").get<std::string>(), l.at("capacity_bytes").get<int64_t>(),
                        l.at("bytes_per_second").get<double>()});
  d.flops_per_second = doc.at("flops_per_second").get<double>();
  for (const auto& [name, rate] : doc.at("flops_per_second_by_dtype").items())
    if (auto dtype = ir::parse_dtype(name))
      d.flops_per_second_by_dtype[*dtype] = rate.get<double>();
  d.launch_seconds = doc.at("launch_seconds").get<double>();
  d.dependent_launch = doc.value("dependent_launch", false);
  d.source = doc.value("source", "calibration");
  if (d.parallel_units < 1 || !(d.dram_bytes_per_second > 0) || !(d.flops_per_second > 0) ||
      !(d.launch_seconds >= 0))
    fail("cost model device: non-positive rate in {}", doc.dump());
  return d;
}

Phases& Phases::operator+=(const Phases& o) {
  launch += o.launch;
  ramp_up += o.ramp_up;
  steady += o.steady;
  ramp_down += o.ramp_down;
  collective += o.collective;
  overlap += o.overlap;
  kernels += o.kernels;
  return *this;
}

nlohmann::json to_json(const Phases& p) {
  return {{"launch", p.launch},       {"ramp_up", p.ramp_up},       {"steady", p.steady},
          {"ramp_down", p.ramp_down}, {"collective", p.collective}, {"overlap", p.overlap},
          {"kernels", p.kernels},     {"total", p.total()}};
}

KernelMapping map_kernel(const ir::BlockGraph& body, const Device& device) {
  KernelMapping m;
  m.blocks = body.grid().blocks();
  m.waves = (m.blocks + device.parallel_units - 1) / device.parallel_units;
  m.iterations = body.forloop_range();
  for (const ir::TensorType& out : body.output_types()) m.store_bytes += bytes_of(out);
  const auto& nodes = body.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const ir::BlockNode& node = nodes[id];
    const ir::BlockPhase phase = body.phase(int32_t(id));
    const bool in_loop = phase == ir::BlockPhase::in_loop;
    if (const auto* it = std::get_if<ir::InputIteratorOp>(&node.op)) {
      const double loads = in_loop ? double(m.iterations) : 1;
      const double bytes = bytes_of(node.tile) * loads *
                           distinct_tiles_per_wave(body.grid(), *it, device.parallel_units);
      const double operand = bytes_of(body.operands().at(size_t(it->operand)));
      const double first = std::min(bytes, operand);
      if (in_loop) m.block_bytes_per_iteration += bytes_of(node.tile);
      m.load_bytes += bytes;
      m.dram_load_bytes += first;
      m.load_seconds += first / device.dram_bytes_per_second +
                        (bytes - first) / device.reread_bytes_per_second(operand);
      continue;
    }
    if (phase == ir::BlockPhase::saver) continue;
    std::vector<const ir::TensorType*> in;
    for (int32_t i : node.inputs) in.push_back(&nodes[size_t(i)].tile);
    double flops = 0;
    if (auto shared = ir::shared_kernel_op(node.op)) {
      // Counted at the default rate: scaled by how much slower or faster the tile's dtype runs.
      const double rate = device.flops_for(node.tile.dtype);
      flops = op_flops(is_matmul(*shared), in, node.tile) * device.flops_per_second / rate;
    } else if (std::holds_alternative<ir::AccumulatorOp>(node.op)) {
      // An accumulator folds once per iteration, in the loop, so it counts with the loop's work;
      // a matmul's sum is the GEMM's own accumulation.
      if (!std::holds_alternative<ir::MatmulOp>(nodes[size_t(node.inputs[0])].op))
        m.flops_per_block_iteration += double(ir::num_elements(node.tile.dims));
      continue;
    } else {
      flops = op_flops(false, in, node.tile);
    }
    (in_loop ? m.flops_per_block_iteration : m.post_loop_flops_per_block) += flops;
  }
  return m;
}

Phases kernel_phases(const ir::BlockGraph& body, const Device& device) {
  const KernelMapping m = map_kernel(body, device);
  // One block runs on one parallel unit; flops are counted at the default rate (map_kernel
  // scaled those of other dtypes).
  const double unit_flops = device.flops_per_second / double(device.parallel_units);
  const double slots = double(m.waves) * double(m.iterations);
  // One wave's loads of one iteration: the device's share of them, or one block's own in-loop
  // tiles through its unit's port, whichever takes longer.
  const double unit_rate = device.unit_bytes_per_second();
  const double load = std::max(m.load_seconds / slots, m.block_bytes_per_iteration / unit_rate);
  const double compute = m.flops_per_block_iteration / unit_flops;
  const double drain = compute + m.post_loop_flops_per_block / unit_flops +
                       m.store_bytes / device.dram_bytes_per_second / double(m.waves);
  Phases p;
  p.kernels = 1;
  p.launch = device.launch_seconds;
  p.ramp_up = double(m.waves) * load;
  p.steady = double(m.waves) * double(m.iterations - 1) * std::max(load, compute);
  p.ramp_down = double(m.waves) * drain;
  return p;
}

Phases node_phases(const ir::KernelGraph& graph, const ir::Node& node, const Device& device) {
  if (std::holds_alternative<ir::InputOp>(node.op) ||
      std::holds_alternative<ir::ReshapeOp>(node.op))
    return {};
  if (const auto* fused = std::get_if<ir::FusedOp>(&node.op))
    return kernel_phases(*fused->body, device);
  double load = 0, store = 0, flops = 0;
  std::vector<const ir::TensorType*> in;
  for (const ir::TensorRef& t : node.inputs) {
    load += bytes_of(graph.type(t));
    in.push_back(&graph.type(t));
  }
  ir::DType dtype = ir::DType::f32;
  for (const ir::TensorType& out : node.outputs) {
    store += bytes_of(out);
    flops += op_flops(is_matmul(node.op), in, out);
    dtype = out.dtype;
  }
  Phases p;
  p.kernels = 1;
  p.launch = device.launch_seconds;
  p.ramp_up = load / device.dram_bytes_per_second;
  p.ramp_down = flops / device.flops_for(dtype) + store / device.dram_bytes_per_second;
  return p;
}

// What joining `consumer` to `producer` hides (cost_model.h).
static double hidden(const Phases& producer, const Phases& consumer, Binding binding) {
  switch (binding) {
    case Binding::sequential: return 0;
    case Binding::dependent_launch:
      // The consumer's launch runs while the producer drains.
      return std::min(consumer.launch, producer.ramp_down);
    case Binding::pipelined: {
      // The consumer starts once the producer's first tile is in: after it, the two remainders
      // run side by side, and the pair takes the longer. Its launch hides as well.
      const double producer_rest = producer.total() - producer.launch - producer.ramp_up;
      const double consumer_rest = consumer.total() - consumer.launch;
      return std::min(producer_rest, consumer_rest) + consumer.launch;
    }
  }
  return 0;
}

Phases join(const Phases& producer, const Phases& consumer, Binding binding) {
  Phases p = producer;
  p += consumer;
  p.overlap += hidden(producer, consumer, binding);
  return p;
}

Phases mugraph_phases(const ir::KernelGraph& graph, const Device& device) {
  Phases total, previous;
  int32_t previous_id = -1;
  const auto& nodes = graph.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const ir::Node& node = nodes[id];
    const Phases p = node_phases(graph, node, device);
    if (p.kernels == 0) continue;
    Binding binding = Binding::sequential;
    if (previous_id >= 0 && device.dependent_launch) {
      binding = Binding::dependent_launch;
      const bool reads_previous =
          std::any_of(node.inputs.begin(), node.inputs.end(),
                      [&](const ir::TensorRef& t) { return t.node == previous_id; });
      // A split's finish reads its partials as they land (cost_model.h).
      if (reads_previous && std::holds_alternative<ir::FusedOp>(node.op) &&
          std::holds_alternative<ir::FusedOp>(nodes[size_t(previous_id)].op))
        binding = Binding::pipelined;
    }
    total += p;
    if (previous_id >= 0) total.overlap += hidden(previous, p, binding);
    previous = p;
    previous_id = int32_t(id);
  }
  return total;
}

}  // namespace yirage::cost
