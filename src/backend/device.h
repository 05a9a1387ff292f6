// What a backend's device is, apart from how it runs anything: its name, fingerprint and
// capabilities (the search space among them), and whether it can run here. A header of its own
// so that the stages that only read a device's description (search/, cost/) need not include the
// executing interface of backend.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace yirage::backend {

struct DeviceDescription {
  std::string name;         // "AMD EPYC 9B14", "NVIDIA H200", ...
  std::string fingerprint;  // stable id of this exact device kind; keys the tuning cache
  // Facts the search and the code generators read: cores, vector ISA, cache sizes, shared
  // memory, compute capability, ... Keys are backend-specific and documented in each backend,
  // except "search", which every backend that can run fused kernels fills the same way: the
  // space the superoptimizer may search (src/search), an object of
  //   max_tile_bytes_in_loop  optional: bytes of the tiles one block holds in one loop iteration
  //   max_tile_bytes_total    bytes of all of one block's tiles (loop body, accumulators, after,
  //                           and every pipeline buffer of the tiles the loop walks)
  //   pipeline_stages         optional (1): buffers the lowering keeps of each walked tile
  //   in_registers            optional: the tiles the lowering keeps out of the block's memory,
  //                           by rule names of ir::RegisterTiles ("single_use_elementwise",
  //                           "summed_into_accumulator")
  //   max_grid_blocks         blocks in one fused kernel's grid
  //   parallel_units          blocks that run at once (cores, SMs)
  //   bytes_per_second, flops_per_second, launch_seconds
  //                           rough rates for ranking candidates until they are profiled
  //   streamed_weights        optional: the weight tiles a product of few rows reads from memory
  //                           without holding them ({max_rows, k_multiple, column_widths,
  //                           max_staged_bytes, max_blocks}; ir::StreamedWeights says which)
  // "memory_bytes", the device's memory, which compile() checks every graph against
  // (check_fits_memory); and "library_matmul", which a backend that can run kernel-level matmuls
  // as library calls (ir::MatmulOp::library) fills the same way: {"name": "OpenBLAS 0.3.21",
  // "dtypes": ["f32"], ...} when it can, {"unavailable": why} when its library is missing. The
  // tuner measures such variants of every candidate against the generated ones. Likewise
  // "quant_matmul_prefetch": true where the backend honours ir::QuantMatmulOp::prefetch, and the
  // tuner measures each candidate with quant_matmuls both ways; and "quant_matmul_formats", the
  // weight formats (ir::quant_format_name) its quant_matmul reads, on backends that lower it.
  nlohmann::json capabilities;
  // Whether choosing among candidate µGraphs by their measured time on this backend means
  // anything: tune::optimize runs on it, and its winners are cached and looked up. False for the
  // reference backend, the literal executor, whose times rank nothing that runs elsewhere.
  bool tunable = true;
};

struct Availability {
  bool available = false;
  std::string reason;  // why not, when not available
};

}  // namespace yirage::backend
