#!/usr/bin/env bash
# Installs the dependencies and the test model, then builds and runs every test twice: in the
# release preset with warnings as errors, and in the asan-ubsan preset (AddressSanitizer +
# UndefinedBehaviorSanitizer). Ends with a short libFuzzer run of every parser.
#
#   FUZZ_SECONDS  seconds per fuzz target (default 30; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
# The model tests must run, not skip, wherever this script runs.
YIRAGE_MODEL_PATH="$(bash scripts/fetch-model.sh)"
export YIRAGE_MODEL_PATH YIRAGE_REQUIRE_MODEL=1
export YIRAGE_WERROR=ON
jobs=$(nproc)
for preset in release asan-ubsan; do
  echo "== $preset =="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done

if [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
