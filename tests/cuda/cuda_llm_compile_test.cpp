// Compile-only: every kernel the engine's block graphs lower to on the cuda backend (quant_matmul
// over Q4_0, Q4_1 and Q8_0 blocks, the norms and element-wise ops around them), and the embedding
// and rope kernels, for SmolLM2-135M and a Llama-3-8B shape, compile with NVRTC for sm_80 and
// sm_90. These are the graphs as built, before the search fuses around the products; the search's
// own µGraphs are compiled by cuda_search_test.cpp. Needs NVRTC, not a GPU; fails, rather than
// skips, where NVRTC is missing.
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"
#include "llm_shapes.h"
#include "paged_attention_cases.h"
#include "support/error.h"

namespace yirage::backend::cuda {
namespace {

// The H200 as the backend describes it: the opt-in shared memory sets how many rows of x one
// quant_matmul block quantizes.
const CodegenOptions kH200{.max_shared_bytes = 227 * 1024, .multiprocessors = 132};

// Lowers `graph` and compiles each kernel not compiled before for sm_80 and sm_90; returns how
// many of its kernels lower an op of `ops`.
int compile_all(const ir::KernelGraph& graph, const std::string& what, std::set<std::string>& seen,
                const std::set<std::string>& ops) {
  std::string reason;
  if (!nvrtc_available(&reason)) {
    ADD_FAILURE() << "the CUDA compile test needs NVRTC (the CUDA toolkit's libnvrtc): " << reason;
    return 0;
  }
  const Program program = lower(graph, kH200);
  int of_ops = 0;
  for (const KernelLaunch& k : program.kernels) {
    for (const std::string& op : ops) of_ops += k.what.find("(" + op + ")") != std::string::npos;
    if (k.gemm || !seen.insert(k.source).second) continue;
    EXPECT_TRUE(k.waits_on_prior_grids) << what << ": " << k.what;
    for (const char* arch : {"sm_80", "sm_90"}) {
      try {
        EXPECT_FALSE(compile_cuda(k.source, arch, k.name).cubin.empty())
            << what << ": " << k.what << " for " << arch;
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": " << e.what() << "\n--- source ---\n" << k.source;
      }
    }
  }
  return of_ops;
}

TEST(CudaLlmCompile, EveryBlockGraphOfTheEngineLowersAndCompiles) {
  std::set<std::string> seen;
  for (const cuda_llm::ModelShape& m : cuda_llm::model_shapes()) {
    int products = 0;
    for (const llm::NamedGraph& g : llm::fused_block_graphs(m.config, cuda_llm::shaped_weights(m)))
      products += compile_all(g.graph, m.name + ": " + g.name, seen, {"quant_matmul"});
    // Per bucket of rows (64, 16, 4, 1) q, k, v, o, gate, up and down, then the LM head.
    EXPECT_EQ(products, 4 * 7 + 1) << m.name;
  }
}

TEST(CudaLlmCompile, EmbeddingAndRopeInBothConventionsLowerAndCompile) {
  std::set<std::string> seen;
  for (const cuda_llm::ModelShape& m : cuda_llm::model_shapes())
    for (int rows : {1, 64}) {
      int ops = 0;
      for (const llm::NamedGraph& g : cuda_llm::embedding_and_rope_graphs(m.config, rows))
        ops += compile_all(g.graph, m.name + ": " + g.name, seen, {"embedding", "rope"});
      EXPECT_EQ(ops, 1 + 2 * 2) << m.name;
    }
}

// paged_attention at each model's heads, for one row and for 64: the pool copy, the appends and
// the attention, split over keys with a combine where one row's heads are too few for the GPU.
TEST(CudaLlmCompile, PagedAttentionLowersAndCompiles) {
  std::set<std::string> seen;
  for (const cuda_llm::ModelShape& m : cuda_llm::model_shapes())
    for (size_t rows : {1, 64}) {
      const paged_attention_cases::Batch b{m.config.n_head,
                                           m.config.n_head_kv,
                                           m.config.head_dim,
                                           256,
                                           16,
                                           32,
                                           std::vector<int32_t>(rows, 0),
                                           std::vector<std::vector<int32_t>>(rows)};
      // One row of few heads splits the keys: a combine follows the attention.
      EXPECT_EQ(compile_all(paged_attention_cases::graph_of(b), m.name, seen, {"paged_attention"}),
                rows == 1 ? 4 : 3)
          << m.name << ", " << rows << " rows";
    }
}

// A row of activations longer than a block's shared memory can quantize is refused with the
// numbers, at lowering, not at launch.
TEST(CudaLlmCompile, ARowTooLongForSharedMemoryIsAnErrorNamingTheNode) {
  ir::KernelGraph g;
  const ir::TensorRef x = g.input("x", {1, 32768}, ir::DType::f32);
  const ir::TensorRef w = g.input("w", {8, 32768 / 32 * 18}, ir::DType::u8);
  g.mark_output(g.quant_matmul(x, w, ir::QuantFormat::q4_0), "y");
  try {
    lower(g, CodegenOptions{.max_shared_bytes = 32 * 1024});
    ADD_FAILURE() << "lowered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quant_matmul"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes of shared memory"), std::string::npos) << e.what();
  }
}

// bf16 weights at more than 8 rows take the tensor-core form (its numerics are held to the
// reference by CudaLlmOps on a GPU); one row, f16 weights and narrow products stay the streaming
// GEMV. Each form compiles for both architectures.
TEST(CudaLlmCompile, BatchedBf16ProductsTakeTensorCores) {
  auto lowered = [](ir::QuantFormat format, int64_t m, int64_t n) {
    ir::KernelGraph g;
    const ir::TensorRef x = g.input("x", {m, 4096}, ir::DType::f32);
    const ir::TensorRef w = g.input("w", {n, 4096 * 2}, ir::DType::u8);
    g.mark_output(g.quant_matmul(x, w, format), "y");
    const Program program = lower(g, kH200);
    EXPECT_EQ(program.kernels.size(), 1u);
    return program.kernels.at(0);
  };
  auto tensor_cores = [](const KernelLaunch& k) {
    return k.source.find("yr_mma(yr_bfloat") != std::string::npos;
  };
  const ir::QuantFormat bf16 = ir::QuantFormat::bf16, f16 = ir::QuantFormat::f16;
  for (int64_t m : {9, 16, 64, 100}) {
    const KernelLaunch k = lowered(bf16, m, 4096);
    EXPECT_TRUE(tensor_cores(k)) << m << " rows";
    EXPECT_EQ(k.grid[0], 4096u / 32);  // 4 groups of 8 weight rows a block
    EXPECT_EQ(k.grid[1], unsigned((m + 63) / 64)) << m << " rows";  // weights read once per 64 rows
  }
  EXPECT_EQ(lowered(bf16, 16, 1024).grid[0], 1024u / 8);  // 1 group: a block for every other SM
  // Warps split k as far as their partial sums fit 48 KiB of shared memory: 4 at 4 tiles of 4
  // groups, 16 at 4 tiles of 1 group (the 8B shape's k and v products).
  EXPECT_EQ(lowered(bf16, 64, 4096).threads, 4u * 32);
  EXPECT_EQ(lowered(bf16, 64, 1024).threads, 16u * 32);
  EXPECT_FALSE(tensor_cores(lowered(bf16, 8, 1024)));  // the GEMV reads the weights once here
  EXPECT_FALSE(tensor_cores(lowered(bf16, 1, 1024)));
  EXPECT_FALSE(tensor_cores(lowered(f16, 16, 1024)));
  EXPECT_FALSE(tensor_cores(lowered(bf16, 16, 64)));  // 8 blocks would leave most SMs idle
  std::set<std::string> seen;
  for (const KernelLaunch& k : {lowered(bf16, 16, 1024), lowered(bf16, 100, 1000),
                                lowered(bf16, 64, 4096), lowered(bf16, 64, 1024)})
    for (const char* arch : {"sm_80", "sm_90"})
      EXPECT_FALSE(compile_cuda(k.source, arch, k.name).cubin.empty()) << k.what << " " << arch;
}

}  // namespace
}  // namespace yirage::backend::cuda
