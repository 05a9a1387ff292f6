// The cuda backend on a GPU: generated kernels against the reference executor on fresh random
// inputs with poisoned outputs (backend::run_on). Skipped where no GPU is usable, unless
// YIRAGE_REQUIRE_CUDA=1 (bench/gpu.sh sets it), which turns the skip into a failure.
#include <cmath>
#include <cstdlib>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "block_test_graphs.h"
#include "cuda_test_support.h"
#include "suite/suite.h"
#include "suite_mugraphs.h"
#include "verify/verify.h"

namespace yirage::backend {
namespace {

using cuda_testing::expect_matches;
using cuda_testing::fresh_seed;

TEST(CudaGpu, FusedBlockGraphsMatchReference) {
  CUDA_OR_SKIP(cuda);
  using namespace ir::testing;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    const std::string d(ir::dtype_name(t));
    expect_matches(rmsnorm_linear_ugraph(t), *cuda, fresh_seed(), "rmsnorm_linear " + d);
    expect_matches(single_fused_graph(gated_mlp_block(t), "gated"), *cuda, fresh_seed(),
                   "gated " + d);
    expect_matches(single_fused_graph(attention_exp_block(t), "att_exp"), *cuda, fresh_seed(),
                   "attention_exp " + d);
    expect_matches(single_fused_graph(attention_softmax_block(t), "att_softmax"), *cuda,
                   fresh_seed(), "attention_softmax " + d);
  }
}

// The tensor-core path (mma.sync): 16-bit tiles with K a multiple of 16, rows padded to 16
// (m = 3), several row tiles (m = 40), split K across warps (few output tiles), an f32 A operand
// (rms_norm's scaled X) and a residual.
TEST(CudaGpu, TensorCoreMatmulsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16})
    for (int64_t m : {3, 40}) {
      const std::string what = fmt::format("{} m{}", ir::dtype_name(t), m);
      ir::KernelGraph g;
      auto x = g.input("X", {m, 256}, t);
      auto gain = g.input("G", {256}, t);
      auto w = g.input("W", {256, 64}, t);
      auto r = g.input("R", {m, 64}, t);
      g.mark_output(cuda_suite::rmsnorm_linear_node(g, x, gain, w, 32, 64, "norm_linear"), "a");
      g.mark_output(cuda_suite::linear_node(g, x, w, r, 16, 128, "linear_residual"), "b");
      g.mark_output(cuda_suite::linear_node(g, x, w, std::nullopt, 64, 256, "linear_one_step"),
                    "c");
      expect_matches(g, *cuda, fresh_seed(), what);
    }
}

// Weight tiles streamed by the TMA on sm_90 (codegen_block_tma.cpp; the cp.async loads elsewhere,
// and with YIRAGE_CUDA_TMA=0): one box of 256 rows, two 64-column panels of 64 rows (the split's
// parts, then its finish), and a 512-row tile in two boxes along K. W's columns wider than the
// tiles, so that a wrong box coordinate reads the wrong columns.
TEST(CudaGpu, WeightStreamsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16}) {
    const std::string d(ir::dtype_name(t));
    ir::KernelGraph g;
    auto x = g.input("X", {2, 1024}, t);
    auto gain = g.input("G", {1024}, t);
    auto w = g.input("W", {1024, 384}, t);
    g.mark_output(cuda_suite::rmsnorm_linear_node(g, x, gain, w, 64, 256, "norm_linear"), "a");
    auto [parts, ms] = cuda_suite::rmsnorm_linear_parts(g, x, gain, w, 128, 2, 64, "parts");
    g.mark_output(cuda_suite::rmsnorm_linear_finish(g, parts, ms, 2, 64, "finish"), "b");
    g.mark_output(cuda_suite::linear_node(g, x, w, std::nullopt, 64, 512, "linear_k512"), "c");
    expect_matches(g, *cuda, fresh_seed(), "weight streams " + d);
  }
}

// Weights streamed through registers into transposed mma fragments (codegen_block_stream.cpp),
// in each of the cases suite_mugraphs.h's register_stream_graph() covers.
TEST(CudaGpu, RegisterStreamsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16})
    for (int64_t m : {3, 16})
      expect_matches(cuda_suite::register_stream_graph(t, m), *cuda, fresh_seed(),
                     fmt::format("register streams {} m{}", ir::dtype_name(t), m));
}

// Attention's register chain (codegen_block_chain.cpp): one row group with warps splitting the
// score columns (qb 16), four row groups (qb 64), a split over the keys with its finish kernel,
// and a row sum that is a mean; and values 8 columns wide, which the chain refuses, through the
// general path. Q in [-1/4, 1/4] keeps exp(Q·K) inside f16's range (scores of
// a few units) while still far from uniform.
TEST(CudaGpu, AttentionChainsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16}) {
    const std::string d(ir::dtype_name(t));
    auto inputs = [&](ir::KernelGraph& g) {
      return std::array{g.input("Q", {2, 128, 64}, t), g.input("K", {2, 64, 512}, t),
                        g.input("V", {2, 512, 64}, t)};
    };
    // qb 128: every warp owns whole rows, and the chain stores its products once; on sm_90a
    // its products are warpgroup products, of 64 and 128 columns.
    for (auto [qb, lc] : {std::pair{16, 64}, {64, 64}, {32, 128}, {128, 64}, {128, 128}}) {
      ir::KernelGraph g;
      auto [q, k, v] = inputs(g);
      g.mark_output(cuda_suite::attention_node(g, q, k, v, qb, lc), "out");
      expect_matches(g, *cuda, fresh_seed(), fmt::format("attention {} qb{} lc{}", d, qb, lc),
                     {{"Q", 0.25f}});
    }
    {
      ir::KernelGraph g;
      auto q = g.input("Q", {2, 128, 64}, t);
      auto k = g.input("K", {2, 64, 512}, t);
      auto v = g.input("V", {2, 512, 8}, t);
      g.mark_output(cuda_suite::attention_node(g, q, k, v, 64, 64), "out");
      expect_matches(g, *cuda, fresh_seed(), "attention dv8 " + d, {{"Q", 0.25f}});
    }
    for (int64_t qb : {64, 128}) {
      ir::KernelGraph g;
      auto [q, k, v] = inputs(g);
      g.mark_output(cuda_suite::attention_split_node(g, q, k, v, qb, 64, 4), "out");
      expect_matches(g, *cuda, fresh_seed(), fmt::format("attention split {} qb{}", d, qb),
                     {{"Q", 0.25f}});
    }
    expect_matches(
        ir::testing::single_fused_graph(ir::testing::attention_mean_block(t), "att_mean"), *cuda,
        fresh_seed(), "attention row mean " + d);
  }
}

TEST(CudaGpu, SplitKWithKernelLevelSum) {
  CUDA_OR_SKIP(cuda);
  using namespace ir::testing;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16}) {
    ir::KernelGraph g;
    auto x = g.input("X", {1, kSplitM, kSplitK}, t);
    auto w = g.input("W", {kSplitK, kSplitN}, t);
    auto body = std::make_shared<const ir::BlockGraph>(split_k_block(t));
    auto partial = g.add_node(ir::FusedOp{body}, {x, w}, "split_k")[0];
    g.mark_output(g.reduce(ir::ReduceFn::sum, partial, 0, false), "out");
    expect_matches(g, *cuda, fresh_seed(), "split_k");
  }
}

TEST(CudaGpu, KernelLevelOpsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16}) {
    ir::KernelGraph g;
    auto a = g.input("A", {3, 5, 40}, t);
    auto b = g.input("B", {40, 24}, t);
    auto c = g.input("C", {24}, t);
    auto mm = g.matmul(a, b);                                       // batched, broadcast B
    auto biased = g.add(mm, c);                                     // broadcast add
    auto sm = g.softmax(biased, 1);                                 // softmax over a middle dim
    auto ln = g.layer_norm(g.gelu(biased), {24});                   // layer_norm
    auto rn = g.rms_norm(g.permute(ln, {0, 2, 1}), {5}, {}, 1e-5);  // permute, rms_norm
    auto parts = g.split(sm, 2, {10, 14});
    auto joined = g.concat({parts[1], parts[0]}, 2);
    g.mark_output(g.reduce(ir::ReduceFn::max, joined, 1, true), "max");
    g.mark_output(g.reduce(ir::ReduceFn::mean, rn, 2, false), "mean");
    g.mark_output(g.reshape(g.exp(g.mul_scalar(sm, 0.5)), {15, 24}), "reshaped");
    g.mark_output(a, "passthrough");
    expect_matches(g, *cuda, fresh_seed(), fmt::format("kernel ops {}", ir::dtype_name(t)));
  }
}

// Splits of one row run as views of their operand (codegen.h): parts read by kernels and parts
// marked as outputs, next to a split of two rows, which keeps its copy kernels.
TEST(CudaGpu, SplitViewsMatchReference) {
  CUDA_OR_SKIP(cuda);
  ir::KernelGraph g;
  auto x = g.input("X", {1, 640}, ir::DType::f16);
  auto y = g.input("Y", {2, 640}, ir::DType::f16);
  auto parts = g.split(g.exp(x), 1, {128, 384, 128});
  g.mark_output(parts[1], "middle");
  g.mark_output(g.mul(parts[0], parts[2]), "ends");
  auto rows = g.split(y, 1, {128, 512});
  g.mark_output(g.add(rows[0], g.exp(rows[0])), "rows");
  g.mark_output(rows[1], "rows_rest");
  expect_matches(g, *cuda, fresh_seed(), "split views");
}

// Splits of several rows that only fused kernels read run as strided views (codegen.h), read
// through each of the kernels' paths: register rows (silu_mul), 16-byte copies of X into a
// stream's staged A, and weights split by columns streamed by TMA (or through registers with
// YIRAGE_CUDA_TMA=0, which bench/gpu.sh runs for *Streams*).
TEST(CudaGpu, StridedSplitViewsStreamsMatchReference) {
  CUDA_OR_SKIP(cuda);
  ir::KernelGraph g;
  auto y = g.input("Y", {8, 1024}, ir::DType::f16);
  auto halves = g.split(g.exp(y), 1, {512, 512});
  g.mark_output(cuda_suite::silu_mul_node(g, halves[0], halves[1], 64), "silu_mul");
  auto x = g.input("X", {16, 512}, ir::DType::f16);
  auto w = g.input("W", {256, 1024}, ir::DType::f16);
  auto x_parts = g.split(x, 1, {256, 256});
  auto w_parts = g.split(w, 1, {384, 640});
  g.mark_output(cuda_suite::linear_node(g, x_parts[1], w_parts[1], std::nullopt, 64, 128, "lin"),
                "linear");
  g.mark_output(cuda_suite::linear_node(g, x_parts[0], w_parts[0], std::nullopt, 64, 256, "lin2"),
                "linear_whole_k");
  expect_matches(g, *cuda, fresh_seed(), "strided split views");
}

// Row-wise chains in registers (codegen_block_rows.cpp; bench/gpu.sh runs this file again with
// YIRAGE_CUDA_ROWS=0 for the shared-memory path): ntrans's at bs1 and a layer_norm chain with a
// weight, a bias and two outputs, in every float dtype.
TEST(CudaGpu, RegisterRowsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    const std::string d(ir::dtype_name(t));
    ir::KernelGraph g;
    auto h = g.input("H", {8, 4096}, t);
    auto x = g.input("X", {8, 4096}, t);
    auto alpha = g.input("alpha", {8, 4096}, t);
    g.mark_output(cuda_suite::ntrans_node(g, h, x, alpha, "ntrans"), "out");
    expect_matches(g, *cuda, fresh_seed(), "ntrans " + d);
    expect_matches(cuda_suite::row_chain_graph(t, 5, 2048), *cuda, fresh_seed(), "row chain " + d);
  }
}

// Row ops (norms, softmax) at the lengths where their kernel changes shape: 1024 threads from
// 2048 elements, a tail row (3000), and long rows (40000, and 40003 in uneven parts), which on
// sm_90 spread over clusters of 8 blocks (YIRAGE_CUDA_CLUSTER=0: a block a row, read per pass),
// also along a strided dim; in f32, where softmax takes expf, and in 16 bits, where it takes
// ex2.approx.
TEST(CudaGpu, LongRowOpsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (int64_t len : {int64_t{3000}, int64_t{40000}, int64_t{40003}}) {
      ir::KernelGraph g;
      auto x = g.input("X", {3, len}, t);
      auto w = g.input("W", {len}, t);
      g.mark_output(g.softmax(x, 1), "softmax");
      g.mark_output(g.rms_norm(x, {len}, w), "rms_norm");
      g.mark_output(g.layer_norm(x, {len}), "layer_norm");
      g.mark_output(g.softmax(g.input("Y", {len, 3}, t), 0), "softmax_across");
      expect_matches(g, *cuda, fresh_seed(),
                     fmt::format("row ops of {} {}", len, ir::dtype_name(t)));
    }
}

// Kernel-level matmuls in every float dtype and batch layout: cuBLAS steps where cuBLAS loaded
// (bench/gpu.sh runs this file again with YIRAGE_CUDA_CUBLAS=0 for the generated kernels).
TEST(CudaGpu, KernelLevelMatmulsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    ir::KernelGraph g = ir::testing::matmul_layouts_graph(t);
    auto x = g.inputs()[3];
    auto w = g.inputs()[2];
    g.mark_output(g.exp(g.matmul(x, w)), "then_exp");
    expect_matches(g, *cuda, fresh_seed(), fmt::format("matmuls {}", ir::dtype_name(t)));
  }
}

// Library products that fold their add (C = A · B + D): one matrix, batches, and the sum in
// either operand order, at each float dtype.
TEST(CudaGpu, KernelLevelProductsWithFoldedAddsMatchReference) {
  CUDA_OR_SKIP(cuda);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    ir::KernelGraph g;
    auto x = g.input("X", {24, 96}, t);
    auto w = g.input("W", {96, 40}, t);
    auto r = g.input("R", {24, 40}, t);
    auto xb = g.input("XB", {3, 24, 96}, t);
    auto wb = g.input("WB", {3, 96, 40}, t);
    auto rb = g.input("RB", {3, 24, 40}, t);
    g.mark_output(g.add(g.matmul(x, w), r), "one");
    g.mark_output(g.add(rb, g.matmul(xb, wb)), "batched");
    expect_matches(g, *cuda, fresh_seed(), fmt::format("folded adds {}", ir::dtype_name(t)));
  }
}

// Library products that share A, run as one call over arrays of addresses (LibraryGemm::group):
// three products of X, one read by an add, at each float dtype; then the same module launched on
// two sets of buffers in turn, each launch checked, since the arrays must follow the addresses
// (run directly when they change, replayed from the captured graph when they repeat).
// Three products of one A: with cuBLAS, one grouped call reading a device array of addresses.
ir::KernelGraph products_sharing_a(ir::DType t) {
  ir::KernelGraph g;
  auto x = g.input("X", {24, 96}, t);
  auto w1 = g.input("W1", {96, 40}, t);
  auto w2 = g.input("W2", {96, 40}, t);
  auto w3 = g.input("W3", {96, 40}, t);
  auto r = g.input("R", {24, 40}, t);
  g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w2)), "gated");
  g.mark_output(g.add(g.matmul(x, w3), r), "plus_r");
  return g;
}

TEST(CudaGpu, KernelLevelProductsSharingAMatchReference) {
  CUDA_OR_SKIP(cuda);
  auto graph = products_sharing_a;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    expect_matches(graph(t), *cuda, fresh_seed(), fmt::format("grouped {}", ir::dtype_name(t)));

  const ir::KernelGraph g = graph(ir::DType::f16);
  std::unique_ptr<Module> module = cuda->compile(g);
  std::vector<std::unique_ptr<Buffer>> owned;
  std::vector<Buffer*> in[2], out[2];
  for (int set = 0; set < 2; ++set) {
    for (ir::TensorRef t : g.inputs())
      in[set].push_back(
          owned.emplace_back(cuda->allocate(ir::HostTensor(g.type(t)).bytes.size())).get());
    for (const ir::GraphOutput& o : g.outputs())
      out[set].push_back(
          owned.emplace_back(cuda->allocate(ir::HostTensor(g.type(o.tensor)).bytes.size())).get());
  }
  for (int set : {0, 1, 0, 0, 1, 1}) {
    std::mt19937_64 rng(fresh_seed());
    std::vector<ir::HostTensor> inputs;
    for (size_t i = 0; i < in[set].size(); ++i) {
      ir::fill_random(inputs.emplace_back(g.type(g.inputs()[i])), rng);
      in[set][i]->write(inputs.back().bytes);
    }
    std::vector<ir::HostTensor> results;
    for (size_t o = 0; o < out[set].size(); ++o) {
      ir::poison(results.emplace_back(g.type(g.outputs()[o].tensor)));
      out[set][o]->write(results.back().bytes);
    }
    module->launch(in[set], out[set]);
    cuda->synchronize();
    const std::vector<ir::HostTensor> expected = verify::run_reference(g, inputs);
    for (size_t o = 0; o < results.size(); ++o) {
      out[set][o]->read(results[o].bytes);
      EXPECT_LE(cuda_testing::relative_l2(results[o], expected[o]), 2e-3)
          << "buffer set " << set << ", output " << o;
    }
  }
}

// Backend::time on cuda: each input set gets a graph of its own (with its own array of the
// grouped products' addresses), so after timing every set's outputs are its own inputs' results,
// and a plain launch afterwards is still right. The times are only checked to be there.
TEST(CudaGpu, TimingRotatesSetsEachWithItsOwnGraph) {
  CUDA_OR_SKIP(cuda);
  const ir::KernelGraph g = products_sharing_a(ir::DType::f16);
  std::unique_ptr<Module> module = cuda->compile(g);
  std::vector<std::unique_ptr<Buffer>> owned;
  std::vector<Buffer*> in[2], out[2];
  std::vector<ir::HostTensor> inputs[2];
  for (int set = 0; set < 2; ++set) {
    std::mt19937_64 rng(fresh_seed());
    for (ir::TensorRef t : g.inputs()) {
      ir::fill_random(inputs[set].emplace_back(g.type(t)), rng);
      in[set].push_back(owned.emplace_back(cuda->allocate(inputs[set].back().bytes.size())).get());
      in[set].back()->write(inputs[set].back().bytes);
    }
    for (const ir::GraphOutput& o : g.outputs())
      out[set].push_back(
          owned.emplace_back(cuda->allocate(ir::HostTensor(g.type(o.tensor)).bytes.size())).get());
  }
  const std::vector<LaunchBuffers> sets{{in[0], out[0]}, {in[1], out[1]}};
  const Timings t = cuda->time(*module, sets, {.warmup = 1, .repetitions = 3});
  EXPECT_EQ(t.launches_per_repetition, 100);  // the backend's choice
  ASSERT_EQ(t.seconds_per_launch.size(), 3u);
  for (double s : t.seconds_per_launch) EXPECT_GT(s, 0);
  EXPECT_GT(module->kernel_count(), 0);

  auto expect_results = [&](int set, const std::string& when) {
    const std::vector<ir::HostTensor> expected = verify::run_reference(g, inputs[set]);
    for (size_t o = 0; o < expected.size(); ++o) {
      ir::HostTensor result(expected[o].type);
      out[set][o]->read(result.bytes);
      EXPECT_LE(cuda_testing::relative_l2(result, expected[o]), 2e-3)
          << when << ": set " << set << ", output " << o;
    }
  };
  expect_results(0, "timed");
  expect_results(1, "timed");
  ir::HostTensor poisoned(g.type(g.outputs()[0].tensor));
  ir::poison(poisoned);
  out[0][0]->write(poisoned.bytes);
  module->launch(in[0], out[0]);
  cuda->synchronize();
  expect_results(0, "launched after timing");
}

// Launching again on the same buffers replays a captured CUDA graph; it must see new inputs.
TEST(CudaGpu, GraphReplaySeesNewInputs) {
  CUDA_OR_SKIP(cuda);
  const ir::KernelGraph g = ir::testing::rmsnorm_linear_ugraph(ir::DType::f16);
  std::unique_ptr<Module> module = cuda->compile(g);
  std::vector<std::unique_ptr<Buffer>> in, out;
  std::vector<Buffer*> in_ptr, out_ptr;
  for (ir::TensorRef t : g.inputs()) {
    ir::HostTensor h(g.type(t));
    in.push_back(cuda->allocate(h.bytes.size()));
    in_ptr.push_back(in.back().get());
  }
  ir::HostTensor result(g.type(g.outputs()[0].tensor));
  out.push_back(cuda->allocate(result.bytes.size()));
  out_ptr.push_back(out.back().get());
  for (int round = 0; round < 4; ++round) {
    std::mt19937_64 rng(fresh_seed());
    std::vector<ir::HostTensor> inputs;
    for (size_t i = 0; i < in.size(); ++i) {
      inputs.emplace_back(g.type(g.inputs()[i]));
      ir::fill_random(inputs.back(), rng);
      in[i]->write(inputs.back().bytes);
    }
    ir::poison(result);
    out[0]->write(result.bytes);
    module->launch(in_ptr, out_ptr);
    cuda->synchronize();
    out[0]->read(result.bytes);
    const ir::HostTensor expected = verify::run_reference(g, inputs)[0];
    for (int64_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(result.get(i), expected.get(i), 1e-2 * (1 + std::fabs(expected.get(i))))
          << "round " << round << " element " << i;
  }
}

// Kernels launched as programmatic dependents (sm_90) compute what kernels launched in plain
// stream order do, bit for bit, over replays with new inputs: each waits for the grid before it
// before reading or writing. The graphs chain many kernels, some after cuBLAS calls.
TEST(CudaGpu, ProgrammaticLaunchesMatchPlainOrder) {
  CUDA_OR_SKIP(cuda);
  for (const suite::WorkloadInfo& info : suite::workloads()) {
    if (info.name != "ntrans" && info.name != "gqa" && info.name != "llama_mlp_block") continue;
    const std::string& workload = info.name;
    const ir::KernelGraph g = suite::build_workload(workload, 8, ir::DType::f16);
    std::unique_ptr<Module> programmatic = cuda->compile(g);
    const char* before = std::getenv("YIRAGE_CUDA_PDL");
    const std::string saved = before ? before : "";
    ::setenv("YIRAGE_CUDA_PDL", "0", 1);
    std::unique_ptr<Module> plain = cuda->compile(g);
    if (before)
      ::setenv("YIRAGE_CUDA_PDL", saved.c_str(), 1);
    else
      ::unsetenv("YIRAGE_CUDA_PDL");
    std::vector<std::unique_ptr<Buffer>> owned;
    std::vector<Buffer*> in;
    for (ir::TensorRef t : g.inputs())
      in.push_back(
          owned.emplace_back(cuda->allocate(ir::HostTensor(g.type(t)).bytes.size())).get());
    ir::HostTensor result(g.type(g.outputs()[0].tensor)), reference = result;
    Buffer* const out_programmatic = owned.emplace_back(cuda->allocate(result.bytes.size())).get();
    Buffer* const out_plain = owned.emplace_back(cuda->allocate(result.bytes.size())).get();
    // The first launch runs the steps directly; the next ones replay the captured graph.
    for (int round = 0; round < 3; ++round) {
      // Drawn as the benchmark draws them, so that f16 stays finite.
      const std::vector<ir::HostTensor> inputs = suite::random_inputs(info, g, fresh_seed());
      for (size_t i = 0; i < in.size(); ++i) in[i]->write(inputs[i].bytes);
      ir::poison(result);
      out_programmatic->write(result.bytes);
      out_plain->write(result.bytes);
      programmatic->launch(in, {&out_programmatic, 1});
      plain->launch(in, {&out_plain, 1});
      cuda->synchronize();
      out_programmatic->read(result.bytes);
      out_plain->read(reference.bytes);
      EXPECT_EQ(result.bytes, reference.bytes) << workload << " round " << round;
      if (round < 2) continue;
      // Both orders equal and wrong alike would pass the check above.
      EXPECT_LE(cuda_testing::relative_l2(result, verify::run_reference(g, inputs)[0]), 2e-3)
          << workload;
    }
  }
}

TEST(CudaGpu, DescribesTheDevice) {
  CUDA_OR_SKIP(cuda);
  const DeviceDescription d = cuda->device();
  EXPECT_GT(d.capabilities["multiprocessors"].get<int>(), 0);
  EXPECT_GT(d.capabilities["shared_memory_per_block_optin_bytes"].get<int>(), 48 * 1024);
  EXPECT_EQ(d.capabilities["sm_arch"].get<std::string>().substr(0, 3), "sm_");
  EXPECT_TRUE(d.capabilities.contains("matmul_library"));
}

}  // namespace
}  // namespace yirage::backend
