#!/usr/bin/env bash
# How fast one host starts CUDA contexts: P processes at once (process i on GPU i mod the GPU count), three rounds,
# with the CUDA worker's one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1) and without. Every GPU evaluation starts
# a fresh worker process, so this rate bounds the evaluations per second of all nodes on the host together.
# Usage: bash tools/gpu_node/context_starts.sh ["1 3 4 12"]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)/context_start
trap 'rm -rf "$(dirname "$bin")"' EXIT
"${NVCC:-/usr/local/cuda/bin/nvcc}" -O2 "$here/context_start.cu" -o "$bin" -lcuda
gpus=$(nvidia-smi -L | wc -l)
out=$(dirname "$bin")/times
echo "| processes at once | queues | cuInit ms | context ms | allocation ms | contexts/s |"
echo "|---|---|---|---|---|---|"
for p in ${1:-1 3 4 12}; do
  for queues in default one; do
    env=()
    [ "$queues" = one ] && env=(CUDA_DEVICE_MAX_CONNECTIONS=1)
    : > "$out"
    started=$(date +%s%N)
    for round in 1 2 3; do
      for ((i = 0; i < p; i++)); do env "${env[@]}" CUDA_VISIBLE_DEVICES=$((i % gpus)) "$bin" 1 >> "$out" & done
      wait
    done
    elapsed_ns=$(( $(date +%s%N) - started ))
    awk -v p="$p" -v q="$queues" -v ns="$elapsed_ns" '{a += $1; b += $2; c += $3; n++}
      END {printf "| %d | %s | %.0f | %.0f | %.1f | %.1f |\n", p, q, a / n, b / n, c / n, n / (ns / 1e9)}' "$out"
  done
done
