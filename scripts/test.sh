#!/usr/bin/env bash
# Installs the dependencies and the test model, then builds and runs every test twice: in the
# release preset with warnings as errors, and in the asan-ubsan preset (AddressSanitizer +
# UndefinedBehaviorSanitizer). Ends with a short libFuzzer run of every parser.
#
#   FUZZ_SECONDS  seconds per fuzz target (default 10, a smoke run: scripts/fuzz.sh --long is the
#                 soak; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
# The model tests must run, not skip, wherever this script runs.
YIRAGE_MODEL_PATH="$(bash scripts/fetch-model.sh)"
export YIRAGE_MODEL_PATH YIRAGE_REQUIRE_MODEL=1
# The llama.cpp comparisons (tests/python/test_*_llamacpp.py) must run, not skip.
export YIRAGE_REQUIRE_LLAMACPP=1
# The opencl tests must run on PoCL, which install-deps.sh installs, not skip.
export YIRAGE_REQUIRE_OPENCL=1
# So must the torch.compile tests (tests/python_pkg): install-deps.sh installs torch.
export YIRAGE_REQUIRE_TORCH=1
export YIRAGE_WERROR=ON
jobs=$(nproc)
# CI's limit is on the whole script, so each stage reports its time.
stage_start=0
stage_done() { echo "== $1: $((SECONDS - stage_start)) s (total $SECONDS s) =="; stage_start=$SECONDS; }
stage_done "dependencies and model"
# Unity builds compile each target's sources in batches of 8 files: the templates of the JSON,
# fmt, CLI11 and GoogleTest headers are then instantiated (and, under the sanitizers,
# instrumented) once a batch instead of once a file. On CI's two cores the release build took
# 350 s this way against 557 s file by file, and the sanitized one 549 s against 1143 s.
# Developers' own builds stay file by file, for quick rebuilds; this keeps the sources
# unity-clean (no two files of a target may define the same internal name).
# Both runs share one test tuning cache (tests/CMakeLists.txt says why): the model blocks that
# the release run tuned are cache hits in the sanitized run.
for preset in release asan-ubsan; do
  echo "== $preset =="
  cmake --preset "$preset" -DCMAKE_UNITY_BUILD=ON \
    -DYIRAGE_TEST_CACHE_DIR="$PWD/build/test-tuning-cache" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  stage_done "$preset build"
  ctest --preset "$preset" -j "$jobs"
  stage_done "$preset tests"
done

# The Python package, as a user installs it: pip install . into a fresh venv, then its own
# suite. Its CMake build runs in the release tree, whose core objects it finds up to date (the
# same flags: Release, position-independent code, warnings as errors), so it compiles only the
# extension module: a build of its own took another 8 of CI's minutes. The tests stay configured.
echo "== python package =="
venv="$(mktemp -d)/venv"
python3 -m venv --system-site-packages "$venv"
# The `ray` extra (Ray Serve, pinned in pyproject.toml) comes from PyPI with it, for tests/ray.
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "$venv/bin/pip" install -q ".[ray]" \
  --config-settings=build-dir=build/release --config-settings=cmake.define.YIRAGE_WERROR=ON \
  --config-settings=cmake.define.YIRAGE_BUILD_TESTS=ON
"$venv/bin/python" -m pytest -q tests/python_pkg
# yirage.ray on a local Ray started by the tests: two Serve replicas, one killed mid-stream, and
# graphs tuned in Ray tasks. They must run, not skip.
YIRAGE_REQUIRE_RAY=1 "$venv/bin/python" -m pytest -q tests/ray
# The release tree leaves the module to pip again: its nanobind came from pip's build
# environment, gone now, and would stop the tree's next reconfigure.
cmake -S . -B build/release -DYIRAGE_PYTHON=OFF >/dev/null
stage_done "python package"

if [[ "${FUZZ_SECONDS:-10}" != 0 ]]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
  stage_done "fuzzing"
fi
