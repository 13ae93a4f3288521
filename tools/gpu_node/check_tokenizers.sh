#!/usr/bin/env bash
# The project's tokenizer against Hugging Face tokenizers on the GPU node (which has the library but no internet):
# writes the library's goldens for the corpus, then runs test_tokenizer's comparison and the real-vocabulary cases.
# TOKENIZERS_DIR holds gptoss/, qwen3/ and llama3_1/, each with tokenizer.json (carried over from a machine where
# tools/install_tokenizers.sh ran). $PYTHON (default python3) must import tokenizers. Exits non-zero on any difference.
# Usage: bash tools/gpu_node/check_tokenizers.sh TOKENIZERS_DIR [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(realpath "$1")
build=${2:-build-gpu}
out=${3:-/tmp/crucible-tokenizer-check}
mkdir -p "$out"
if [ ! -x "$build/tests/test_tokenizer" ]; then
  # The tokenizer suite is plain C++: an existing build only needs the target; a fresh node builds just that.
  if [ -f "$build/build.ninja" ]; then
    cmake --build "$build" --target test_tokenizer > "$out/build.log" 2>&1
  else
    CRUCIBLE_TARGETS=test_tokenizer bash tools/gpu_node/build.sh .gpu-node/debs .gpu-node/prefix "$build" > "$out/build.log" 2>&1
  fi || { tail -40 "$out/build.log"; exit 1; }
fi
args=()
for name in gptoss qwen3 llama3_1; do
  [ -f "$dir/$name/tokenizer.json" ] && args+=("$name=$dir/$name/tokenizer.json")
done
((${#args[@]})) || { echo "check_tokenizers: no tokenizer.json under $dir/{gptoss,qwen3,llama3_1}" >&2; exit 1; }
"${PYTHON:-python3}" tools/gpu_node/tokenizer_goldens.py "$out/goldens.json" "${args[@]}"
CRUCIBLE_TOKENIZERS_DIR="$dir" CRUCIBLE_TOKENIZER_GOLDENS="$out/goldens.json" \
  "$build/tests/test_tokenizer" -tc='real tokenizers*,*o200k*,chat*,harmony*,qwen3*'
