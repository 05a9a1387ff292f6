#!/usr/bin/env bash
# The main job on the embedded defaults: installs the dependencies, builds the release preset,
# lists the backends of this machine, then runs the public workload suite on the default backend.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target yirage
build/release/yirage backends
build/release/yirage suite run "$@"
