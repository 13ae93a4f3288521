#!/usr/bin/env bash
# Installs Crucible's Debian dependencies (when missing) and builds it into build/.
# Usage: bash tools/setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build libcaf-dev libtomlplusplus-dev libspdlog-dev doctest-dev libtorch-dev
          libopenblas0-openmp nlohmann-json3-dev libcli11-dev libssl-dev openssl iproute2
          libcpp-httplib-dev python3-torch chromium)
# python3-torch: the KernelBench import (crucible tasks import), a trusted step; chromium: the monitor page's test
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

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build -j"$(nproc)"
