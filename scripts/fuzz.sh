#!/usr/bin/env bash
# Builds the libFuzzer targets (GGUF reader, safetensors reader, Hugging Face config.json, tokenizer,
# kernel-graph JSON, .npy reader, the server's OpenAI request parser) with clang, ASan and UBSan
# in build/fuzz, and runs each for a while on a seed corpus: the committed seeds of
# tests/fuzz/corpus (valid files from the test data and the test writers), files from the test
# GGUF and safetensors writers, config.json files,
# examples/ and tests/data/, and small .npy files.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
#   scripts/fuzz.sh --long [MINUTES_PER_TARGET]   (default 30; fractions allowed)
#
# --long is the soak run: each target for MINUTES from the committed seeds plus the corpus that
# earlier long runs grew, which it keeps (build/fuzz/corpus-long), and a table of executions,
# coverage (edges) and crashes per target in build/fuzz/fuzz_long.md, to copy into
# bench/results/fuzz_long.md after a full run.
#
# Needs clang and libFuzzer's runtime (Debian 12: clang libclang-rt-14-dev), installed if missing.
# Corpora grow in build/fuzz/corpus; crashes are written to build/fuzz/artifacts. Inputs that once
# crashed a target live in tests/fuzz/regressions/<target> and are replayed before fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
if [[ "${1:-}" == "--long" ]]; then
  long=1
  minutes="${2:-30}"
  seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60 + 0.5); if (s < 1) s = 1; print s }')
else
  seconds="${1:-60}"
fi

# libFuzzer ships with clang's runtime package; install both when a probe link fails.
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' |
  "${CXX:-clang++}" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    clang libclang-rt-14-dev
fi

build=build/fuzz
CXX="${CXX:-clang++}" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DYIRAGE_FUZZ=ON -DYIRAGE_SANITIZE=ON -DYIRAGE_WERROR=ON -DYIRAGE_BUILD_TESTS=OFF \
  -DCMAKE_UNITY_BUILD=ON >/dev/null
targets=(gguf_fuzz safetensors_fuzz hf_config_fuzz tokenizer_fuzz graph_json_fuzz npy_fuzz
         openai_request_fuzz)
cmake --build "$build" --target "${targets[@]}" gguf_make_seeds
bin="$build/tests/fuzz"

corpus="$build/corpus"
[[ $long -eq 1 ]] && corpus="$build/corpus-long"
"$bin/gguf_make_seeds" "$corpus/gguf" "$corpus/tokenizer" "$corpus/safetensors" \
  "$corpus/hf_config"
mkdir -p "$corpus/graph_json" "$corpus/npy" "$corpus/openai_request" "$build/artifacts"
cp examples/*.json tests/data/*.json "$corpus/graph_json/"
# Request bodies of the OpenAI API, as the openai client sends them.
printf '%s' '{"model": "m", "prompt": "Hi", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n", "x"], "stream": true, "stream_options": {"include_usage": true}}' \
  >"$corpus/openai_request/completion.json"
printf '%s' '{"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 4, "top_k": 2, "n": 1, "response_format": {"type": "text"}}' \
  >"$corpus/openai_request/chat.json"
printf '%s' '{"prompt": [1, 2, 3], "logprobs": null, "presence_penalty": 0}' >"$corpus/openai_request/ids.json"
python3 - "$corpus/npy" <<'PY'
import sys, numpy as np
out = sys.argv[1]
for i, a in enumerate([np.arange(6, dtype="<f4").reshape(2, 3), np.ones(4, "<f2"),
                       np.arange(5, dtype="<i4"), np.arange(3, dtype="<i8"),
                       np.zeros((2, 1, 2), "|u1")]):
    np.save(f"{out}/seed{i}.npy", a)
PY
# The committed seeds, without overwriting what earlier runs kept.
for dir in tests/fuzz/corpus/*/; do
  mkdir -p "$corpus/$(basename "$dir")"
  cp -n "$dir"* "$corpus/$(basename "$dir")/"
done

status=0
report="$build/fuzz_long.md"
if [[ $long -eq 1 ]]; then
  {
    echo "# Long fuzzing: ${seconds} s per target"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(clang++ --version | head -1)"
    echo
    echo "| target | seconds | executions | coverage (edges) | corpus files | crashes |"
    echo "|---|---|---|---|---|---|"
  } >"$report"
fi
for target in "${targets[@]}"; do
  dir="$corpus/${target%_fuzz}"
  # Inputs that once crashed a target are replayed first, so a regression fails fast.
  regressions=(tests/fuzz/regressions/"${target%_fuzz}"/*)
  if [[ -e "${regressions[0]}" ]]; then
    echo "== $target: replaying ${#regressions[@]} past crash input(s) =="
    "$bin/$target" "${regressions[@]}" || status=1
  fi
  echo "== $target for ${seconds}s =="
  log="$build/$target.log"
  touch "$log.start"
  if "$bin/$target" "$dir" -max_total_time="$seconds" -max_len=65536 \
    -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units)' "$log" || true
  else
    status=1
    tail -40 "$log"
  fi
  if [[ $long -eq 1 ]]; then
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    edges=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    crashes=$(find "$build/artifacts" -name "$target-*" -newer "$log.start" 2>/dev/null | wc -l)
    echo "| ${target%_fuzz} | $seconds | ${executions:-?} | ${edges:-?} | $(ls "$dir" | wc -l) | $crashes |" >>"$report"
  fi
done
[[ $long -eq 1 ]] && echo "wrote $report"
exit "$status"
