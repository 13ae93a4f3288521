#!/usr/bin/env bash
# Builds into build-gpu/ with build.sh unless a crucible is already there; the build's log goes to OUT_DIR/build.log.
# Usage (from a GPU node script, in the checkout's root): bash tools/gpu_node/ensure_built.sh OUT_DIR
set -euo pipefail
[ -x build-gpu/tools/crucible ] && exit 0
start=$(date +%s)
bash tools/gpu_node/build.sh > "$1/build.log" 2>&1 || { tail -40 "$1/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
