#!/usr/bin/env bash
# The LLM job on the device machine, run from the repository root: builds `yirage` (with the
# server when cpp-httplib is there or carried) and the CUDA tests, then, by STEPS:
#   tests  the engine's GPU tests (every CUDA LLM op against the reference executor; SmolLM2's
#          greedy tokens against the cpu engine; batched decode against each sequence alone);
#   tiny   a random tiny Llama's greedy tokens on cuda against cpu, through `yirage generate`, as a
#          Q4_0 GGUF and as bf16 safetensors;
#   bench  bench/gpu_llm_bench.py (decode ms/token and tokens/s against HF transformers).
# Results go to $RESULTS (default $OUT): llm_gpu_tests.log, tiny.txt, gpu_llm.txt. SmolLM2 is
# read from $YIRAGE_MODEL_PATH when set. Each step is bounded by `timeout` (STEP_TIMEOUT seconds).
#
#   STEPS=tests,tiny,bench bash bench/gpu_llm.sh [gpu_llm_bench.py arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
export PYTHONUNBUFFERED=1
configure_gpu_build
cmake --build "$BUILD" -j16 --target yirage yirage_cuda_tests 2>&1 | tail -3
grep -E "HTTPLIB|SERVER" "$BUILD/CMakeCache.txt" | head -3
steps=",${STEPS:-tests,tiny,bench},"
limit=${STEP_TIMEOUT:-540}
rc=0
if [[ $steps == *,tests,* ]]; then
  YIRAGE_REQUIRE_CUDA=1 timeout "$limit" "$BUILD/tests/cuda/yirage_cuda_tests" \
    --gtest_filter='CudaLlm*' > "$RESULTS/llm_gpu_tests.log" 2>&1 || rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|Which is|expected" \
    "$RESULTS/llm_gpu_tests.log" | tail -30
  echo "LLM GPU tests exit status: $rc"
fi
if [[ $steps == *,tiny,* ]]; then
  # A random tiny Llama twice: as a Q4_0 GGUF, and as a bf16 Hugging Face directory (the 16-bit
  # weights' quant_matmul); greedy ids on cpu and cuda must be equal for both.
  mkdir -p /tmp/yr-llm
  (cd bench && python3 make_llama_gguf.py --shape tiny --out /tmp/yr-llm/tiny-q4_0.gguf) > /dev/null
  python3 bench/make_llama_safetensors.py --shape tiny --dtype bf16 --out /tmp/yr-llm/tiny-bf16 \
    > /dev/null
  : > "$RESULTS/tiny.txt"
  for model in tiny-q4_0.gguf tiny-bf16; do
    for backend in cpu cuda; do
      timeout "$limit" "$BUILD/yirage" generate --backend "$backend" --model "/tmp/yr-llm/$model" \
        --prompt "Once upon a time" -n 24 --temperature 0 --save-json "/tmp/yr-llm/$model.$backend.json" \
        > /dev/null 2> "/tmp/yr-llm/$model.$backend.err" || { rc=$?; tail -3 "/tmp/yr-llm/$model.$backend.err"; }
    done
    MODEL=$model python3 - >> "$RESULTS/tiny.txt" <<'PY' || rc=1
import json, os, sys
model = os.environ["MODEL"]
cpu, cuda = (json.load(open(f"/tmp/yr-llm/{model}.{b}.json")) for b in ("cpu", "cuda"))
diff = max(abs(a - b) for a, b in zip(cpu["first_logits"], cuda["first_logits"]))
print(f"{model}\ncpu ids  {cpu['ids']}\ncuda ids {cuda['ids']}\nfirst logits: max |cpu - cuda| {diff:.3g}")
sys.exit(0 if cpu["ids"] == cuda["ids"] else 1)
PY
    grep -h "hot blocks\|decode" /tmp/yr-llm/$model.*.err
  done
  cat "$RESULTS/tiny.txt"
fi
if [[ $steps == *,bench,* ]]; then
  timeout "$limit" python3 bench/gpu_llm_bench.py --yirage "$BUILD/yirage" --work /tmp/yr-llm \
    --out "$RESULTS/gpu_llm.txt" "$@" || rc=$?
fi
exit "$rc"
