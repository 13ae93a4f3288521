#!/usr/bin/env bash
# Run on a machine that reaches Debian's registry: downloads the .deb files a GPU node without a package
# registry needs to build Crucible (build.sh unpacks them into a prefix there).
# Usage: bash tools/gpu_node/fetch_debs.sh [DIR]   (default: .gpu-node/debs, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.gpu-node/debs}
mkdir -p "$dir"
packages=(libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 libtomlplusplus-dev libtomlplusplus3
          libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 doctest-dev nlohmann-json3-dev libcli11-dev libssl-dev
          libcpp-httplib-dev libcpp-httplib0.11 libbrotli1 libbrotli-dev zlib1g-dev)
(cd "$dir" && apt-get download "${packages[@]}" >/dev/null)
ls "$dir"
