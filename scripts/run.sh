#!/usr/bin/env bash
# The main job on the embedded defaults: installs the dependencies, builds the release preset,
# lists the backends of this machine, then tunes the public workload suite on the default backend
# and prints each winner's steady-state time beside numpy's on the same machine
# (scripts/suite_table.py; its arguments pass through, e.g. --search-seconds 10 or gqa lora). A
# second run takes the winners from the tuning cache.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target yirage
build/release/yirage backends
python3 scripts/suite_table.py --yirage build/release/yirage "$@"
