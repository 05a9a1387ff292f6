// YiRage cost model: predicted time of a µGraph, in the phases of COMET's compound-op model.
//
// After Negi et al., "COMET: A Framework for Modeling Compound Operation Dataflows with Explicit
// Collectives" (arXiv 2509.00599). This stage depends on the IR only; the search ranks its
// candidates by it, and the tuner (through the search) feeds it calibrated rates.
//
// The mapping of one fused kernel (ir::BlockGraph):
//   spatial tiles   the grid's blocks, run in waves of `parallel_units` consecutive blocks
//                   (x fastest);
//   temporal tiles  the for-loop's iterations, which every block of a wave runs in step;
//   memory levels   each input iterator crosses from the level that holds its operand into the
//                   block's on-chip memory (shared memory, L1). Within a wave, blocks that load
//                   the same tile share one read (the cache serves the others). An operand's
//                   first read of each byte comes from DRAM (compulsory traffic); every further
//                   read comes from the smallest level whose capacity holds the whole operand
//                   (Device::levels), else DRAM again. Tiles between ops stay on chip (registers,
//                   shared memory): they cost compute only. A block still pulls every tile it
//                   loads, shared or not, through its own unit's port, which draws at most
//                   kUnitShare times its share of the fastest level's rate
//                   (Device::unit_bytes_per_second): a wave's loads of one iteration take at
//                   least one block's bytes at that rate, so a kernel of a few blocks, each
//                   walking a whole weight, is not costed as if the device's whole bandwidth
//                   served it;
//   write-back      each saver writes its tile to DRAM once, after the loop.
// Compute: a matmul costs 2·M·N·K per tile at the dtype's peak rate; other ops one flop per
// element they read or write, whichever is more; accumulators one per element per iteration
// (a matmul's own sum costs nothing more: a GEMM adds into its output tile). A block runs on one
// of the parallel units, at flops_per_second / parallel_units.
//
// Phases of one kernel, per wave, with double buffering (tile i+1 loads while tile i computes):
//   ramp_up    the first tile's fill: one iteration's loads, nothing to overlap them with;
//   steady     (iterations - 1) × max(memory window, compute) of one iteration;
//   ramp_down  the drain: the last iteration's compute, the post-loop ops, and the savers'
//              write-back;
// summed over the waves, plus `launch` (Device::launch_seconds) once per kernel. A loop of one
// iteration is therefore load + compute + store, with no overlap. A kernel-level op (a library
// GEMM, an unfused elementwise op) is one such iteration over the whole device: its internal
// tiling is not known here, so no overlap is credited to it. Inputs and reshapes cost nothing.
//
// Kernels in sequence (join()): sequential kernels add up, each with its launch; with dependent
// launch (Device::dependent_launch, CUDA's programmatic dependent launch) the consumer's launch
// hides under its producer's drain; a pipelined consumer (Binding::pipelined: split-K finish
// kernels, cluster pairs) starts after its producer's ramp-up and overlaps the producer's steady
// state, so the pair costs the producer's ramp-up + max of the two remainders. µGraphs bind a
// split-K finish to its partials as pipelined only where the device says it can
// (Device::dependent_launch); elsewhere every pair is sequential.
//
// Collectives (collective_seconds()) use the α-β model per link: a message of n bytes costs
// α + n/β per step; ring algorithms take 2(p-1) steps of n/p (all-reduce) or p-1 (all-gather),
// tree algorithms 2·⌈log2 p⌉ steps of n (all-reduce: reduce then broadcast) or ⌈log2 p⌉ steps
// with doubling messages (all-gather, recursive doubling); the cheaper is taken, so small
// messages go by tree and large ones by ring. tensor_parallel_matmul() costs one matmul split
// across p devices along N (an all-gather of the output) or K (an all-reduce of the partial
// outputs). The search itself does not yet enumerate tensor-parallel layouts: it can call these
// to compare a split against other layouts, and the report's `collective` phase is 0 for the
// single-device µGraphs it returns today.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/ir.h"

namespace yirage::cost {

// A memory level a tile may be read from after its first (DRAM) read.
struct MemoryLevel {
  std::string name;            // "l2", "llc", ...
  int64_t capacity_bytes = 0;  // an operand up to this size is re-read from here
  double bytes_per_second = 0;
};

// The rates the model reads: a backend's rough capabilities["search"] rates, or a calibration's.
struct Device {
  int64_t parallel_units = 1;
  double dram_bytes_per_second = 0;
  std::vector<MemoryLevel> levels;                        // ascending capacity; DRAM is not listed
  double flops_per_second = 0;                            // the default peak
  std::map<ir::DType, double> flops_per_second_by_dtype;  // overrides where measured
  double launch_seconds = 0;
  bool dependent_launch = false;        // a consumer may launch before its producer ends
  std::string source = "capabilities";  // "capabilities" or "calibration"

  double flops_for(ir::DType dtype) const;
  // The rate one parallel unit draws its tiles at: kUnitShare times its share of the fastest
  // level's (or DRAM's) rate.
  double unit_bytes_per_second() const;
  // The bandwidth of re-reading an operand of `bytes`: the smallest level that holds it, else DRAM.
  double reread_bytes_per_second(double bytes) const;
};

// How many times its share of the device's bandwidth one parallel unit can draw: an SM or a core
// may run ahead of the others, but not by much. A chosen constant, not yet calibrated (`yirage
// calibrate` measures the whole device's rates only); bench/results/cost_model_h100.txt shows
// its effect on the H100's measured candidates.
inline constexpr double kUnitShare = 2.0;

// From a device description's capabilities["search"] (bytes_per_second, flops_per_second,
// launch_seconds, parallel_units) and its optional cache sizes (l2_bytes, l3_bytes: levels at
// four and two times the DRAM rate, a rough guess until calibrated). Throws yirage::Error
// naming a missing or non-positive key.
Device device_from_capabilities(const nlohmann::json& capabilities, const std::string& name);
nlohmann::json to_json(const Device& device);
Device device_from_json(const nlohmann::json& doc);

// Predicted seconds, by phase. total() = launch + ramp_up + steady + ramp_down + collective
// - overlap, where overlap is what joining kernels hid (dependent launches, pipelined pairs).
struct Phases {
  double launch = 0, ramp_up = 0, steady = 0, ramp_down = 0, collective = 0, overlap = 0;
  int kernels = 0;
  double total() const { return launch + ramp_up + steady + ramp_down + collective - overlap; }
  Phases& operator+=(const Phases& other);
};
nlohmann::json to_json(const Phases& phases);  // each phase, "kernels" and "total", in seconds

// One kernel's mapping, as the model reads it (for reports and tests).
struct KernelMapping {
  int64_t blocks = 1, waves = 1, iterations = 1;
  double load_bytes = 0;       // every iterator's reads, summed over waves and iterations
  double dram_load_bytes = 0;  // of which compulsory, from DRAM
  double store_bytes = 0;      // the savers' write-back
  double flops_per_block_iteration = 0;
  double post_loop_flops_per_block = 0;
  double load_seconds = 0;  // every load, at the bandwidth of the level it comes from
  // One block's loads of one loop iteration (its in-loop tiles, shared or not with other blocks).
  double block_bytes_per_iteration = 0;
};
KernelMapping map_kernel(const ir::BlockGraph& body, const Device& device);

// The phases of one fused kernel.
Phases kernel_phases(const ir::BlockGraph& body, const Device& device);
// The phases of one kernel-level node of `graph` (a fused node's body, or one op); zero for
// inputs and reshapes.
Phases node_phases(const ir::KernelGraph& graph, const ir::Node& node, const Device& device);

// How a consumer kernel follows its producer.
enum class Binding { sequential, dependent_launch, pipelined };
// The two kernels together: see the header comment.
Phases join(const Phases& producer, const Phases& consumer, Binding binding);

// A whole µGraph: its kernels in node order, each joined to the one before (pipelined where a
// fused node consumes a fused node's output on a device with dependent launch).
Phases mugraph_phases(const ir::KernelGraph& graph, const Device& device);

// ==== collectives ================================================================================

enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast };
enum class Algorithm { ring, tree };
std::string_view collective_name(Collective c);
std::string_view algorithm_name(Algorithm a);

struct Link {
  double latency_seconds = 0;   // α, per message
  double bytes_per_second = 0;  // β, per link
};

struct CollectiveCost {
  Algorithm algorithm = Algorithm::ring;
  double seconds = 0;
};
// `bytes` is the full tensor's size (what each rank holds after an all-gather or all-reduce).
double collective_seconds(Collective c, Algorithm a, double bytes, int ranks, const Link& link);
// The cheaper algorithm for this size; 0 seconds for one rank.
CollectiveCost best_collective(Collective c, double bytes, int ranks, const Link& link);

// One [M, K] x [K, N] matmul split across `ranks` devices along N (each computes [M, N/ranks],
// then an all-gather) or K (each computes a partial [M, N] from its K/ranks slice, then an
// all-reduce). Per device: launch, then the matmul as one kernel-level op, then the collective.
enum class SplitDim { n, k };
Phases tensor_parallel_matmul(int64_t m, int64_t n, int64_t k, ir::DType dtype, int ranks,
                              SplitDim split, const Device& device, const Link& link);

}  // namespace yirage::cost
