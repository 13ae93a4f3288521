#!/usr/bin/env bash
# Checks worker reuse on a GPU node (docs/cuda.md, "Reusing a worker") in one call, after
# `bash tools/gpu_node/build.sh`: the reuse GPU test, the GPU suite's CUDA evaluation cases (every hack and fault
# fixture with its verdict), then the multi-node bench at 1 and 4 nodes with reuse off and on. Logs go to $OUT
# (or the second argument); each node's worker counts (starts = CUDA contexts created, reuses, refused resets) are
# gathered into worker-counts.txt. Bounded to about 9 minutes.
# Usage: bash tools/gpu_node/reuse_check.sh [BUILD_DIR] [OUT_DIR] [K] [TASKS]
set -uo pipefail
build=${1:-build-gpu}
out=$(realpath -m "${2:-${OUT:-/tmp/reuse-check}}")
k=${3:-32}
tasks=${4:-'"relu", "softmax"'}
mkdir -p "$out"
started=$(date +%s)
left() { echo $((540 - ($(date +%s) - started))); }

export CRUCIBLE_WORKER_COUNTS=1
timeout 150 "$build/tests/test_gpu" -tc='gpu: a worker serves correct candidates in turn*' > "$out/test-reuse.log" 2>&1
echo "reuse test: rc=$?" | tee "$out/summary.txt"
timeout 200 "$build/tests/test_gpu" -tc='gpu: every CUDA hack*,gpu: every shipped naive CUDA*,gpu: work moved*' \
  > "$out/test-cuda-eval.log" 2>&1
echo "cuda-eval cases: rc=$?" | tee -a "$out/summary.txt"

for reuse in 1 32; do
  budget=$(( $(left) / 2 ))
  [ "$budget" -gt 30 ] || { echo "no time left for the bench with reuse $reuse" | tee -a "$out/summary.txt"; continue; }
  CRUCIBLE_GPU_WORKER_REUSE=$reuse LABEL="reuse-$reuse" timeout "$budget" \
    bash tools/gpu_node/bench_cluster.sh "$build" "$out/bench-reuse-$reuse" "1 4" "$k" "$tasks" \
    > "$out/bench-reuse-$reuse.log" 2>&1
  echo "bench reuse=$reuse: rc=$?" | tee -a "$out/summary.txt"
  grep -h "worker counts" "$out/bench-reuse-$reuse"/node-*.out 2>/dev/null | sed "s/^/reuse=$reuse /" \
    >> "$out/worker-counts.txt"
  tail -n 30 "$out/bench-reuse-$reuse.log" >> "$out/summary.txt"
done
cat "$out/worker-counts.txt" 2>/dev/null
