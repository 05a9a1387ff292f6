#!/usr/bin/env bash
# An A/B of one source file's change, on the device machine from the repository root: builds the tree
# as it is ("new") and a copy with FILE replaced by OLD ("old"; the device has no git history, so
# carry the old version, e.g. `git show HEAD~1:FILE > bench/tmp/old.cpp`), runs the CUDA GPU tests
# on the new build, then ROUNDS alternating rounds of yirage_cuda_bench on WORKLOADS with both,
# each build tuning into a cache of its own in its first round (a changed file changes the source
# hash, so the builds never share entries) and timing its cached winner after.
#
#   bash bench/gpu_ab_file.sh FILE OLD WORKLOADS [ROUNDS]
#   e.g. bash bench/gpu_ab_file.sh src/backend/cuda/codegen_ops.cpp bench/tmp/old.cpp gemm_softmax 3
# Prints "build winner median_us correct rel_l2" lines; results go to $RESULTS/ab.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
file=$1 old=$2 workloads=$3 rounds=${4:-3}
[[ -f $file && -f $old ]] || { echo "gpu_ab_file.sh: need FILE and OLD, got '$file' '$old'" >&2; exit 2; }
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYIRAGE_WERROR=ON "${extra[@]}" > /dev/null || exit 1
cmake --build "$BUILD" -j16 --target yirage_cuda_tests yirage_cuda_bench 2>&1 | tail -1
YIRAGE_REQUIRE_CUDA=1 "$BUILD/tests/cuda/yirage_cuda_tests" \
  --gtest_filter='CudaGpu.*:*.BestMatchesReferenceOnGpu/*' > "$RESULTS/gpu_tests.log" 2>&1
echo "CUDA GPU tests exit status: $?"
grep -E "^\[  (PASSED|FAILED) |Failure" "$RESULTS/gpu_tests.log" | head
copy=$(mktemp -d)
cp -r $(ls -A | grep -v -x -e build -e .git) "$copy"/
cp "$old" "$copy/$file"
(cd "$copy" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" > /dev/null &&
  cmake --build build -j16 --target yirage_cuda_bench 2>&1 | tail -1) || exit 1
for ((r = 1; r <= rounds; ++r)); do
  for b in new old; do
    bin=$BUILD/tests/cuda/yirage_cuda_bench
    [[ $b == old ]] && bin=$copy/build/tests/cuda/yirage_cuda_bench
    "$bin" --workloads "$workloads" --cache "$RESULTS/tuning_$b.sqlite" 2> /dev/null |
      B=$b python3 -c '
import json, os, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        print(os.environ["B"], r["workload"], r["bs"], r.get("winner"), round(r.get("median_us", -1), 2),
              r.get("correct"), "%.1e" % r.get("rel_l2", -1))'
  done
done | tee "$RESULTS/ab.txt"
