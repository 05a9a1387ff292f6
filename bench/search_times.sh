#!/usr/bin/env bash
# Search time of `yirage optimize` on each search target of docs/suite.md at the suite's real shapes
# (bs 1, f32, as `yirage suite export` writes them), for the host CPU's device description.
# Targets: rmsnorm_linear <= 10 s, gqa <= 5 min, none over 10 min; kernel limits from issue 3.
# "seconds" is the whole superoptimize call: enumeration, fingerprint proofs of the chosen
# candidates at full size, and the float check of the best against the reference executor.
#
# Usage: bash bench/search_times.sh [BUDGET_SECONDS]   (BUILD_DIR overrides build/search-rel;
# PRUNER=z3 searches with the Z3 pruner instead of the default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build/search-rel}
budget=${1:-600}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target yirage >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/yirage" suite export "$work" >/dev/null

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
# kernels: of the best-ranked µGraph (by the cost estimate); fewest: of any proved µGraph found.
printf '%-15s %8s %6s %9s %9s %6s %5s %8s %7s %6s %s\n' target seconds wall states pruned cands \
  verif kernels fewest limit verdict
for spec in rmsnorm_linear:1:10 gated_mlp:1:600 gemm_layernorm:1:600 gqa:2:300 lora:2:600 \
  ntrans:2:600 gemm_softmax:2:600; do
  IFS=: read -r target limit seconds_target <<<"$spec"
  start=$(date +%s.%N)
  "$build/yirage" optimize "$work/$target.json" --no-tune --backend cpu --budget "$budget" \
    --seed 0 --threads 2 ${PRUNER:+--pruner "$PRUNER"} --json >"$work/$target.out"
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  python3 - "$work/$target.out" "$target" "$limit" "$seconds_target" "$wall" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
target, limit, seconds_target, wall = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
fewest = min(c["kernels"] for c in r["ranked"])
ok = r["verified"] and fewest <= limit and r["search_seconds"] <= seconds_target
# The float check's summary: "... (error relative to ...): uniform: ...: ok; large: ...; passed".
summary = r["float_check"]
check = summary.split("): ", 1)[1] if "): " in summary else summary.split(": ", 1)[-1]
print(f'{target:<15} {r["search_seconds"]:8.2f} {wall:6.1f} {r["states"]:9d} {r["pruned"]:9d} '
      f'{r["candidates"]:6d} {r["verified_candidates"]:5d} {r["kernels"]:8d} {fewest:7d} {limit:6d} '
      f'{"ok" if ok else "MISSED"} (bound {r["false_accept_bound"]:.1e}; float check {check})')
for n in r["notes"]:
    print(f'{"":15} note: {n}')
PY
done
