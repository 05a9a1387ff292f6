#!/usr/bin/env bash
# Evidence for docs/design/cuda-findings.md, run on the device machine from the repository root:
# ncu's counters (throughput, occupancy, warp stall reasons, the SASS lines that stall most) for
# the first fused kernel of chosen suite variants. Builds like bench/gpu.sh. KERNELS (an ncu kernel
# filter, default regex:yr_fused) and LAUNCHES (default 1) profile other or more kernels, such as
# a variant's library calls (cuBLAS's are named nvjet_*, not gemm): KERNELS='regex:.' LAUNCHES=3.
#
#   bash bench/gpu_profile.sh WORKLOAD:BS:VARIANT [...]
#   e.g. bash bench/gpu_profile.sh rmsnorm_linear:1:n32_k256 gated_mlp:8:n32_k128
# Results go to $RESULTS (default $OUT, else bench/results/run): ncu_<workload>_<bs>_<variant>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" > /dev/null
cmake --build "$BUILD" -j16 --target yirage_cuda_bench 2>&1 | tail -2
export YIRAGE_CUDA_LINEINFO=1
for spec in "$@"; do
  IFS=: read -r workload bs variant <<< "$spec"
  report="$RESULTS/ncu_${workload}_${bs}_${variant}"
  ncu --clock-control none -k "${KERNELS:-regex:yr_fused}" --launch-count "${LAUNCHES:-1}" \
    -f -o "$report" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section SourceCounters \
    "$BUILD/tests/cuda/yirage_cuda_bench" --workloads "$workload" --bs "$bs" \
    --variants "$variant" > "$report.log" 2>&1 || { tail -20 "$report.log"; continue; }
  {
    grep -E '^\{' "$report.log" || true
    ncu --import "$report.ncu-rep" --print-details all
    echo "== SASS lines by warp stall samples (top 40)"
    ncu --import "$report.ncu-rep" --page source --print-source sass --csv 2>/dev/null |
      python3 bench/ncu_top_stalls.py 40 || true
  } > "$report.txt" 2>&1
  rm -f "$report.ncu-rep" "$report.log"
  head -c 3000 "$report.txt"
done
