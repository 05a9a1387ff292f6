// The cost model's phase arithmetic and collectives, each against numbers worked out by hand in
// the comments (src/cost/cost_model.h states the model).
#include "cost/cost_model.h"

#include <gtest/gtest.h>

#include "block_test_graphs.h"
#include "support/error.h"

namespace yirage::cost {
namespace {

using ir::AccumFn;
using ir::kReplicate;

// Round numbers: 2 units, 1 GB/s, 1 GFLOP/s, 1 µs launches, no cache levels.
Device round_device(int64_t units = 2) {
  Device d;
  d.parallel_units = units;
  d.dram_bytes_per_second = 1e9;
  d.flops_per_second = 1e9;
  d.launch_seconds = 1e-6;
  return d;
}

constexpr double kTol = 1e-15;

// out[8, 16] = Σ over the loop of exp(x[8, 64]): grid x = 2 over the rows, a loop of 4 over the
// columns, tiles of [4, 16] f32 (256 B).
ir::BlockGraph exp_sum_body() {
  ir::BlockGraph b({{2, 1, 1}}, 4, {{ir::DType::f32, {8, 64}}});
  const int32_t x = b.iterator(0, {0, kReplicate, kReplicate}, 1);
  const int32_t e = b.add(ir::UnaryOp{ir::UnaryFn::exp}, {x});
  b.save(b.accumulate(AccumFn::sum, e), {0, kReplicate, kReplicate});
  return b;
}

TEST(CostModel, KernelOpIsLoadComputeStore) {
  // [4, 8] x [8, 16] f32: loads (32 + 128)·4 = 640 B, 2·4·16·8 = 1024 flops, stores 64·4 = 256 B.
  ir::KernelGraph g;
  const ir::TensorRef a = g.input("a", {4, 8}, ir::DType::f32);
  const ir::TensorRef b = g.input("b", {8, 16}, ir::DType::f32);
  g.mark_output(g.matmul(a, b));
  const Phases p = mugraph_phases(g, round_device());
  EXPECT_EQ(p.kernels, 1);
  EXPECT_NEAR(p.launch, 1e-6, kTol);
  EXPECT_NEAR(p.ramp_up, 640e-9, kTol);
  EXPECT_NEAR(p.steady, 0, kTol);
  EXPECT_NEAR(p.ramp_down, 1024e-9 + 256e-9, kTol);
  EXPECT_NEAR(p.total(), 2.92e-6, kTol);
}

TEST(CostModel, FusedKernelPhases) {
  // One wave of 2 blocks, 4 iterations. Loads: 4 iterations × 2 distinct tiles × 256 B = 2048 B,
  // the operand once, all from DRAM: 2.048 µs, 0.512 µs per iteration. Compute per block and
  // iteration: exp and the sum, 64 elements each = 128 flops at 1e9 / 2 units = 0.256 µs.
  // ramp_up = 0.512 µs; steady = 3 × max(0.512, 0.256) = 1.536 µs; ramp_down = the last compute
  // 0.256 µs + write-back of [8, 16] f32 = 512 B, 0.512 µs.
  const ir::BlockGraph body = exp_sum_body();
  const KernelMapping m = map_kernel(body, round_device());
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.waves, 1);
  EXPECT_EQ(m.iterations, 4);
  EXPECT_DOUBLE_EQ(m.load_bytes, 2048);
  EXPECT_DOUBLE_EQ(m.dram_load_bytes, 2048);
  EXPECT_DOUBLE_EQ(m.store_bytes, 512);
  EXPECT_DOUBLE_EQ(m.flops_per_block_iteration, 128);
  const Phases p = kernel_phases(body, round_device());
  EXPECT_NEAR(p.launch, 1e-6, kTol);
  EXPECT_NEAR(p.ramp_up, 0.512e-6, kTol);
  EXPECT_NEAR(p.steady, 1.536e-6, kTol);
  EXPECT_NEAR(p.ramp_down, 0.768e-6, kTol);
  EXPECT_NEAR(p.total(), 3.816e-6, kTol);
}

TEST(CostModel, ComputeBoundSteadyStateAndWaves) {
  // One unit: 2 waves of 1 block. Each wave loads its own tiles: 4 × 256 B, 0.256 µs per
  // iteration; compute 128 flops at 1e9 = 0.128 µs... so memory still bounds. At 1e8 flops/s the
  // compute, 1.28 µs per iteration, bounds the steady state: 2 waves × 3 × 1.28 µs = 7.68 µs.
  Device d = round_device(1);
  d.flops_per_second = 1e8;
  const Phases p = kernel_phases(exp_sum_body(), d);
  EXPECT_NEAR(p.ramp_up, 2 * 0.256e-6, kTol);
  EXPECT_NEAR(p.steady, 7.68e-6, 1e-14);
  // Drain per wave: 1.28 µs of compute + half the 512 B write-back, 0.256 µs.
  EXPECT_NEAR(p.ramp_down, 2 * (1.28e-6 + 0.256e-6), 1e-14);
}

TEST(CostModel, RereadsComeFromTheLevelThatHoldsTheOperand) {
  // out = Σ x·y, y [1, 64] replicated over the grid. One unit, so 2 waves, each loading y's
  // 4 tiles of 64 B: 512 B, of which the operand's 256 B from DRAM (0.256 µs) and 256 B re-read
  // from a 1 KiB level at 4 GB/s (0.064 µs). x: 2048 B from DRAM, 2.048 µs.
  ir::BlockGraph b({{2, 1, 1}}, 4, {{ir::DType::f32, {8, 64}}, {ir::DType::f32, {1, 64}}});
  const int32_t x = b.iterator(0, {0, kReplicate, kReplicate}, 1);
  const int32_t y = b.iterator(1, {kReplicate, kReplicate, kReplicate}, 1);
  const int32_t xy = b.add(ir::BinaryOp{ir::BinaryFn::mul}, {x, y});
  b.save(b.accumulate(AccumFn::sum, xy), {0, kReplicate, kReplicate});
  Device d = round_device(1);
  d.levels.push_back({"l2", 1024, 4e9});
  const KernelMapping m = map_kernel(b, d);
  EXPECT_DOUBLE_EQ(m.load_bytes, 2048 + 512);
  EXPECT_DOUBLE_EQ(m.dram_load_bytes, 2048 + 256);
  EXPECT_NEAR(m.load_seconds, 2.048e-6 + 0.256e-6 + 0.064e-6, kTol);
  // Without the level the re-read costs DRAM's rate.
  EXPECT_NEAR(map_kernel(b, round_device(1)).load_seconds, 2.048e-6 + 0.512e-6, kTol);
}

TEST(CostModel, AFewBlocksDrawOnlyTheirUnitsShareOfTheBandwidth) {
  // out = Σ x·y as above: per iteration the wave loads x's 2 tiles of 256 B and y's one shared
  // tile of 64 B, 576 B from DRAM at 1 GB/s: 0.576 µs. Each block pulls its own 256 + 64 B
  // through its unit's port, at kUnitShare (2) × 1 GB/s / units.
  ir::BlockGraph b({{2, 1, 1}}, 4, {{ir::DType::f32, {8, 64}}, {ir::DType::f32, {1, 64}}});
  const int32_t x = b.iterator(0, {0, kReplicate, kReplicate}, 1);
  const int32_t y = b.iterator(1, {kReplicate, kReplicate, kReplicate}, 1);
  b.save(b.accumulate(AccumFn::sum, b.add(ir::BinaryOp{ir::BinaryFn::mul}, {x, y})),
         {0, kReplicate, kReplicate});
  EXPECT_DOUBLE_EQ(map_kernel(b, round_device(8)).block_bytes_per_iteration, 320);
  // On 2 units a block draws 1 GB/s: 0.32 µs, under the wave's 0.576 µs, which bounds.
  EXPECT_NEAR(kernel_phases(b, round_device(2)).ramp_up, 0.576e-6, kTol);
  // On 8 units only 2 are busy, each at 0.25 GB/s: 1.28 µs an iteration, against compute of
  // 128 flops at 1e9 / 8 = 1.024 µs. ramp_up 1.28 µs, steady 3 × 1.28 µs.
  const Phases p = kernel_phases(b, round_device(8));
  EXPECT_NEAR(p.ramp_up, 1.28e-6, kTol);
  EXPECT_NEAR(p.steady, 3.84e-6, 1e-14);
}

TEST(CostModel, SlowerDtypeScalesCompute) {
  Device d = round_device();
  d.flops_per_second_by_dtype[ir::DType::f32] = 0.5e9;  // f32 at half the default peak
  // The exp doubles to 128 flop-equivalents; the accumulator is counted at the default rate.
  EXPECT_DOUBLE_EQ(map_kernel(exp_sum_body(), d).flops_per_block_iteration, 64 * 2 + 64);
  EXPECT_DOUBLE_EQ(d.flops_for(ir::DType::f16), 1e9);
}

TEST(CostModel, JoinBindings) {
  Phases a, b;
  a.kernels = b.kernels = 1;
  a.launch = b.launch = 1;
  a.ramp_up = 2, a.steady = 10, a.ramp_down = 3;  // 16
  b.ramp_up = 1, b.steady = 4, b.ramp_down = 2;   // 8
  EXPECT_DOUBLE_EQ(join(a, b, Binding::sequential).total(), 24);
  // The consumer's launch (1) hides under the producer's drain (3).
  EXPECT_DOUBLE_EQ(join(a, b, Binding::dependent_launch).total(), 23);
  // After a's launch and ramp-up (3), a's rest (13) and b's rest (7) overlap: 3 + 13 = 16.
  EXPECT_DOUBLE_EQ(join(a, b, Binding::pipelined).total(), 16);
  // A consumer longer than the producer's rest: 3 + max(13, 27) = 30.
  b.steady = 24;
  EXPECT_DOUBLE_EQ(join(a, b, Binding::pipelined).total(), 30);
  EXPECT_EQ(join(a, b, Binding::pipelined).kernels, 2);
}

TEST(CostModel, MugraphSkipsInputsAndReshapesAndJoinsByLaunch) {
  ir::KernelGraph g;
  const ir::TensorRef x = g.input("x", {4, 8}, ir::DType::f32);
  const ir::TensorRef e = g.exp(x);
  g.mark_output(g.exp(g.reshape(e, {8, 4})));
  // Each exp: 128 B in, 32 flops, 128 B out: 1 + 0.128 + 0.032 + 0.128 µs = 1.288 µs.
  Device d = round_device();
  const Phases p = mugraph_phases(g, d);
  EXPECT_EQ(p.kernels, 2);
  EXPECT_NEAR(p.total(), 2 * 1.288e-6, kTol);
  EXPECT_NEAR(p.overlap, 0, kTol);
  // With dependent launch the second launch hides under the first's drain (0.16 µs of it).
  d.dependent_launch = true;
  EXPECT_NEAR(mugraph_phases(g, d).overlap, 0.16e-6, kTol);
}

TEST(CostModel, FusedGraphMatchesItsKernel) {
  const ir::KernelGraph g = ir::testing::single_fused_graph(exp_sum_body(), "exp_sum");
  EXPECT_NEAR(mugraph_phases(g, round_device()).total(), 3.816e-6, kTol);
}

TEST(CostModel, DeviceFromCapabilities) {
  const nlohmann::json caps = {{"l2_bytes", 2 << 20},
                               {"l3_bytes", 32 << 20},
                               {"search",
                                {{"parallel_units", 16},
                                 {"bytes_per_second", 1e11},
                                 {"flops_per_second", 1e12},
                                 {"launch_seconds", 2e-6}}}};
  const Device d = device_from_capabilities(caps, "test");
  EXPECT_EQ(d.parallel_units, 16);
  ASSERT_EQ(d.levels.size(), 2u);
  EXPECT_EQ(d.levels[0].capacity_bytes, 2 << 20);
  EXPECT_DOUBLE_EQ(d.reread_bytes_per_second(1 << 20), 4e11);
  EXPECT_DOUBLE_EQ(d.reread_bytes_per_second(8 << 20), 2e11);
  EXPECT_DOUBLE_EQ(d.reread_bytes_per_second(64 << 20), 1e11);
  EXPECT_EQ(device_from_json(to_json(d)).levels.size(), 2u);
  nlohmann::json broken = caps;
  broken["search"].erase("launch_seconds");
  EXPECT_THROW(device_from_capabilities(broken, "test"), Error);
}

TEST(Collectives, AlphaBetaByHand) {
  const Link link{1e-6, 1e9};
  // Ring all-reduce of 1 MB over 4 ranks: 2·3 steps of (1 µs + 250 kB / 1 GB/s) = 1.506 ms.
  EXPECT_NEAR(collective_seconds(Collective::all_reduce, Algorithm::ring, 1e6, 4, link), 1.506e-3,
              1e-12);
  // Tree: 2·log2(4) steps of (1 µs + 1 MB / 1 GB/s) = 4.004 ms.
  EXPECT_NEAR(collective_seconds(Collective::all_reduce, Algorithm::tree, 1e6, 4, link), 4.004e-3,
              1e-12);
  EXPECT_EQ(best_collective(Collective::all_reduce, 1e6, 4, link).algorithm, Algorithm::ring);
  // 100 B: ring 6 × (1 µs + 25 ns) = 6.15 µs, tree 4 × 1.1 µs = 4.4 µs: latency-bound, tree.
  const CollectiveCost small = best_collective(Collective::all_reduce, 100, 4, link);
  EXPECT_EQ(small.algorithm, Algorithm::tree);
  EXPECT_NEAR(small.seconds, 4.4e-6, 1e-15);
  // Ring all-gather of 1 MB over 4 ranks: 3 × (1 µs + 250 µs) = 753 µs.
  EXPECT_NEAR(collective_seconds(Collective::all_gather, Algorithm::ring, 1e6, 4, link), 753e-6,
              1e-12);
  EXPECT_EQ(best_collective(Collective::all_gather, 1e6, 1, link).seconds, 0);
  EXPECT_THROW(collective_seconds(Collective::all_reduce, Algorithm::ring, 1, 2, Link{}), Error);
}

TEST(Collectives, TensorParallelMatmul) {
  // [4, 8] x [8, 16] f32 split over K on 2 ranks: each runs [4, 4] x [4, 16]: loads 320 B
  // (0.32 µs), 512 flops and 256 B stored (0.768 µs), then all-reduces the 256 B output:
  // ring 2 × (1 µs + 128 ns) = 2.256 µs (tree: 2 × 1.256 µs).
  const Link link{1e-6, 1e9};
  const Phases k =
      tensor_parallel_matmul(4, 16, 8, ir::DType::f32, 2, SplitDim::k, round_device(), link);
  EXPECT_NEAR(k.ramp_up, 0.32e-6, kTol);
  EXPECT_NEAR(k.ramp_down, 0.768e-6, kTol);
  EXPECT_NEAR(k.collective, 2.256e-6, kTol);
  EXPECT_NEAR(k.total(), 1e-6 + 0.32e-6 + 0.768e-6 + 2.256e-6, kTol);
  // Split over N: [4, 8] x [8, 8]: loads 384 B, 512 flops, 128 B; an all-gather of 256 B over
  // 2 ranks: 1 µs + 128 ns either way.
  const Phases n =
      tensor_parallel_matmul(4, 16, 8, ir::DType::f32, 2, SplitDim::n, round_device(), link);
  EXPECT_NEAR(n.collective, 1.128e-6, kTol);
  EXPECT_NEAR(n.total(), 1e-6 + 0.384e-6 + 0.512e-6 + 0.128e-6 + 1.128e-6, kTol);
  EXPECT_THROW(
      tensor_parallel_matmul(4, 16, 8, ir::DType::f32, 3, SplitDim::k, round_device(), link),
      Error);
}

}  // namespace
}  // namespace yirage::cost

namespace yirage::cost {
namespace {

// The row sums of exp(x), x f32[64, 1024], two ways. Memory-heavy: two kernel-level ops across
// the whole device, the 256 KiB of exp(x) written out and read back. Compute-starved: one fused
// kernel of 4 blocks (4 of the 16 parallel units) over the rows that loops over the columns,
// reading x once.
struct TwoWays {
  ir::KernelGraph unfused, fused;
};
TwoWays exp_row_sums() {
  TwoWays w;
  const ir::TensorRef x = w.unfused.input("x", {64, 1024}, ir::DType::f32);
  w.unfused.mark_output(w.unfused.reduce(ir::ReduceFn::sum, w.unfused.exp(x), 1), "out");
  ir::BlockGraph b({{4, 1, 1}}, 8, {{ir::DType::f32, {64, 1024}}});
  const int32_t it = b.iterator(0, {0, kReplicate, kReplicate}, 1);
  const int32_t e = b.add(ir::UnaryOp{ir::UnaryFn::exp}, {it});
  const int32_t s = b.add(ir::ReduceOp{ir::ReduceFn::sum, 1, true}, {e});
  b.save(b.accumulate(AccumFn::sum, s), {0, kReplicate, kReplicate});
  w.fused = ir::testing::single_fused_graph(std::move(b), "fused");
  return w;
}

// What `yirage calibrate` stores, as the search reads it back (device_from_json).
Device calibrated(double bytes_per_second) {
  return device_from_json({{"parallel_units", 16},
                           {"dram_bytes_per_second", bytes_per_second},
                           {"levels", nlohmann::json::array()},
                           {"flops_per_second", 16e9},
                           {"flops_per_second_by_dtype", nlohmann::json::object()},
                           {"launch_seconds", 1e-6},
                           {"source", "calibration"}});
}

TEST(CostModel, CalibratedBandwidthMovesTheRankingTheExpectedWay) {
  const TwoWays w = exp_row_sums();
  // At 100 GB/s the unfused graph's 768 KiB cost ~8 µs, and its 2·64 Ki flops spread over 16
  // units ~8 µs more; the fused kernel's 128 Ki flops on 4 units (1 GFLOP/s each) take ~33 µs.
  const Device fast = calibrated(1e11);
  EXPECT_EQ(fast.source, "calibration");
  EXPECT_LT(mugraph_phases(w.unfused, fast).total(), mugraph_phases(w.fused, fast).total());
  // At 1 GB/s the memory-heavy one pays ~786 µs for its bytes; the fused kernel reads 256 KiB
  // once, though through 4 units' ports at 125 MB/s each (~524 µs), and overlaps its compute
  // with the loads: it now ranks first.
  const Device slow = calibrated(1e9);
  EXPECT_GT(mugraph_phases(w.unfused, slow).total(), mugraph_phases(w.fused, slow).total());
  // Both got slower, the memory-heavy one by more.
  const double unfused_ratio =
      mugraph_phases(w.unfused, slow).total() / mugraph_phases(w.unfused, fast).total();
  const double fused_ratio =
      mugraph_phases(w.fused, slow).total() / mugraph_phases(w.fused, fast).total();
  EXPECT_GT(unfused_ratio, fused_ratio);
  EXPECT_GT(fused_ratio, 1);
}

}  // namespace
}  // namespace yirage::cost
