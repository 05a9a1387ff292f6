#!/usr/bin/env bash
# A/B timings of our kernels on the device machine, run from the repository root: builds like
# bench/gpu.sh, then runs yirage_cuda_bench in alternating rounds, once per configuration in each
# round, so that drift within a lease hits every configuration alike. Each configuration tunes
# into a cache of its own in its first round (the tuner may choose differently under it) and
# times its cached winners in the later ones. Ours only; the peers' ratios come from
# bench/gpu.sh's suite run.
#
#   W=gqa,lora BS=1,8 [ROUNDS=3] bash bench/gpu_alternate.sh NAME=ENV... [...]
#   e.g. bash bench/gpu_alternate.sh pdl="YIRAGE_CUDA_PDL=1" plain="YIRAGE_CUDA_PDL=0"
# Results go to $RESULTS (default $OUT, else bench/results/run): bench_<name>_<round>.jsonl, one
# JSON object per workload as yirage_cuda_bench prints it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" > /dev/null
cmake --build "$BUILD" -j16 --target yirage_cuda_bench 2>&1 | tail -2
for round in $(seq "${ROUNDS:-3}"); do
  for config in "$@"; do
    name=${config%%=*}
    read -r -a vars <<< "${config#*=}"
    env "${vars[@]}" "$BUILD/tests/cuda/yirage_cuda_bench" --workloads "$W" --bs "${BS:-1}" \
      --cache "$RESULTS/tuning_${name}.sqlite" > "$RESULTS/bench_${name}_${round}.jsonl"
    echo "round $round $name done"
  done
done
