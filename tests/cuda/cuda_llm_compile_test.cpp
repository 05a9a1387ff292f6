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

}  // namespace
}  // namespace yirage::backend::cuda
