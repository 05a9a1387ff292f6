#!/usr/bin/env bash
# Builds llama.cpp's `llama-server`, the peer of bench/serve_bench.py, and prints its path.
#
# The llama.cpp tree is the one vendored in llama-cpp-python's source distribution on PyPI, at the
# version scripts/install-deps.sh pins, so the server is the same llama.cpp that the LLM tests and
# bench/llm_vs_llamacpp.py compare with, and pip's index and proxy settings apply. About 20 minutes
# on 2 cores. Nothing lands in the repository.
#
#   usage: scripts/build-llama-server.sh [DIR]   (default DIR: /tmp/llama-build)
#   JOBS   parallel compile jobs (default 2)
set -euo pipefail

readonly version="0.3.36"
dir="${1:-/tmp/llama-build}"
jobs="${JOBS:-2}"

mkdir -p "$dir"
cd "$dir"
if [[ ! -f "llama_cpp_python-$version.tar.gz" ]]; then
  python3 -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$version" -d . >&2
fi
[[ -d "llama_cpp_python-$version" ]] || tar xzf "llama_cpp_python-$version.tar.gz"
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || {
  echo "build-llama-server: no llama.cpp tree at $src" >&2
  exit 1
}

# Without AMX, as in install-deps.sh: on Sapphire Rapids -march=native turns on ggml's AMX kernels,
# which crash in the first matrix product (ggml-org/llama.cpp#20824). No effect on CPUs without AMX.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CFLAGS="$no_amx" CXXFLAGS="$no_amx" cmake -S "$src" -B "$dir/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF >&2
cmake --build "$dir/build" -j "$jobs" --target llama-server >&2
echo "$dir/build/bin/llama-server"
