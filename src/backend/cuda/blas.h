// Kernel-level matmuls as library calls (codegen.h's LibraryGemm). Internal to backend/cuda.
//
// One BlasHandle serves every module of the backend, on the backend's stream, with a workspace
// of its own so that calls captured into a CUDA graph allocate nothing. The first time a module
// needs a product of given sizes, strides and dtype, prepare() times its candidates on this GPU
// and keeps the fastest for the rest of the process: cuBLAS's default algorithm and up to eight
// from cuBLASLt's heuristic. Each candidate runs as calls captured into a CUDA graph and
// replayed, the way modules run, on scratch operands. Why time rather than take the heuristic's
// first answer: on the H200 the default and the heuristic's first choice left 7-9% on the Llama
// MLP's down projection and 2-3% on its gate_up and on gemm_softmax's product
// (git show 94f00b8:bench/results/cublaslt_probe_h200.txt).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/codegen.h"
#include "backend/cuda/driver.h"

namespace yirage::backend::cuda {

class BlasHandle {
 public:
  // Needs blas().loaded.
  BlasHandle(CUcontext context, CUstream stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  // Chooses how `g` runs, timing the candidates the first time this product is seen. Must not
  // be called while the stream is being captured. `what` names the node, for errors.
  void prepare(const LibraryGemm& g, std::string_view what);

  // Enqueues C = A · B (row-major, `g.batches` strided products), or C = A · B + D where
  // `g.adds`, on the stream, the way prepare() chose; prepare() must have seen `g`.
  void gemm(const LibraryGemm& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d,
            std::string_view what) const;

  // Enqueues a group's products (`g.group` > 1): `pointers` is a device array of 3 x g.group
  // addresses, laid out by group_pointers(). cuBLAS's default algorithm runs it, untimed.
  void gemm_group(const LibraryGemm& g, CUdeviceptr pointers, std::string_view what) const;
  // That array's contents: A once per product, then the B_i, then the C_i (`args` as in
  // KernelLaunch: A, B_0, C_0, B_1, C_1, ...), in the order cuBLAS's column-major call takes them.
  static std::vector<CUdeviceptr> group_pointers(const std::vector<CUdeviceptr>& args);

 private:
  struct Plan;
  // How `plan` runs: "cublas default" or "cublasLt candidate N of M", with the times measured.
  static std::string describe(const Plan& plan);
  const Plan& plan_of(const LibraryGemm& g, std::string_view what) const;
  void run(const LibraryGemm& g, const Plan& plan, int candidate, CUdeviceptr a, CUdeviceptr b,
           CUdeviceptr c, CUdeviceptr d, std::string_view what) const;
  // Fills plan.lt with cuBLASLt's heuristic candidates for `g`, or says in plan.untimed why none.
  void find_candidates(const LibraryGemm& g, Plan& plan, std::string_view what) const;
  // Times the default and plan.lt's candidates; keeps the fastest in plan.chosen.
  void time_candidates(const LibraryGemm& g, Plan& plan) const;
  double time_candidate(const LibraryGemm& g, const Plan& plan, int candidate, CUdeviceptr a,
                        CUdeviceptr b, CUdeviceptr c, CUdeviceptr d) const;

  CUcontext context_;
  CUstream stream_;
  CUdeviceptr workspace_ = 0;
  CublasHandle handle_ = nullptr;
  CublasLtHandle lt_ = nullptr;  // null without cuBLASLt
  mutable std::mutex mutex_;
  std::map<LibraryGemm, std::unique_ptr<Plan>> plans_;
};

}  // namespace yirage::backend::cuda
