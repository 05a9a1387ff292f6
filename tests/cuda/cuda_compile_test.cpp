// Compile-only: the CUDA source generated for every suite workload (the hand-built µGraphs of
// suite_mugraphs.h at bs 1 and 8, the unfused suite graphs at f16, and the fused kernels of
// block_test_graphs.h) compiles with NVRTC for sm_80 and sm_90. Needs NVRTC, not a GPU; fails,
// rather than skips, where NVRTC is missing.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/cuda/block_lowering.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/driver.h"
#include "block_test_graphs.h"
#include "search/internal.h"
#include "suite/suite.h"
#include "suite_mugraphs.h"

namespace yirage::backend::cuda {
namespace {

// The H200 as the benchmark's kernels get it (227 KB of shared memory, 132 multiprocessors),
// with TMA copies and cluster pairs.
const CodegenOptions kH200Pairs{
    .max_shared_bytes = 227 * 1024, .multiprocessors = 132, .tensor_maps = true, .clusters = true};

// How many times `what` occurs in `text`.
int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Compiles every kernel of `graph` not compiled before for both architectures.
void compile_all(const ir::KernelGraph& graph, const std::string& what, std::set<std::string>& seen,
                 const CodegenOptions& options = {}) {
  // TMA copies and block clusters exist on sm_90 only.
  const std::vector<const char*> archs = options.tensor_maps || options.clusters
                                             ? std::vector<const char*>{"sm_90"}
                                             : std::vector<const char*>{"sm_80", "sm_90"};
  std::string reason;
  ASSERT_TRUE(nvrtc_available(&reason))
      << "the CUDA compile test needs NVRTC (the CUDA toolkit's libnvrtc): " << reason;
  Program program = lower(graph, options);
  ASSERT_FALSE(program.kernels.empty()) << what;
  for (const KernelLaunch& k : program.kernels) {
    if (k.gemm) continue;
    if (!seen.insert(k.source).second) continue;
    // Every kernel's first act is to wait on the grids before it, so that it may be launched as
    // their programmatic dependent (codegen.cpp's yr_wait_prior_grids()).
    const size_t entry = k.source.find(") {\n", k.source.find("__global__"));
    EXPECT_TRUE(k.waits_on_prior_grids) << what << ": " << k.what;
    EXPECT_EQ(k.source.compare(entry + 4, 25, "  yr_wait_prior_grids();\n"), 0)
        << what << ": " << k.what << " does not wait on prior grids first:\n"
        << k.source.substr(entry, 200);
    // YIRAGE_CUDA_DUMP=DIR keeps the sources, for nvcc -Xptxas -v or reading.
    if (const char* dump = std::getenv("YIRAGE_CUDA_DUMP"); dump && *dump)
      std::ofstream(fmt::format("{}/{}-{}.cu", dump, k.name, seen.size())) << k.source;
    // wgmma exists on sm_90a only.
    for (const char* arch : k.arch_specific ? std::vector<const char*>{"sm_90a"} : archs) {
      try {
        CompileResult r = compile_cuda(k.source, arch, k.name);
        EXPECT_FALSE(r.cubin.empty()) << what << ": " << k.what << " for " << arch;
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": " << e.what() << "\n--- source ---\n" << k.source;
      }
    }
  }
}

// Whether `v` lowers with `options`. The tilings with long K tiles are made for streamed weights
// (codegen_block_stream.cpp); where their weights cannot stream (through registers, or by TMA on
// sm_90), the weight tiles' stages need more shared memory than a block has, and the lowering
// says so.
bool lowers(const cuda_suite::Variant& v, const CodegenOptions& options, const std::string& what) {
  try {
    lower(v.graph, options);
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes of shared memory"), std::string::npos)
        << what << ": " << e.what();
    EXPECT_TRUE(v.name.ends_with("_k512") || v.name.ends_with("_k1024") ||
                v.name.ends_with("_k2048") || v.name.ends_with("_k4096"))
        << what << ": " << e.what();
    return false;
  }
}

// The backend's check of a body the search found (Backend::reject_body): the shared memory the
// lowering lays out, against the block's. A small attention body lowers; one that holds 512 query
// rows by 1024 keys of scores at once does not, and the reason names both sizes.
TEST(CudaCompile, RejectBodyComparesTheLoweringsSharedMemory) {
  EXPECT_EQ(reject_body(ir::testing::attention_softmax_block(ir::DType::f16), kH200Pairs), "");
  const ir::BlockGraph big = ir::testing::online_softmax_attention_block(
      {ir::DType::f16, {1, 512, 128}}, {ir::DType::f16, {1, 128, 1024}},
      {ir::DType::f16, {1, 1024, 128}}, 1, 1);
  const std::string why = reject_body(big, kH200Pairs);
  EXPECT_THAT(why, ::testing::StartsWith("its tiles need "));
  EXPECT_THAT(why, ::testing::EndsWith(" bytes of shared memory, more than the 232448 a block may "
                                       "have"));
}

// The benchmark's kernels as the H200 gets them: its 132 multiprocessors set the pipeline depth.
TEST(CudaCompile, SuiteMuGraphs) {
  const CodegenOptions h200{.max_shared_bytes = 227 * 1024, .multiprocessors = 132};
  std::set<std::string> seen;
  for (const suite::WorkloadInfo& w : suite::workloads())
    for (int bs : w.has_batch ? std::vector<int>{1, 8} : std::vector<int>{1})
      for (const cuda_suite::Variant& v : cuda_suite::variants(w.name, bs)) {
        const std::string what = fmt::format("{} bs{} {}", w.name, bs, v.name);
        if (lowers(v, h200, what)) compile_all(v.graph, what, seen, h200);
      }
}

// And with the TMA: the weight streams' kernels on sm_90.
TEST(CudaCompile, SuiteMuGraphsWithStreamsByTma) {
  const CodegenOptions h200{
      .max_shared_bytes = 227 * 1024, .multiprocessors = 132, .tensor_maps = true};
  std::set<std::string> seen;
  int by_tma = 0;
  for (const char* workload : {"rmsnorm_linear", "gated_mlp"})
    for (int bs : {1, 8})
      for (const cuda_suite::Variant& v : cuda_suite::variants(workload, bs)) {
        const std::string what = fmt::format("{} bs{} {}", workload, bs, v.name);
        if (!lowers(v, h200, what)) continue;
        for (const KernelLaunch& k : lower(v.graph, h200).kernels)
          by_tma += k.source.find("B streamed by TMA") != std::string::npos;
        compile_all(v.graph, what, seen, h200);
      }
  EXPECT_GT(by_tma, 0);
}

// The same on sm_90 with tensor maps: the weight tiles that tensor-core products stream come by
// TMA box copies (codegen_block_tma.cpp), and those kernels compile too.
TEST(CudaCompile, SuiteMuGraphsWithTensorMaps) {
  const CodegenOptions h200{.max_shared_bytes = 227 * 1024,
                            .multiprocessors = 132,
                            .tensor_maps = true,
                            .register_weights = false};
  std::set<std::string> seen;
  int with_maps = 0;
  for (const suite::WorkloadInfo& w : suite::workloads())
    for (int bs : w.has_batch ? std::vector<int>{1, 8} : std::vector<int>{1})
      for (const cuda_suite::Variant& v : cuda_suite::variants(w.name, bs)) {
        const std::string what = fmt::format("{} bs{} {}", w.name, bs, v.name);
        if (!lowers(v, h200, what)) continue;
        const std::optional<Program> program = lower(v.graph, h200);
        for (const KernelLaunch& k : program->kernels) with_maps += !k.tensor_maps.empty();
        compile_all(v.graph, what, seen, h200);
      }
  EXPECT_GT(with_maps, 0);
}

// Which tiles the TMA takes: rmsnorm_linear's weight tile [256 x 64] in one box, the split
// variant's [64 x 256] in four 64-column panels; the activation tile (read once, not walked by the
// loop) keeps its cp.async copy. Without the option nothing changes.
TEST(CudaCompile, WeightTilesTakeTheTma) {
  const CodegenOptions h200{.max_shared_bytes = 227 * 1024,
                            .multiprocessors = 132,
                            .tensor_maps = true,
                            .register_weights = false};
  auto kernel_of = [](const std::vector<cuda_suite::Variant>& variants, const std::string& name,
                      const CodegenOptions& options) {
    for (const cuda_suite::Variant& v : variants)
      if (v.name == name) return lower(v.graph, options).kernels.at(0);
    ADD_FAILURE() << "no variant " << name;
    return KernelLaunch{};
  };
  const KernelLaunch one = kernel_of(cuda_suite::variants("rmsnorm_linear", 1), "n64_k256", h200);
  ASSERT_EQ(one.tensor_maps.size(), 1u) << one.source;
  EXPECT_EQ(one.tensor_maps[0].arg, 2);  // X, G, W
  EXPECT_EQ(one.tensor_maps[0].dims, (std::array<uint64_t, 2>{6144, 4096}));
  EXPECT_EQ(one.tensor_maps[0].row_bytes, 6144u * 2);
  EXPECT_EQ(one.tensor_maps[0].box, (std::array<uint32_t, 2>{64, 256}));
  EXPECT_NE(one.source.find("yr_tma_load_2d(t"), std::string::npos) << one.source;
  EXPECT_NE(one.source.find("yr_swizzle128(ks * 16 + (lane & 15), cb, 256)"), std::string::npos)
      << one.source;
  EXPECT_NE(one.source.find("yr_cp_async16"), std::string::npos) << "X still by cp.async";
  const KernelLaunch split =
      kernel_of(cuda_suite::variants("rmsnorm_linear", 8), "split8_n256_k64", h200);
  ASSERT_EQ(split.tensor_maps.size(), 1u) << split.source;
  EXPECT_EQ(split.tensor_maps[0].box, (std::array<uint32_t, 2>{64, 64}));
  EXPECT_NE(split.source.find("p < 4; ++p"), std::string::npos) << split.source;
  // Tiles under 64 rows or 16 KB keep cp.async (they were slower by TMA).
  const KernelLaunch small =
      kernel_of(cuda_suite::variants("rmsnorm_linear", 1), "split16_n512_k32", h200);
  EXPECT_TRUE(small.tensor_maps.empty());
  const KernelLaunch plain = kernel_of(
      cuda_suite::variants("rmsnorm_linear", 1), "n64_k256",
      {.max_shared_bytes = 227 * 1024, .multiprocessors = 132, .register_weights = false});
  EXPECT_TRUE(plain.tensor_maps.empty());
  EXPECT_EQ(plain.source.find("yr_tma_load_2d(t"), std::string::npos);
}

// Which products stream their weights (codegen_block_stream.cpp): the skinny ones of
// rmsnorm_linear (2 and 16 rows) and gated_mlp at bs1 (8 rows), with no shared-memory stage in the
// for-loop for the weight. On sm_90 the streamed weights come by TMA after the loop
// (codegen_block_stream_tma.cpp), in boxes of 64 columns by a 32 KB chunk's rows, or for gate and
// up (which share one staged X) in one loop that takes their chunks in turn; elsewhere through
// registers. Not gated_mlp at bs8 (64 rows), not grids of more than one wave, and not where the
// option is off.
TEST(CudaCompile, SkinnyProductsStreamWeights) {
  const CodegenOptions h200{
      .max_shared_bytes = 227 * 1024, .multiprocessors = 132, .tensor_maps = true};
  const CodegenOptions a100{.max_shared_bytes = 163 * 1024, .multiprocessors = 108};
  auto kernel_of = [&](const std::string& workload, int bs, const std::string& name,
                       const CodegenOptions& options) {
    for (const cuda_suite::Variant& v : cuda_suite::variants(workload, bs))
      if (v.name == name) return lower(v.graph, options).kernels.at(0);
    ADD_FAILURE() << "no variant " << name;
    return KernelLaunch{};
  };
  const std::string by_tma = "B streamed by TMA", by_registers = "B streamed through registers";
  for (int bs : {1, 8}) {
    const KernelLaunch k = kernel_of("rmsnorm_linear", bs, "n64_k256", h200);
    EXPECT_NE(k.source.find(by_tma), std::string::npos) << k.source;
    ASSERT_EQ(k.tensor_maps.size(), 1u);
    // 32 KB chunks; 16 KB at bs8, where X's staged copy takes more of the shared memory.
    EXPECT_EQ(k.tensor_maps[0].box, (std::array<uint32_t, 2>{64, bs == 1 ? 256u : 128u}));
    EXPECT_EQ(k.source.find("yr_tma_load_2d(t"), std::string::npos) << "not the for-loop's TMA";
    // X's first tile goes out before the weight's first chunks, which it would queue behind.
    EXPECT_LT(k.source.find("yr_cp_async16("), k.source.find("yr_tma_load_2d(ws")) << k.source;
    // A's staged copy holds X's rows only (2 or 16), the rows past them read as zeros.
    EXPECT_EQ(k.source.find("h * 8 + g < 2 ?") != std::string::npos, bs == 1) << k.source;
  }
  const KernelLaunch older = kernel_of("rmsnorm_linear", 1, "n64_k256", a100);
  EXPECT_NE(older.source.find(by_registers), std::string::npos) << older.source;
  EXPECT_NE(older.source.find("yr_ld_stream16(w"), std::string::npos);
  const KernelLaunch gated = kernel_of("gated_mlp", 1, "n32_k256", h200);
  EXPECT_NE(gated.source.find("B streamed by TMA for 2 matmul(s)"), std::string::npos)
      << gated.source;
  ASSERT_EQ(gated.tensor_maps.size(), 2u) << "gate's weight and up's";
  EXPECT_EQ(gated.tensor_maps[0].arg, 1);  // X, W1, W2
  EXPECT_EQ(gated.tensor_maps[1].arg, 2);
  EXPECT_NE(gated.source.find("&tm0,"), std::string::npos) << gated.source;
  EXPECT_NE(gated.source.find("&tm1,"), std::string::npos) << gated.source;
  EXPECT_EQ(gated.source.find("unsigned short* const sx5"), std::string::npos)
      << "gate and up share the staged X";
  // X, which only the streams read, goes straight into their staged copy: the for-loop walks no
  // tile, and the weights take its room in chunks of 256 rows (16 KB at 32 columns).
  EXPECT_NE(gated.source.find("yr_cp_async16(sx"), std::string::npos) << gated.source;
  EXPECT_EQ(gated.source.find("_base"), std::string::npos) << gated.source;
  EXPECT_EQ(gated.tensor_maps[0].box, (std::array<uint32_t, 2>{32, 256}));
  // rmsnorm_linear's X also feeds the norm, so it keeps the loop's stages.
  const KernelLaunch normed = kernel_of("rmsnorm_linear", 1, "n64_k256", h200);
  EXPECT_NE(normed.source.find("t0_base"), std::string::npos) << normed.source;
  EXPECT_EQ(normed.source.find("yr_cp_async16(sx"), std::string::npos) << normed.source;
  CodegenOptions no_maps = h200;
  no_maps.tensor_maps = false;
  const KernelLaunch gated_older = kernel_of("gated_mlp", 1, "n32_k256", no_maps);
  EXPECT_NE(gated_older.source.find(by_registers), std::string::npos) << gated_older.source;
  EXPECT_NE(gated_older.source.find("yr_ld_stream8(w"), std::string::npos);
  const KernelLaunch wide = kernel_of("gated_mlp", 8, "n32_k128", h200);
  EXPECT_EQ(wide.source.find("B streamed"), std::string::npos) << "64 rows stay in shared memory";
  // 448 blocks of the Llama MLP's gate_up: more than one wave keeps the weight in the loop.
  const KernelLaunch waves = kernel_of("llama_mlp_block", 1, "n64_k256_down_n32_k256", h200);
  EXPECT_EQ(waves.source.find("B streamed"), std::string::npos);
  EXPECT_EQ(waves.grid[0], 448u);
  std::set<std::string> seen;
  for (const CodegenOptions& options : {h200, a100})
    for (int64_t m : {3, 16}) {
      const ir::KernelGraph g = cuda_suite::register_stream_graph(ir::DType::f16, m);
      // n48 streams by TMA only: 48 columns make no register column groups.
      for (const KernelLaunch& k : lower(g, options).kernels)
        EXPECT_EQ(k.source.find("B streamed") != std::string::npos,
                  k.name != "yr_fused_linear_n48" || options.tensor_maps)
            << k.what;
      compile_all(g, fmt::format("streams m{}", m), seen, options);
    }
  CodegenOptions off = h200;
  off.register_weights = false;
  const KernelLaunch tma = kernel_of("rmsnorm_linear", 1, "n64_k256", off);
  EXPECT_EQ(tma.source.find("B streamed"), std::string::npos);
  EXPECT_EQ(tma.tensor_maps.size(), 1u);
}

// The search counts a weight tile as streamed where the description's rule
// (streamed_weights_space, ir::BlockGraph::streams) says so; the lowering must then stream it, or
// the body the search admitted would need more shared memory than it counted. Over the rule's
// rows, column widths, K tiles and loop lengths, with TMA (H200) and through registers (A100).
TEST(CudaCompile, EveryWeightTileTheSearchCountsAsStreamedStreams) {
  const CodegenOptions h200{
      .max_shared_bytes = 227 * 1024, .multiprocessors = 132, .tensor_maps = true};
  const CodegenOptions a100{.max_shared_bytes = 163 * 1024, .multiprocessors = 108};
  int checked = 0;
  for (const CodegenOptions& options : {h200, a100}) {
    const nlohmann::json rule = streamed_weights_space(options);
    ir::StreamedWeights s{.max_rows = rule["max_rows"],
                          .k_multiple = rule["k_multiple"],
                          .column_widths = rule["column_widths"].get<std::vector<int64_t>>(),
                          .max_staged_bytes = rule["max_staged_bytes"],
                          .max_blocks = rule["max_blocks"]};
    for (int64_t rows : {1, 8, 16, 17})
      for (int64_t width : s.column_widths)
        for (int64_t k : {128, 512})
          for (int64_t range : {2, 8}) {
            const int64_t blocks = 64;
            ir::BlockGraph g({{blocks, 1, 1}}, range,
                             {{ir::DType::f16, {rows, k * range}},
                              {ir::DType::f16, {k * range, width * blocks}}});
            const int32_t x = g.iterator(0, ir::testing::kAllReplicated, 1);
            const int32_t w = g.iterator(1, {1, ir::kReplicate, ir::kReplicate}, 0);
            const int32_t product = g.add(ir::MatmulOp{}, {x, w});
            g.save(g.accumulate(ir::AccumFn::sum, product), {1, ir::kReplicate, ir::kReplicate});
            const std::string what =
                fmt::format("{} rows, [{}, {}] weight tiles, {} iterations, {}", rows, k, width,
                            range, options.tensor_maps ? "TMA" : "registers");
            const bool counted = g.streams(w, s);
            // A's staged copy (rows x K x iterations, 16-bit) within the budget too: 16 rows at
            // 4096 deep exceed the A100's.
            EXPECT_EQ(counted, rows <= 16 && rows * k * range * 2 <= s.max_staged_bytes) << what;
            if (!counted) continue;
            const detail::BlockSchedule schedule = detail::schedule_fused(g, options);
            EXPECT_TRUE(schedule.tiles[size_t(product)].streamed) << what;
            EXPECT_EQ(schedule.tiles[size_t(product)].role, detail::TileRole::streamed_product)
                << what;
            EXPECT_EQ(schedule.tiles[size_t(w)].role, detail::TileRole::streamed_weight) << what;
            EXPECT_EQ(schedule.tiles[size_t(w)].storage.offset, -1) << what << ": W is held";
            ++checked;
          }
  }
  EXPECT_EQ(checked, 2 * 3 * 5 * 2 * 2 - 5);  // less the A100's five 16-row, 4096-deep ones
}

// With clusters (sm_90), a stream whose doubled grid is still one wave runs each block as a
// pair, each streaming half of the weight; the pair's halves meet in shared memory.
TEST(CudaCompile, StreamsSplitOverBlockPairs) {
  const CodegenOptions h200 = kH200Pairs;
  auto variant = [](const std::string& workload, int bs, const std::string& name) {
    for (cuda_suite::Variant& v : cuda_suite::variants(workload, bs))
      if (v.name == name) return std::move(v.graph);
    ADD_FAILURE() << "no variant " << name;
    return ir::KernelGraph{};
  };
  const std::string pair = "__cluster_dims__(2, 1, 1)";
  std::set<std::string> seen;
  for (int bs : {1, 8}) {
    const std::string name = bs == 1 ? "n128_k2048" : "n128_k512";
    const ir::KernelGraph g = variant("rmsnorm_linear", bs, name);
    const KernelLaunch k = lower(g, h200).kernels.at(0);
    EXPECT_NE(k.source.find(pair), std::string::npos) << k.source;
    EXPECT_NE(k.source.find("yr_peer_load(t"), std::string::npos) << k.source;
    if (bs == 1) {
      EXPECT_NE(k.source.find("B streamed by TMA"), std::string::npos) << k.source;
      ASSERT_EQ(k.tensor_maps.size(), 1u);
      EXPECT_NE(k.source.find("first = (int)(blockIdx.x & 1) * 16"), std::string::npos)
          << "32 chunks of 128 rows, 16 a block";
    }
    if (bs == 8) {
      // 16 rows of X over 8 iterations: each block of the pair stages its 4, which leaves the
      // weight three 32 KB chunks in flight where all 8 left it two of 16 KB.
      EXPECT_NE(k.source.find("if ((unsigned)(it - (int)(blockIdx.x & 1) * 4) < 4u)"),
                std::string::npos)
          << k.source;
      EXPECT_NE(k.source.find("3 chunks of 128 rows each in flight"), std::string::npos)
          << k.source;
    }
    EXPECT_EQ(k.grid[0], 96u) << "48 blocks of 128 columns, two each";
    EXPECT_GT(k.shared_bytes, 227u * 1024 / 2) << "one block of a pair per multiprocessor";
    compile_all(g, "rmsnorm_linear " + name, seen, h200);
  }
  // A for-loop of one iteration cannot be halved: both blocks of the pair stage all of it.
  const KernelLaunch whole = lower(variant("rmsnorm_linear", 1, "n128_k4096"), h200).kernels.at(0);
  EXPECT_NE(whole.source.find(pair), std::string::npos);
  EXPECT_EQ(whole.source.find("(it - (int)(blockIdx.x & 1)"), std::string::npos) << whole.source;
  // 96 blocks of 64 columns would be two waves as pairs: the TMA streams them as before.
  const KernelLaunch single = lower(variant("rmsnorm_linear", 1, "n64_k2048"), h200).kernels.at(0);
  EXPECT_EQ(single.source.find(pair), std::string::npos);
  EXPECT_NE(single.source.find("B streamed by TMA"), std::string::npos);
  EXPECT_EQ(single.grid[0], 96u);
  // Gate and up by TMA in one loop stay single blocks (they were slower as pairs)...
  const ir::KernelGraph gated = variant("gated_mlp", 1, "n64_k1024");
  const KernelLaunch g = lower(gated, h200).kernels.at(0);
  EXPECT_EQ(g.source.find(pair), std::string::npos) << g.source;
  EXPECT_NE(g.source.find("B streamed by TMA for 2 matmul(s)"), std::string::npos) << g.source;
  EXPECT_EQ(g.tensor_maps.size(), 2u);
  EXPECT_EQ(g.grid[0], 64u);
  // ...and through registers, where there are no tensor maps, both split over pairs.
  CodegenOptions no_maps = h200;
  no_maps.tensor_maps = false;
  const KernelLaunch r = lower(gated, no_maps).kernels.at(0);
  EXPECT_NE(r.source.find(pair), std::string::npos) << r.source;
  EXPECT_NE(r.source.find("B streamed through registers"), std::string::npos) << r.source;
  EXPECT_EQ(r.grid[0], 128u);
  compile_all(gated, "gated_mlp n64_k1024 registers", seen, no_maps);
  compile_all(gated, "gated_mlp n64_k1024", seen, h200);
  for (int64_t m : {3, 16})
    compile_all(cuda_suite::register_stream_graph(ir::DType::f16, m), fmt::format("pairs m{}", m),
                seen, h200);
  // Without clusters, no pairs.
  CodegenOptions off = no_maps;
  off.clusters = false;
  const KernelLaunch unpaired = lower(gated, off).kernels.at(0);
  EXPECT_EQ(unpaired.source.find(pair), std::string::npos);
  EXPECT_EQ(unpaired.grid[0], 64u);
}

// The for-loop's passes over 16-bit tiles take runs of eight elements by one 16-byte load
// (codegen_block_vector.cpp): rmsnorm_linear bs8's staging of X·G for the stream (16 rows, G
// broadcast over them) and its sum of squares. At bs1 the staging has 2 rows, fewer runs than
// threads, and stays an element a thread; the sum of squares still takes runs.
TEST(CudaCompile, ForLoopPassesLoadRunsOfEight) {
  const CodegenOptions h200 = kH200Pairs;
  std::set<std::string> seen;
  for (int bs : {1, 8}) {
    const std::string name = bs == 1 ? "n64_k512" : "n128_k512";
    for (cuda_suite::Variant& v : cuda_suite::variants("rmsnorm_linear", bs)) {
      if (v.name != name) continue;
      const std::string src = lower(v.graph, h200).kernels.at(0).source;
      // X's run, and G's run at the same columns.
      const bool staged_runs =
          src.find("for (int e8 = threadIdx.x; e8 < 1024; e8 += 256)") != std::string::npos;
      EXPECT_EQ(staged_runs, bs == 8) << src;
      if (bs == 8) {
        EXPECT_NE(src.find("const uint4 x0_1 = *reinterpret_cast<const uint4*>(t0 + "),
                  std::string::npos)
            << src;
        EXPECT_NE(src.find("const uint4 x1_0 = *reinterpret_cast<const uint4*>(t1 + "),
                  std::string::npos)
            << src;
      }
      // The sum of squares reads each run once for both factors.
      EXPECT_NE(src.find("const uint4 x0_0 = *reinterpret_cast<const uint4*>(t0 + ((((oo * 512 + "
                         "w * 512 + r * 8)))"),
                std::string::npos)
          << src;
      EXPECT_NE(src.find("(yr_to_f(reinterpret_cast<const yr_half*>(&x0_0)[u])) * "
                         "(yr_to_f(reinterpret_cast<const yr_half*>(&x0_0)[u]))"),
                std::string::npos)
          << src;
      compile_all(v.graph, "rmsnorm_linear " + name, seen, h200);
    }
  }
  ASSERT_EQ(seen.size(), 2u) << "both variants found";
  // An f32 tile's run of eight is eight loads.
  ir::KernelGraph g;
  auto x = g.input("X", {2, 1024}, ir::DType::f32);
  auto gain = g.input("G", {1024}, ir::DType::f32);
  auto w = g.input("W", {1024, 256}, ir::DType::f32);
  g.mark_output(cuda_suite::rmsnorm_linear_node(g, x, gain, w, 64, 256, "norm_linear"), "a");
  const std::string f32 = lower(g, h200).kernels.at(0).source;
  EXPECT_EQ(f32.find("const uint4 x"), std::string::npos) << f32;
  EXPECT_NE(f32.find("for (int u = 0; u < 8; ++u)"), std::string::npos) << f32;
  compile_all(g, "rmsnorm_linear f32", seen, h200);
}

TEST(CudaCompile, UnfusedSuiteGraphs) {
  std::set<std::string> seen;
  for (const suite::WorkloadInfo& w : suite::workloads())
    compile_all(suite::build_workload(w.name, 1, ir::DType::f16), w.name + " unfused", seen);
}

// Softmax's row kernel takes one exponential an element where its row is in registers: ex2.approx
// for a 16-bit output, expf for f32. A row too long for registers computes it again per pass.
TEST(CudaCompile, SoftmaxTakesOneExponentialAnElement) {
  auto softmax_graph = [](ir::DType t, int64_t len) {
    ir::KernelGraph g;
    g.mark_output(g.softmax(g.input("X", {8, len}, t), 1), "out");
    return g;
  };
  auto source = [&](ir::DType t, int64_t len) {
    const Program p = lower(softmax_graph(t, len));
    EXPECT_EQ(p.kernels.size(), 1u);
    return p.kernels.at(0).source;
  };
  const std::string half = source(ir::DType::f16, 32000);
  const std::string body = half.substr(half.find("__global__"));
  EXPECT_EQ(occurrences(body, "yr_exp_ftz("), 1) << body;
  EXPECT_EQ(occurrences(body, "expf("), 0) << body;
  EXPECT_NE(body.find("v[j] = e;"), std::string::npos) << body;
  const std::string single = source(ir::DType::f32, 32000);
  const std::string f32_body = single.substr(single.find("__global__"));
  EXPECT_EQ(occurrences(f32_body, "expf("), 1) << f32_body;
  EXPECT_EQ(occurrences(f32_body, "yr_exp_ftz("), 0) << f32_body;
  const std::string long_row = source(ir::DType::f16, 40000);
  EXPECT_EQ(occurrences(long_row.substr(long_row.find("__global__")), "yr_exp_ftz("), 2);
  std::set<std::string> seen;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (int64_t len : {int64_t{3000}, int64_t{32000}, int64_t{40000}})
      compile_all(softmax_graph(t, len), fmt::format("softmax of {} {}", len, ir::dtype_name(t)),
                  seen);
}

// Contiguous 16-bit rows of up to 8192 elements in whole runs of 8 go through the row ops in
// 16-byte vectors, 256 threads a block; f32 rows, longer rows, rows of other lengths and rows
// along a non-innermost dim keep element-wise access.
TEST(CudaCompile, RowOpsMoveRunsOfEight) {
  auto lowered = [](ir::DType t, int64_t len, bool across) {
    ir::KernelGraph g;
    auto x = g.input("X", across ? ir::Dims{len, 4} : ir::Dims{16, len}, t);
    g.mark_output(across ? g.softmax(x, 0) : g.rms_norm(x, {len}, g.input("G", {len}, t)), "out");
    return lower(g).kernels.at(0);
  };
  const KernelLaunch runs = lowered(ir::DType::f16, 4096, false);
  EXPECT_EQ(runs.threads, 256u);
  EXPECT_EQ(occurrences(runs.source, "*reinterpret_cast<const uint4*>(in0"), 1) << runs.source;
  EXPECT_EQ(occurrences(runs.source, "*reinterpret_cast<uint4*>(out0"), 1) << runs.source;
  EXPECT_EQ(occurrences(runs.source, "#define PER 16"), 1) << runs.source;
  const KernelLaunch widest = lowered(ir::DType::bf16, 8192, false);
  EXPECT_EQ(widest.threads, 256u);
  EXPECT_EQ(occurrences(widest.source, "#define PER 32"), 1) << widest.source;
  for (const KernelLaunch& k :
       {lowered(ir::DType::f32, 4096, false), lowered(ir::DType::f16, 32000, false),
        lowered(ir::DType::f16, 4100, false), lowered(ir::DType::f16, 4096, true)}) {
    EXPECT_EQ(occurrences(k.source, "uint4"), 0) << k.what << ":\n" << k.source;
  }
  std::set<std::string> seen;
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16})
    for (int64_t len : {int64_t{24}, int64_t{3000}, int64_t{4096}, int64_t{8192}}) {
      ir::KernelGraph g;
      auto x = g.input("X", {4, len}, t);
      g.mark_output(g.layer_norm(x, {len}), "ln");
      g.mark_output(g.softmax(x, 1), "sm");
      g.mark_output(g.rms_norm(x, {len}, g.input("G", {len}, t)), "rms");
      compile_all(g, fmt::format("row ops in runs, {} {}", len, ir::dtype_name(t)), seen);
    }
}

// On sm_90 a few long rows each spread over a cluster of blocks that meet in distributed shared
// memory; many rows, rows of 8192 or less, and devices without clusters keep a block a row.
TEST(CudaCompile, LongRowsSpreadOverClusters) {
  auto lowered = [](ir::KernelGraph g, const CodegenOptions& options = kH200Pairs) {
    return lower(g, options).kernels.at(0);
  };
  auto rows_graph = [](ir::DType t, ir::Dims dims, bool softmax) {
    ir::KernelGraph g;
    auto x = g.input("X", dims, t);
    const int64_t len = dims.back();
    g.mark_output(softmax ? g.softmax(x, 1) : g.rms_norm(x, {len}, g.input("G", {len}, t)), "out");
    return g;
  };
  // gemm_softmax's 8 rows of 32000: 8 blocks a row, 4000 elements a block in runs of eight.
  const KernelLaunch spread = lowered(rows_graph(ir::DType::f16, {8, 32000}, true));
  EXPECT_EQ(occurrences(spread.source, "__cluster_dims__(8, 1, 1)"), 1) << spread.source;
  EXPECT_EQ(spread.grid[0], 64u);
  EXPECT_EQ(spread.threads, 256u);
  EXPECT_EQ(occurrences(spread.source, "hi = min(lo + 4000, 32000)"), 1) << spread.source;
  EXPECT_EQ(occurrences(spread.source, "*reinterpret_cast<const uint4*>(in0"), 1);
  EXPECT_EQ(occurrences(spread.source, "#define PER 16"), 1) << spread.source;
  EXPECT_EQ(occurrences(spread.source, "yr_cluster_reduce(v, scratch, &slots"), 1);
  // A norm's 3 rows of 40000 f32: element by element, 5000 a block.
  const KernelLaunch norm = lowered(rows_graph(ir::DType::f32, {3, 40000}, false));
  EXPECT_EQ(norm.grid[0], 24u);
  EXPECT_EQ(occurrences(norm.source, "hi = min(lo + 5000, 40000)"), 1) << norm.source;
  EXPECT_EQ(occurrences(norm.source, "uint4"), 0);
  // Many rows fill the multiprocessors by themselves: 100 x 2 blocks exceed 132.
  const KernelLaunch many = lowered(rows_graph(ir::DType::f16, {100, 32000}, true));
  EXPECT_EQ(many.grid[0], 100u);
  EXPECT_EQ(occurrences(many.source, "__cluster_dims__"), 0);
  // 40 rows take clusters of 2 (40 x 4 blocks would exceed 132).
  EXPECT_EQ(lowered(rows_graph(ir::DType::f16, {40, 32000}, true)).grid[0], 80u);
  EXPECT_EQ(occurrences(lowered(rows_graph(ir::DType::f16, {8, 8192}, true)).source, "cluster"), 0);
  CodegenOptions off = kH200Pairs;
  off.clusters = false;
  EXPECT_EQ(lowered(rows_graph(ir::DType::f16, {8, 32000}, true), off).grid[0], 8u);
  std::set<std::string> seen;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (int64_t len : {int64_t{32000}, int64_t{40003}}) {
      ir::KernelGraph g;
      auto x = g.input("X", {3, len}, t);
      g.mark_output(g.softmax(x, 1), "sm");
      g.mark_output(g.layer_norm(x, {len}), "ln");
      g.mark_output(g.rms_norm(x, {len}, g.input("G", {len}, t)), "rms");
      // A column of a row-major tensor: a long row at a stride.
      g.mark_output(g.softmax(g.input("Y", {len, 3}, t), 0), "across");
      compile_all(g, fmt::format("long rows over clusters, {} {}", len, ir::dtype_name(t)), seen,
                  kH200Pairs);
    }
}

TEST(CudaCompile, BlockTestGraphs) {
  using namespace ir::testing;
  std::set<std::string> seen;
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    compile_all(rmsnorm_linear_ugraph(t), "rmsnorm_linear_ugraph", seen);
    auto one = [&](ir::BlockGraph body, const std::string& name) {
      compile_all(single_fused_graph(std::move(body), name), name, seen);
    };
    one(gated_mlp_block(t), "gated_mlp");
    one(attention_exp_block(t), "attention_exp");
    one(attention_softmax_block(t), "attention_softmax");
    one(attention_mean_block(t), "attention_mean");
    one(split_k_block(t), "split_k");
  }
}

// Key-split attention as the search splits it (search/split_reduced.cpp), an online-softmax body
// at the gqa workload's shape: both finishes, the loop over the splits and the one view of the
// stacked partials (rank-4 tiles, the splits' dim reduced at once), lower and compile.
TEST(CudaCompile, KeySplitFinishesOfTheSearchCompile) {
  const ir::KernelGraph g = ir::testing::softmax_attention_graph(ir::DType::f16, {2, 256, 64},
                                                                 {2, 64, 4096}, {2, 4096, 64});
  const ir::BlockGraph b = ir::testing::online_softmax_attention_block(
      g.type(g.inputs()[0]), g.type(g.inputs()[1]), g.type(g.inputs()[2]), 16, 128);
  std::set<std::string> seen;
  std::string why;
  const std::optional<search::SplitBodies> loop = search::split_over_loop(b, 8, why);
  ASSERT_TRUE(loop) << why;
  compile_all(search::split_kernel_graph(g, *loop), "key split, loop finish", seen);
  for (int64_t refine : {1, 8}) {
    const std::optional<search::SplitBodies> view = search::split_one_view(b, 8, why, 1, refine);
    ASSERT_TRUE(view) << why;
    compile_all(search::split_kernel_graph(g, *view), fmt::format("one view, {}x", refine), seen);
  }
}

// A row-wise chain of one loop iteration keeps its tiles in registers (codegen_block_rows.cpp):
// no shared-memory tiles, no cp.async, no barrier but the norms' reductions. Products do not.
TEST(CudaCompile, RowChainsStayInRegisters) {
  const std::string marker = "Register rows";
  std::set<std::string> seen;
  // The kernel itself, past the prelude's device functions.
  auto body = [](const KernelLaunch& k) { return k.source.substr(k.source.find("extern \"C\"")); };
  const KernelLaunch ntrans = lower(cuda_suite::variants("ntrans", 1).at(0).graph).kernels.at(0);
  EXPECT_NE(ntrans.source.find(marker), std::string::npos) << ntrans.source;
  EXPECT_EQ(body(ntrans).find("yr_cp_async16("), std::string::npos) << ntrans.source;
  EXPECT_EQ(body(ntrans).find("__syncthreads"), std::string::npos) << ntrans.source;
  EXPECT_LE(ntrans.shared_bytes, 64u) << "the block reductions' scratch only";
  // Two rms_norms, a block reduction each.
  EXPECT_EQ(occurrences(ntrans.source, "yr_block_reduce(a, red"), 2) << ntrans.source;
  CodegenOptions off;
  off.register_rows = false;
  const KernelLaunch staged =
      lower(cuda_suite::variants("ntrans", 1).at(0).graph, off).kernels.at(0);
  EXPECT_EQ(staged.source.find(marker), std::string::npos);
  EXPECT_NE(body(staged).find("yr_cp_async16("), std::string::npos);
  const KernelLaunch product =
      lower(cuda_suite::variants("rmsnorm_linear", 1).at(0).graph).kernels.at(0);
  EXPECT_EQ(product.source.find(marker), std::string::npos);
  for (ir::DType t : {ir::DType::f32, ir::DType::f16, ir::DType::bf16}) {
    const ir::KernelGraph rows = cuda_suite::row_chain_graph(t, 3, 4096);
    EXPECT_NE(lower(rows).kernels.at(0).source.find(marker), std::string::npos);
    compile_all(rows, fmt::format("row chain {}", ir::dtype_name(t)), seen);
    compile_all(rows, fmt::format("row chain {}, shared memory", ir::dtype_name(t)), seen, off);
  }
  // A width that leaves a thread no whole 16-byte vectors goes through shared memory.
  EXPECT_EQ(
      lower(cuda_suite::row_chain_graph(ir::DType::f16, 3, 1000)).kernels.at(0).source.find(marker),
      std::string::npos);
}

// Attention's block graph at 16-bit types takes the register chain (codegen_block_chain.cpp):
// no f32 score tile, no staged copy of the exponentials, no barrier inside the key loop's body.
TEST(CudaCompile, AttentionTakesTheRegisterChain) {
  for (ir::DType t : {ir::DType::f16, ir::DType::bf16}) {
    ir::KernelGraph g;
    auto q = g.input("Q", {2, 128, 64}, t);
    auto k = g.input("K", {2, 64, 512}, t);
    auto v = g.input("V", {2, 512, 64}, t);
    g.mark_output(cuda_suite::attention_node(g, q, k, v, 64, 64), "out");
    const Program program = lower(g, {});
    ASSERT_EQ(program.kernels.size(), 1u);
    const std::string& src = program.kernels[0].source;
    EXPECT_NE(src.find("register chain"), std::string::npos) << src;
    EXPECT_EQ(src.find("unsigned short* const sa"), std::string::npos) << src;
    const size_t loop = src.find("for (int it = 0;");
    const size_t end = src.find("\n  }\n  __syncthreads();", loop);
    ASSERT_NE(end, std::string::npos) << src;
    const std::string body = src.substr(loop, end - loop);
    EXPECT_EQ(occurrences(body, "__syncthreads"), 1)
        << "one barrier per iteration, none in the chain:\n"
        << src;
    // exp as ex2.approx.ftz, without __expf's range fix-ups.
    EXPECT_NE(body.find("yr_exp_ftz("), std::string::npos) << src;
    EXPECT_EQ(body.find("__expf"), std::string::npos) << src;
  }
  // No chain for f32 (no tensor-core path), nor for values 8 columns wide (the chain takes C's
  // fragments two 8-column tiles at a time).
  for (auto [t, dv] : {std::pair{ir::DType::f32, 64}, {ir::DType::f16, 8}}) {
    ir::KernelGraph g;
    auto q = g.input("Q", {2, 128, 64}, t);
    auto k = g.input("K", {2, 64, 512}, t);
    auto v = g.input("V", {2, 512, dv}, t);
    g.mark_output(cuda_suite::attention_node(g, q, k, v, 64, 64), "out");
    EXPECT_EQ(lower(g, {}).kernels[0].source.find("register chain"), std::string::npos)
        << ir::dtype_name(t) << " dv" << dv;
  }
}

// On sm_90a, gqa's chains of 128 query rows run their products on warpgroups
// (codegen_block_wgmma.cpp): K's and V's tiles swizzled, read by wgmma, not by ldmatrix; the
// loop fences the async proxy before its barrier. Those kernels compile for sm_90a. Chains of 64
// rows, which two warps share, keep mma.sync.
TEST(CudaCompile, AttentionChainsTakeWarpgroupProducts) {
  const CodegenOptions h200{.max_shared_bytes = 227 * 1024,
                            .multiprocessors = 132,
                            .tensor_maps = true,
                            .clusters = true,
                            .wgmma = true};
  std::set<std::string> seen;
  int by_wgmma = 0;
  for (int bs : {1, 8})
    for (const cuda_suite::Variant& v : cuda_suite::variants("gqa", bs)) {
      const std::string what = fmt::format("gqa bs{} {}", bs, v.name);
      const Program program = lower(v.graph, h200);
      for (const KernelLaunch& k : program.kernels) {
        if (k.source.find("register chain") == std::string::npos) continue;
        const bool wide = v.name.find("qb128") != std::string::npos;
        EXPECT_EQ(k.arch_specific, wide) << what;
        EXPECT_EQ(k.source.find("wgmma.mma_async") != std::string::npos, wide) << what;
        if (!wide) continue;
        ++by_wgmma;
        const size_t loop = k.source.find("for (int it = 0;");
        ASSERT_NE(loop, std::string::npos) << what;
        const std::string body = k.source.substr(loop);
        EXPECT_NE(body.find("register chain by wgmma"), std::string::npos) << what;
        EXPECT_EQ(body.find("yr_ldmatrix_x4_trans"), std::string::npos) << what;
        EXPECT_LT(body.find("yr_fence_proxy_async();"), body.find("__syncthreads();")) << what;
      }
      compile_all(v.graph, what, seen, h200);
    }
  EXPECT_GT(by_wgmma, 0);
}

// A chain whose warps each own whole rows (qb 128: eight row groups, no column split) stores its
// products and row sums once, without zeroing the accumulators first. With qb 64 two warps share
// each row and add in turns.
TEST(CudaCompile, SplitAttentionStoresItsPartialsOnce) {
  for (auto [qb, once] : {std::pair{128, true}, {64, false}}) {
    ir::KernelGraph g;
    auto q = g.input("Q", {2, 256, 64}, ir::DType::f16);
    auto k = g.input("K", {2, 64, 4096}, ir::DType::f16);
    auto v = g.input("V", {2, 4096, 64}, ir::DType::f16);
    g.mark_output(cuda_suite::attention_split_node(g, q, k, v, qb, 64, 32, 2), "out");
    const Program program = lower(g, {});
    ASSERT_EQ(program.kernels.size(), 2u);
    const std::string& src = program.kernels[0].source;
    ASSERT_NE(src.find("register chain"), std::string::npos) << src;
    const bool zeroes = src.find("[e] = 0.0f;") != std::string::npos;
    const bool adds = src.find("+= o") != std::string::npos;
    const bool stores = src.find("[r0 * 64 + oc] = o") != std::string::npos;
    EXPECT_EQ(zeroes, !once) << "qb " << qb << ":\n" << src;
    EXPECT_EQ(adds, !once) << "qb " << qb << ":\n" << src;
    EXPECT_EQ(stores, once) << "qb " << qb << ":\n" << src;
  }
}

// The (bytes, offset) of each view slot of `program`, in order.
std::vector<std::pair<size_t, size_t>> view_slots(const Program& program) {
  std::vector<std::pair<size_t, size_t>> views;
  for (const Slot& s : program.slots)
    if (s.kind == SlotKind::view) views.emplace_back(s.bytes, s.offset);
  return views;
}

// A split whose parts are contiguous, 256-byte aligned runs of its operand (one row) costs no
// kernel: each part is a view of the operand's slot. Parts marked as outputs take a copy. Two
// rows, or a part off the alignment, keep one kernel a part.
TEST(CudaCompile, SplitsOfOneRowAreViews) {
  auto split_graph = [](int64_t rows, int64_t first) {
    ir::KernelGraph g;
    auto x = g.input("X", {rows, 640}, ir::DType::f16);
    auto parts = g.split(g.exp(x), 1, {first, 640 - first});
    g.mark_output(parts[0], "first");
    g.mark_output(g.exp(parts[1]), "second");
    return g;
  };
  const Program views = lower(split_graph(1, 128));
  ASSERT_EQ(views.kernels.size(), 3u) << "exp, exp, and the copy of the output part";
  EXPECT_EQ(views.kernels[2].name, "yr_copy");
  EXPECT_EQ(view_slots(views), (std::vector<std::pair<size_t, size_t>>{{256, 0}, {1024, 256}}));
  EXPECT_EQ(views.kernels[1].args[0], int(views.slots.size() - 1))
      << "the second exp reads the view";
  for (auto [rows, first] : {std::pair<int64_t, int64_t>{2, 128}, {1, 100}}) {
    const Program copies = lower(split_graph(rows, first));
    EXPECT_EQ(copies.kernels.size(), 4u) << rows << " rows, first part " << first;
    EXPECT_TRUE(view_slots(copies).empty());
  }
}

// A split of several rows that only fused kernels read costs no kernel either: its parts are
// strided views, which the fused kernel addresses with the operand's row stride. Read by a plain
// kernel, the same split keeps its copy kernels.
TEST(CudaCompile, SplitsReadByFusedKernelsAreStridedViews) {
  auto split_graph = [](bool plain_reader) {
    ir::KernelGraph g;
    auto x = g.input("X", {8, 1024}, ir::DType::f16);
    auto parts = g.split(g.exp(x), 1, {512, 512});
    g.mark_output(cuda_suite::silu_mul_node(g, parts[0], parts[1], 64), "out");
    if (plain_reader) g.mark_output(g.exp(parts[1]), "again");
    return g;
  };
  const Program views = lower(split_graph(false));
  ASSERT_EQ(views.kernels.size(), 2u) << "exp and silu_mul, no copies";
  EXPECT_EQ(view_slots(views), (std::vector<std::pair<size_t, size_t>>{{8192, 0}, {8192, 1024}}));
  // Gate and up rows 1024 elements apart; the output's 512.
  const std::string& silu_mul = views.kernels[1].source;
  EXPECT_EQ(occurrences(silu_mul, "% 8) * 1024ll"), 2) << silu_mul;
  EXPECT_EQ(occurrences(silu_mul, "% 8) * 512ll"), 1) << silu_mul;
  std::set<std::string> seen;
  compile_all(split_graph(false), "strided split views", seen);
  const Program copies = lower(split_graph(true));
  EXPECT_EQ(copies.kernels.size(), 5u) << "exp, two split copies, silu_mul, exp";
  EXPECT_TRUE(view_slots(copies).empty());
}

// A generated kernel that does not compile must fail loudly, naming the kernel.
TEST(CudaCompile, BrokenSourceFails) {
  std::string reason;
  ASSERT_TRUE(nvrtc_available(&reason)) << reason;
  try {
    compile_cuda("extern \"C\" __global__ void k() { undefined_thing(); }", "sm_90", "broken");
    FAIL() << "a broken kernel compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace yirage::backend::cuda
