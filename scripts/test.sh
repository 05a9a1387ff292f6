#!/usr/bin/env bash
# Installs the dependencies, then builds and runs every test twice: in the release preset with
# warnings as errors, and in the asan-ubsan preset (AddressSanitizer + UndefinedBehaviorSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
export YIRAGE_WERROR=ON
jobs=$(nproc)
for preset in release asan-ubsan; do
  echo "== $preset =="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done
