#!/usr/bin/env bash
# Installs what YiRage needs to build and test on Debian 12 / Ubuntu 24.04: the compiler and
# CMake, the libraries (from the distribution's packages), graphviz for SVG output, NumPy and
# pytest for the tests, and Triton for the triton backend. Runs as root, or through sudo when it
# is available. OpenBLAS is the cpu backend's library matmul, in its OpenMP flavour: the
# generated modules run on OpenMP, and a second (pthreads) pool spinning on the same cores would
# fight them. cpp-httplib is the HTTP server under `yirage serve` (src/serve/server.cpp says why
# that one). The OpenCL headers and ICD loader build and load the opencl backend, and PoCL is the
# OpenCL platform its tests run on (about 15 s to install).
set -euo pipefail

packages=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev
          libgtest-dev libgmock-dev graphviz clang-format python3 python3-pip
          python3-venv libsqlite3-dev libz3-dev libopenblas-openmp-dev libcpp-httplib-dev
          ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# openai: the official client, which the tests of `yirage serve` drive it with. triton: the
# triton backend's compiler, and its interpreter, which runs the generated kernels in CI without a
# GPU; it needs no torch (tests/triton/interpret.py). A 286 MB wheel: 15 s to fetch and install
# on the 2-core machine when idle, 34 s into a fresh venv with --no-cache-dir under load.
# aiohttp: the asyncio client of bench/serve_bench.py, which tests/python/test_serve_bench.py runs.
if ! python3 -c "import numpy, pytest, openai, triton, aiohttp" 2>/dev/null; then
  # Debian's own python3 refuses plain pip installs (PEP 668); a pyenv or venv python does not.
  python3 -m pip install -q numpy pytest openai triton aiohttp 2>/dev/null ||
    python3 -m pip install -q --break-system-packages numpy pytest openai triton aiohttp
fi

# llama.cpp through its Python binding: the LLM tests compare tokens and logits with it, and the
# LLM benchmark measures against it. pip builds llama.cpp from source once (CPU only, native ISA,
# no tests or tools). Not with its AMX kernels, which -march=native turns on where the CPU has
# AMX: on Sapphire Rapids they crash in the first matrix product (ggml-org/llama.cpp#20824), and
# the tests compare with llama.cpp's AVX-512 kernels anyway. A build that has them (an earlier
# one from the pip cache) is rebuilt, bypassing the cache, whose key ignores the flags.
llama_cpp_ok='import llama_cpp, sys; sys.exit(b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info())'
if ! python3 -c "$llama_cpp_ok" 2>/dev/null; then
  export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"
  export CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  pip=(python3 -m pip install)
  # Debian's own python3 refuses plain pip installs (PEP 668); a pyenv or venv python does not.
  [[ $("${pip[@]}" --help 2>/dev/null) == *break-system-packages* ]] &&
    pip+=(--break-system-packages)
  # An AMX build is replaced as it stands (its dependencies are in place); otherwise a plain install.
  python3 -c "import llama_cpp" 2>/dev/null && pip+=(--force-reinstall --no-deps)
  "${pip[@]}" -q --no-cache-dir llama-cpp-python==0.3.36
  unset CFLAGS CXXFLAGS
  python3 -c "$llama_cpp_ok" || { echo "install-deps: llama-cpp-python still has AMX kernels" >&2; exit 1; }
fi

# torch, for the torch.compile(backend="yirage") tests and bench/torch_bench.py, on the CPU.
# PyPI's Linux torch is the CUDA build, whose dependencies pull some 3 GB of CUDA wheels. This
# machine's CUDA toolkit (cuBLAS, cuFFT, cuDNN, NCCL, ...) provides most of the libraries its
# libtorch_cuda.so links; what remains are the three wheels below and the newer NCCL it needs
# (ncclCommResume), all found through torch's RPATH in site-packages/nvidia. So torch goes in
# without its declared dependencies, plus the pure-Python ones that import and dynamo use.
# About 1.7 GB, 1 to 3 minutes.
if ! python3 -c "import torch" 2>/dev/null; then
  pip=(python3 -m pip install -q)
  # Debian's own python3 refuses plain pip installs (PEP 668); a pyenv or venv python does not.
  [[ $("${pip[@]}" --help 2>/dev/null) == *break-system-packages* ]] && pip+=(--break-system-packages)
  "${pip[@]}" --no-deps torch==2.15.0 nvidia-cufile nvidia-cusparselt-cu13==0.8.1 \
    nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7
  "${pip[@]}" filelock fsspec jinja2 networkx sympy typing-extensions
  python3 -c "import torch" || { echo "install-deps: torch does not import" >&2; exit 1; }
fi
