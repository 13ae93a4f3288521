#!/usr/bin/env bash
# Builds Crucible on a GPU node that has no package registry, the way an air-gapped cluster node would:
# LibTorch comes from the installed PyTorch (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'),
# everything else from Debian .deb files (fetch_debs.sh) unpacked with dpkg -x into a private prefix.
# spdlog (built for fmt 9) is compiled only into the logging facade, which never sees torch's include path
# (torch ships fmt 12 headers), so the two fmt versions never meet in one translation unit.
# Usage: bash tools/gpu_node/build.sh [DEB_DIR] [PREFIX] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
debs=${1:-.gpu-node/debs}
prefix=$(realpath -m "${2:-.gpu-node/prefix}")
build=${3:-build-gpu}
mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
# Debian's libssl-dev links to libssl3 files we do not carry: use the node's own OpenSSL 3 (same ABI).
lib="$prefix/usr/lib/x86_64-linux-gnu"
for l in ssl crypto; do
  if [ ! -e "$lib/lib$l.so" ] && [ -e "/usr/lib/x86_64-linux-gnu/lib$l.so.3" ]; then
    ln -sf "/usr/lib/x86_64-linux-gnu/lib$l.so.3" "$lib/lib$l.so"
  fi
done

torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" \
  -DCMAKE_BUILD_RPATH="$prefix/usr/lib/x86_64-linux-gnu" \
  -DOPENSSL_ROOT_DIR="$prefix/usr" "${@:4}"
# CRUCIBLE_TARGETS="a b" builds only those targets (and what they need).
cmake --build "$build" -j"$(nproc)" ${CRUCIBLE_TARGETS:+--target $CRUCIBLE_TARGETS}
echo "built into $build; libraries from $prefix/usr/lib/x86_64-linux-gnu"
