#!/usr/bin/env bash
# How fast one host starts CUDA contexts: P processes at once (process i on GPU i mod the GPU count), three rounds,
# with the CUDA worker's one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1) and without. Every GPU evaluation starts
# a fresh worker process, so this rate bounds the evaluations per second of all nodes on the host together.
# Usage: bash tools/gpu_node/context_starts.sh ["1 3 4 12"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)/context_start
trap 'rm -rf "$(dirname "$bin")"' EXIT
cuda=${CUDA_HOME:-/usr/local/cuda}
"$cuda/bin/nvcc" -O2 "$here/context_start.cu" -o "$bin" -L"$cuda/lib64/stubs" -lcuda
gpus=$(nvidia-smi -L | grep -c '^GPU ')
out=$(dirname "$bin")/times
echo "| processes at once | queues | cuInit ms | context ms | allocation ms | contexts/s |"
echo "|---|---|---|---|---|---|"
for p in ${1:-1 3 4 12}; do
  for queues in default one; do
    env=(CUDA_MODULE_LOADING=LAZY)
    [ "$queues" = one ] && env+=(CUDA_DEVICE_MAX_CONNECTIONS=1)
    : > "$out"
    failed=0
    started=$(date +%s%N)
    for round in 1 2 3; do
      pids=()
      for ((i = 0; i < p; i++)); do env "${env[@]}" CUDA_VISIBLE_DEVICES=$((i % gpus)) "$bin" 1 >> "$out" & pids+=($!); done
      for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    done
    elapsed_ns=$(( $(date +%s%N) - started ))
    if [ ! -s "$out" ]; then echo "| $p | $queues | every start failed | | | |"; continue; fi
    [ "$failed" -gt 0 ] && echo "$failed of $((3 * p)) starts failed" >&2
    awk -v p="$p" -v q="$queues" -v ns="$elapsed_ns" '{a += $1; b += $2; c += $3; n++}
      END {printf "| %d | %s | %.0f | %.0f | %.1f | %.1f |\n", p, q, a / n, b / n, c / n, n / (ns / 1e9)}' "$out"
  done
done
