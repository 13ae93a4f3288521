#!/usr/bin/env bash
# The multi-node benchmark: a best-of-N sweep judged only by evaluator nodes joined over TCP on loopback, one node
# process per GPU (more processes than GPUs share them, round robin), for each node count given. Each run starts
# with cold compile caches; the coordinator's CPU time is recorded. Prints bench_cluster's table.
# Usage: bash tools/gpu_node/bench_cluster.sh [BUILD_DIR] [OUT_DIR] [NODE_COUNTS] [K] [TASKS]
#   e.g. bash tools/gpu_node/bench_cluster.sh build-gpu /tmp/bench-cluster "1 2 4" 64 '"relu", "softmax", "gelu"'
# Without a GPU (or with BACKEND=cpu) it runs CPU nodes: the same distribution path, each node timing on its own cores.
# SIZES=cpu uses the tasks' small size set (lets two node processes share one GPU's memory). MODE=full evaluates as
# configs/best_of_n_k64.toml does (5 correctness trials, 50 timed calls); the default is fast.
# NODE_ARGS are added to every `crucible node` (e.g. "--compile-ahead 0"); LABEL is added to each row's name.
# TASKS_DIR looks the task names up there (e.g. imported KernelBench problems); REPLAY_DIR judges the candidates
# written there (bench_kb_candidates) instead of the search policy's.
set -euo pipefail
build=${1:-build-gpu}
out=$(realpath -m "${2:-/tmp/bench-cluster}")
counts=${3:-"1 2 4"}
k=${4:-64}
tasks=${5:-'"relu", "softmax", "gelu"'}
crucible=$(realpath "$build/tools/crucible")
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
backend=${BACKEND:-cuda}
[ "$gpus" -gt 0 ] || backend=cpu  # BACKEND=cpu: CPU nodes even where GPUs are
rm -rf "$out" && mkdir -p "$out"
openssl rand -hex 32 > "$out/secret" && chmod 600 "$out/secret"
labels=()
for n in $counts; do
  port=$((47400 + n))
  dir="$out/run-$n"
  cat > "$out/experiment-$n.toml" <<TOML
[experiment]
name = "bench-cluster-$n"
mode = "best_of_n"
[tasks]
names = [$tasks]
${TASKS_DIR:+dir = \"$(realpath "$TASKS_DIR")\"}
${REPLAY_DIR:+[policy]}
${REPLAY_DIR:+kind = \"replay\"}
${REPLAY_DIR:+replay_dir = \"$(realpath "$REPLAY_DIR")\"}
[best_of_n]
k = $k
group_size = 8
[eval]
devices = []
backend = "$backend"
mode = "${MODE:-fast}"
sizes = "${SIZES:-}"
[cluster]
listen = "127.0.0.1:$port"
secret_file = "$out/secret"
TOML
  pids=()
  for ((i = 0; i < n; i++)); do
    device=cpu
    [ "$backend" = cuda ] && device="cuda:$((i % gpus))"
    CRUCIBLE_WORKER_COUNTS=1 CRUCIBLE_CACHE_DIR="$out/cache-$n-$i" "$crucible" node --join "127.0.0.1:$port" --devices "$device" \
      --secret-file "$out/secret" --name "gpu$i" --exit-when-done --give-up-after 60 ${NODE_ARGS:-} \
      ${TASKS_DIR:+--tasks-dir "$TASKS_DIR"} \
      > "$out/node-$n-$i.out" 2>&1 &
    pids+=($!)
  done
  # The coordinator's user + system CPU seconds, measured by its parent.
  CRUCIBLE_CACHE_DIR="$out/cache-run-$n" python3 - "$crucible" run "$out/experiment-$n.toml" --out "$dir" --quiet <<'PY'
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[sys.argv.index("--out") + 1] + "/coordinator_cpu_seconds", "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.exit(code)
PY
  for p in "${pids[@]}"; do wait "$p" || echo "node $p exited with $?"; done
  # Each node's output (its worker counts: the CUDA contexts it created) goes with the run for bench_cluster.
  mkdir -p "$dir/node-outputs"
  for ((i = 0; i < n; i++)); do cp "$out/node-$n-$i.out" "$dir/node-outputs/gpu$i.out" 2>/dev/null || true; done
  per_gpu=""
  [ "$backend" = cuda ] && [ "$n" -gt "$gpus" ] && per_gpu=" on $gpus GPUs"
  labels+=("$n nodes$per_gpu${LABEL:+ $LABEL}=$dir")
  "$build/tools/bench_cluster" "${labels[@]}"  # the table so far
done
