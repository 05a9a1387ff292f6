#!/usr/bin/env bash
# The GPU job, run on the device machine from the repository root: builds the cuda targets,
# records `yirage backends`, runs the CUDA and Triton tests with the GPU required (every
# generated kernel against the reference executor), then the suite benchmark against PyTorch
# (bench/gpu_bench.py: what tune::optimize chose on the cuda backend, in --rounds full runs).
# Results go to $RESULTS (default $OUT, else bench/results/run): h200_suite.{md,json},
# backends.json, the tuning cache and the logs. GIT_COMMIT names the commit in the results (the
# device copy has no .git).
#
#   GIT_COMMIT=$(git rev-parse --short HEAD) bash bench/gpu.sh [--rounds 3] [--search-seconds 30]
#       [--no-compile] [--workloads a,b,...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
export PYTHONUNBUFFERED=1
configure_gpu_build
cmake --build "$BUILD" -j16 --target yirage yirage_cuda_tests yirage_cuda_bench yirage_triton_tests 2>&1 |
  tail -5
"$BUILD/yirage" backends --json > "$RESULTS/backends.json" || true
"$BUILD/yirage" backends | tee "$RESULTS/backends.txt" || true
steps=${STEPS:-tests,tune,bench}
STEPS=",$steps,"
CACHE=${CACHE:-$RESULTS/tuning.sqlite}
tests_rc=0
if [[ $STEPS == *,tests,* ]]; then
YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" --gtest_filter='CudaGpu.*:*.BestMatchesReferenceOnGpu/*' \
  > "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The kernel-level matmuls again as generated kernels, without cuBLAS.
YIRAGE_CUDA_CUBLAS=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.KernelLevel*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The library matmuls again with cuBLAS's default algorithm alone, without timing cuBLASLt's.
YIRAGE_CUDA_CUBLASLT=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.KernelLevel*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The adds after library matmuls again as kernels of their own.
YIRAGE_CUDA_FOLD_ADDS=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.KernelLevel*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# Library products that share A again as calls of their own.
YIRAGE_CUDA_GROUP_PRODUCTS=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.KernelLevel*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The weight tiles again by cp.async and the streamed weights through registers, as on GPUs
# before sm_90; then the streamed weights' products through shared memory, as before they streamed.
YIRAGE_CUDA_TMA=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.*Streams*:CudaGpu.TensorCore*' >> "$RESULTS/gpu_tests.log" 2>&1 ||
  tests_rc=$?
YIRAGE_CUDA_STREAM=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.*Streams*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The weight streams again as single blocks, without sm_90's cluster pairs; long rows a block each.
YIRAGE_CUDA_CLUSTER=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.*Streams*:CudaGpu.LongRowOps*' >> "$RESULTS/gpu_tests.log" 2>&1 ||
  tests_rc=$?
# Attention's chains again by mma.sync, as on GPUs other than sm_90a.
YIRAGE_CUDA_WGMMA=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.Attention*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# Row-wise chains again through shared memory, as before they stayed in registers.
YIRAGE_CUDA_ROWS=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.RegisterRows*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# Kernels again one after another, without programmatic dependent launch.
YIRAGE_CUDA_PDL=0 YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.KernelLevel*' >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
# The Triton backend: its cubins compiled ahead of time and launched through the driver.
YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/triton/yirage_triton_tests" --gtest_filter='Triton*' \
  >> "$RESULTS/gpu_tests.log" 2>&1 || tests_rc=$?
grep -E "^\[|Failure|error|expected|Which is" "$RESULTS/gpu_tests.log" | tail -40 || true
echo "CUDA GPU tests exit status: $tests_rc"
fi
# The benchmark keeps the generated sources for the SASS summary below.
export YIRAGE_CUDA_DUMP="$PWD/$BUILD/dump"
# BENCH_TIMEOUT bounds the benchmark (seconds), or DEADLINE this whole script; results are
# written after every round.
bench_timeout=${BENCH_TIMEOUT:-100000}
[[ -n "${DEADLINE:-}" ]] && bench_timeout=$((DEADLINE - SECONDS))
bench=(timeout "$bench_timeout" python3 bench/gpu_bench.py --ours-bin
  "$BUILD/tests/cuda/yirage_cuda_bench" --out "$RESULTS" --cache "$CACHE"
  --command "${GPU_COMMAND:-STEPS=$steps bash bench/gpu.sh $*}" "$@")
[[ $STEPS != *,tune,* ]] || rm -f "$CACHE"
if [[ $STEPS == *,tune,* && $STEPS != *,bench,* ]]; then
  "${bench[@]}" --tune-only 2>&1 | tee "$RESULTS/tune.log" | grep -v '^ours '
elif [[ $STEPS == *,bench,* ]]; then
  # Without a tune step, the bench's first round tunes whatever $CACHE does not hold yet.
  "${bench[@]}" 2>&1 | tee "$RESULTS/bench.log" | grep -v '^ours '
fi
# Evidence for the report: registers/spills and instruction counts of the main fused kernels.
if command -v cuobjdump > /dev/null; then
  for f in "$YIRAGE_CUDA_DUMP"/yr_fused_fused_{rmsnorm_linear,gated_mlp,attention,norm_gate_up}-*.cu; do
    [[ -f "$f" ]] || continue
    echo "== $(basename "$f")"
    nvcc -cubin -arch=sm_90 -Xptxas -v -o /tmp/yr_k.cubin "$f" 2>&1 | grep -E "registers|spill"
    cuobjdump -sass /tmp/yr_k.cubin > /tmp/yr_k.sass
    for op in HMMA LDGSTS LDS STS BAR SHFL FFMA LDL STL; do
      echo "$op $(grep -cE "[[:space:]]$op[. ]" /tmp/yr_k.sass)"
    done
  done > "$RESULTS/sass_summary.txt" 2>&1 || true
fi
exit "$tests_rc"
