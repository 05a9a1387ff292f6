#include "backend/cuda/blas.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "support/error.h"

namespace yirage::backend::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
// cuBLASLt's heuristic is asked for this many algorithms; each one offered is timed.
constexpr int kLtCandidates = 8;
// A candidate's time: this many calls captured into one graph, replayed this many times after
// one warm-up replay. A small memset between the calls keeps each call from starting early
// under the one before, as it cannot in a module, where a different kernel precedes it (timed
// back to back, cuBLASLt's choices for the Llama MLP promised 3.4 µs and lost 1.2 µs in its
// graph: git show 94f00b8:bench/results/cublaslt_h200.txt).
constexpr int kTimedCalls = 8;
constexpr int kTimedReplays = 3;
// The default stays unless a candidate beats it by this fraction: smaller differences did not
// survive in the modules' graphs.
constexpr double kRequiredGain = 0.03;

int cuda_type(ir::DType t) {
  return t == ir::DType::f32 ? kCudaR32F : t == ir::DType::bf16 ? kCudaR16BF : kCudaR16F;
}

// Device memory for the life of a scope.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) {
    check(driver().api.mem_alloc(&ptr_, std::max<size_t>(bytes, 1)),
          fmt::format("cuMemAlloc({} bytes)", bytes));
  }
  ~DeviceMemory() { driver().api.mem_free(ptr_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  CUdeviceptr address() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
};

// Bytes that `batches` strided operands of `rows` x `cols` span.
size_t extent_bytes(const LibraryGemm& g, int64_t rows, int64_t cols, int64_t stride) {
  return size_t((g.batches - 1) * stride + rows * cols) * ir::dtype_size(g.dtype);
}

}  // namespace

// How one product runs: candidate 0 is cuBLAS's default algorithm, candidate i > 0 cuBLASLt's
// algorithm lt[i - 1] on the descriptors here.
struct BlasHandle::Plan {
  CublasLtMatmulDesc desc = nullptr;
  // Row-major C = A · B is column-major Cᵀ = Bᵀ · Aᵀ: cuBLASLt's first operand is our B.
  CublasLtLayout first = nullptr, second = nullptr, out = nullptr;
  std::vector<CublasLtHeuristicResult> lt;
  std::vector<double> micros;  // per candidate; infinity where it failed
  std::string untimed;         // why the candidates were not timed, if they were not
  int chosen = 0;
  double choosing_ms = 0;  // host time prepare() took: the heuristic and the timing

  ~Plan() {
    const BlasLtApi& api = blas().lt;
    if (out) api.layout_destroy(out);
    if (second) api.layout_destroy(second);
    if (first) api.layout_destroy(first);
    if (desc) api.matmul_desc_destroy(desc);
  }
};

BlasHandle::BlasHandle(CUcontext context, CUstream stream) : context_(context), stream_(stream) {
  const Blas& b = blas();
  check(driver().api.ctx_set_current(context_), "cuCtxSetCurrent");
  check(driver().api.mem_alloc(&workspace_, kWorkspaceBytes), "cuMemAlloc(cuBLAS workspace)");
  check_blas(b.api.create(&handle_), "cublasCreate");
  check_blas(b.api.set_stream(handle_, stream), "cublasSetStream");
  check_blas(b.api.set_workspace(handle_, reinterpret_cast<void*>(workspace_), kWorkspaceBytes),
             "cublasSetWorkspace");
  if (b.lt_loaded) check_blas(b.lt.create(&lt_), "cublasLtCreate");
}

BlasHandle::~BlasHandle() {
  driver().api.ctx_set_current(context_);
  plans_.clear();
  if (lt_) blas().lt.destroy(lt_);
  blas().api.destroy(handle_);
  driver().api.mem_free(workspace_);
}

void BlasHandle::prepare(const LibraryGemm& g, std::string_view what) {
  std::lock_guard lock(mutex_);
  if (plans_.contains(g)) return;
  const auto began = std::chrono::steady_clock::now();
  auto plan = std::make_unique<Plan>();
  plan->micros.assign(1, 0.0);
  // A zero stride broadcasts an operand over the batches, which cuBLAS's strided batches allow;
  // such products keep cuBLAS's default rather than rely on cuBLASLt doing the same.
  const bool broadcast = g.batches > 1 && (!g.stride_a || !g.stride_b || !g.stride_c);
  if (g.group > 1) {
    plan->untimed = "a batch over arrays of pointers runs cuBLAS's default";
  } else if (!lt_) {
    plan->untimed = blas().lt_reason;
  } else if (broadcast) {
    plan->untimed = "an operand is broadcast over the batches";
  } else {
    find_candidates(g, *plan, what);
  }
  if (!plan->lt.empty()) {
    try {
      time_candidates(g, *plan);
    } catch (const Error& e) {
      // No memory for the scratch operands, say: the default runs, untimed.
      plan->lt.clear();
      plan->micros.assign(1, 0.0);
      plan->chosen = 0;
      plan->untimed = fmt::format("the candidates could not be timed: {}", e.what());
    }
  }
  plan->choosing_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  const Plan& kept = *plans_.emplace(g, std::move(plan)).first->second;
  // YIRAGE_CUDA_BLAS_LOG=1 says what was chosen, for the results files.
  if (const char* log = std::getenv("YIRAGE_CUDA_BLAS_LOG"); log && std::string_view(log) == "1")
    fmt::print(stderr, "cuda: {} [{}x{}x{}, {} batches]: {}\n", what, g.m, g.k, g.n, g.batches,
               describe(kept));
}

void BlasHandle::find_candidates(const LibraryGemm& g, Plan& plan, std::string_view what) const {
  const BlasLtApi& api = blas().lt;
  const int type = cuda_type(g.dtype);
  check_blas(api.matmul_desc_create(&plan.desc, kCublasCompute32F, kCudaR32F),
             "cublasLtMatmulDescCreate");
  check_blas(api.layout_create(&plan.first, type, uint64_t(g.n), uint64_t(g.k), g.n),
             "cublasLtMatrixLayoutCreate");
  check_blas(api.layout_create(&plan.second, type, uint64_t(g.k), uint64_t(g.m), g.k),
             "cublasLtMatrixLayoutCreate");
  check_blas(api.layout_create(&plan.out, type, uint64_t(g.n), uint64_t(g.m), g.n),
             "cublasLtMatrixLayoutCreate");
  if (g.batches > 1) {
    const int batches = int(g.batches);
    for (auto [layout, stride] :
         {std::pair{plan.first, g.stride_b}, std::pair{plan.second, g.stride_a},
          std::pair{plan.out, g.stride_c}}) {
      check_blas(
          api.layout_set_attribute(layout, kCublasLtLayoutBatchCount, &batches, sizeof(batches)),
          "cublasLtMatrixLayoutSetAttribute(batch count)");
      check_blas(api.layout_set_attribute(layout, kCublasLtLayoutStridedBatchOffset, &stride,
                                          sizeof(stride)),
                 "cublasLtMatrixLayoutSetAttribute(batch stride)");
    }
  }
  CublasLtPreference preference = nullptr;
  check_blas(api.preference_create(&preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  int found = 0;
  CublasLtHeuristicResult results[kLtCandidates];
  int status = api.preference_set_attribute(preference, kCublasLtPreferenceMaxWorkspaceBytes,
                                            &workspace, sizeof(workspace));
  if (status == 0)
    status = api.algo_get_heuristic(lt_, plan.desc, plan.first, plan.second, plan.out, plan.out,
                                    preference, kLtCandidates, results, &found);
  api.preference_destroy(preference);
  // A product cuBLASLt offers nothing for keeps cuBLAS's default.
  if (status != 0 && status != kCublasStatusNotSupported)
    check_blas(status, fmt::format("cublasLtMatmulAlgoGetHeuristic for {}", what));
  for (int i = 0; i < found; ++i)
    if (results[i].state == 0 && results[i].workspace_bytes <= kWorkspaceBytes)
      plan.lt.push_back(results[i]);
  if (plan.lt.empty()) plan.untimed = "cuBLASLt offered no algorithm";
}

void BlasHandle::time_candidates(const LibraryGemm& g, Plan& plan) const {
  plan.micros.assign(plan.lt.size() + 1, std::numeric_limits<double>::infinity());
  // Scratch operands of small values (every byte 0x11): no infinities, no NaNs.
  const size_t a_bytes = extent_bytes(g, g.m, g.k, g.stride_a);
  const size_t b_bytes = extent_bytes(g, g.k, g.n, g.stride_b);
  const size_t c_bytes = extent_bytes(g, g.m, g.n, g.stride_c);
  const DeviceMemory a(a_bytes), b(b_bytes), c(c_bytes), d(g.adds ? c_bytes : 0);
  const DriverApi& api = driver().api;
  check(api.memset_d8_async(a.address(), 0x11, a_bytes, stream_), "cuMemsetD8Async");
  check(api.memset_d8_async(b.address(), 0x11, b_bytes, stream_), "cuMemsetD8Async");
  if (g.adds) check(api.memset_d8_async(d.address(), 0x11, c_bytes, stream_), "cuMemsetD8Async");
  for (size_t i = 0; i < plan.micros.size(); ++i) {
    try {
      plan.micros[i] = time_candidate(g, plan, int(i), a.address(), b.address(), c.address(),
                                      g.adds ? d.address() : 0);
    } catch (const Error&) {
      // A candidate that cannot run here is not chosen; the others still compete.
    }
  }
  const double bar = plan.micros[0] * (1.0 - kRequiredGain);
  for (size_t i = 1; i < plan.micros.size(); ++i)
    if (plan.micros[i] < bar && plan.micros[i] < plan.micros[size_t(plan.chosen)])
      plan.chosen = int(i);
}

double BlasHandle::time_candidate(const LibraryGemm& g, const Plan& plan, int candidate,
                                  CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                                  CUdeviceptr d) const {
  const DriverApi& api = driver().api;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUevent start = nullptr, stop = nullptr;
  auto release = [&] {
    if (exec) api.graph_exec_destroy(exec);
    if (graph) api.graph_destroy(graph);
    if (start) api.event_destroy(start);
    if (stop) api.event_destroy(stop);
  };
  try {
    check(api.stream_begin_capture(stream_, kCaptureModeThreadLocal), "cuStreamBeginCapture");
    try {
      for (int i = 0; i < kTimedCalls; ++i) {
        check(api.memset_d8_async(
                  c, 0, std::min<size_t>(256, extent_bytes(g, g.m, g.n, g.stride_c)), stream_),
              "cuMemsetD8Async");
        run(g, plan, candidate, a, b, c, d, "a timed candidate");
      }
    } catch (...) {
      api.stream_end_capture(stream_, &graph);
      throw;
    }
    check(api.stream_end_capture(stream_, &graph), "cuStreamEndCapture");
    check(api.graph_instantiate(&exec, graph, 0), "cuGraphInstantiate");
    check(api.event_create(&start, 0), "cuEventCreate");
    check(api.event_create(&stop, 0), "cuEventCreate");
    check(api.graph_launch(exec, stream_), "cuGraphLaunch");
    check(api.event_record(start, stream_), "cuEventRecord");
    for (int i = 0; i < kTimedReplays; ++i) check(api.graph_launch(exec, stream_), "cuGraphLaunch");
    check(api.event_record(stop, stream_), "cuEventRecord");
    check(api.event_synchronize(stop), "cuEventSynchronize (a timed candidate failed)");
    float ms = 0;
    check(api.event_elapsed_time(&ms, start, stop), "cuEventElapsedTime");
    release();
    return double(ms) * 1000.0 / (kTimedCalls * kTimedReplays);
  } catch (...) {
    release();
    throw;
  }
}

void BlasHandle::run(const LibraryGemm& g, const Plan& plan, int candidate, CUdeviceptr a,
                     CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, std::string_view what) const {
  // With an addend, cuBLASLt reads it as its C and writes the sum to its D; cuBLAS's strided
  // batches have one C, read and written, so the addend is copied there first.
  const float one = 1.0f, zero = 0.0f;
  const float* beta = g.adds ? &one : &zero;
  if (candidate > 0) {
    check_blas(
        blas().lt.matmul(lt_, plan.desc, &one, reinterpret_cast<const void*>(b), plan.first,
                         reinterpret_cast<const void*>(a), plan.second, beta,
                         reinterpret_cast<const void*>(g.adds ? d : c), plan.out,
                         reinterpret_cast<void*>(c), plan.out, &plan.lt[size_t(candidate - 1)].algo,
                         reinterpret_cast<void*>(workspace_), kWorkspaceBytes, stream_),
        fmt::format("cublasLtMatmul for {}", what));
    return;
  }
  if (g.adds)
    check(driver().api.memcpy_dtod_async(c, d, extent_bytes(g, g.m, g.n, g.stride_c), stream_),
          fmt::format("cuMemcpyDtoDAsync (the addend) for {}", what));
  const int type = cuda_type(g.dtype);
  check_blas(blas().api.gemm_strided_batched(handle_, kCublasOpN, kCublasOpN, int(g.n), int(g.m),
                                             int(g.k), &one, reinterpret_cast<const void*>(b), type,
                                             int(g.n), g.stride_b, reinterpret_cast<const void*>(a),
                                             type, int(g.k), g.stride_a, beta,
                                             reinterpret_cast<void*>(c), type, int(g.n), g.stride_c,
                                             int(g.batches), kCublasCompute32F, kCublasGemmDefault),
             fmt::format("cublasGemmStridedBatchedEx for {}", what));
}

const BlasHandle::Plan& BlasHandle::plan_of(const LibraryGemm& g, std::string_view what) const {
  std::lock_guard lock(mutex_);
  auto found = plans_.find(g);
  if (found == plans_.end()) fail("cuda: {} runs before its library matmul was prepared", what);
  return *found->second;
}

void BlasHandle::gemm(const LibraryGemm& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                      CUdeviceptr d, std::string_view what) const {
  const Plan& plan = plan_of(g, what);
  run(g, plan, plan.chosen, a, b, c, d, what);
}

void BlasHandle::gemm_group(const LibraryGemm& g, CUdeviceptr pointers,
                            std::string_view what) const {
  plan_of(g, what);
  const float one = 1.0f, zero = 0.0f;
  const int type = cuda_type(g.dtype);
  const auto* table = reinterpret_cast<void* const*>(pointers);
  // Row-major C_i = A · B_i is column-major C_iᵀ = B_iᵀ · Aᵀ: cuBLAS's first operands are the B_i.
  const std::ptrdiff_t group = g.group;
  check_blas(blas().api.gemm_batched(handle_, kCublasOpN, kCublasOpN, int(g.n), int(g.m), int(g.k),
                                     &one, table + group, type, int(g.n), table, type, int(g.k),
                                     &zero, table + 2 * group, type, int(g.n), int(g.group),
                                     kCublasCompute32F, kCublasGemmDefault),
             fmt::format("cublasGemmBatchedEx for {}", what));
}

std::vector<CUdeviceptr> BlasHandle::group_pointers(const std::vector<CUdeviceptr>& args) {
  const size_t group = (args.size() - 1) / 2;
  std::vector<CUdeviceptr> table(3 * group);
  for (size_t i = 0; i < group; ++i) {
    table[i] = args[0];
    table[group + i] = args[1 + 2 * i];
    table[2 * group + i] = args[2 + 2 * i];
  }
  return table;
}

std::string BlasHandle::describe(const Plan& plan) {
  if (plan.lt.empty()) return fmt::format("cublas default (not timed: {})", plan.untimed);
  std::string times;
  for (double us : plan.micros)
    times += std::isfinite(us) ? fmt::format(" {:.2f}", us) : std::string(" failed");
  const std::string chosen =
      plan.chosen == 0 ? std::string("cublas default")
                       : fmt::format("cublasLt candidate {} of {}", plan.chosen, plan.lt.size());
  return fmt::format("{} (µs, default first:{}; chosen in {:.1f} ms)", chosen, times,
                     plan.choosing_ms);
}

}  // namespace yirage::backend::cuda
