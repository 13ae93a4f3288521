#!/usr/bin/env bash
# On a GPU node: a K=64 best-of-N sweep over KernelBench level-1 elementwise problems, judged by 1 and by N evaluator
# node processes (one per GPU), at the problems' own sizes and at the tasks' small sizes, full mode.
# The problems are imported with the node's PyTorch (CUDA traces at their written sizes), the candidates are
# bench_kb_candidates' variants, replayed.
# Usage: bash tools/gpu_node/kb_scaleout.sh KERNELBENCH_LEVEL1_FILES_DIR OUT_DIR [STEPS]
#   STEPS: any of import own small (default: all three); NODE_COUNTS (default "1 4"), K (default 64).
set -euo pipefail
cd "$(dirname "$0")/../.."
problems=$(realpath "$1")
out=$(realpath -m "$2")
steps=${3:-import own small}
mkdir -p "$out"
bash tools/gpu_node/ensure_built.sh "$out"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-$(command -v python3)}
tasks_dir=${TASKS_DIR:-$out/tasks}
names=$(ls "$problems"/*.py | sed -E 's|.*/([0-9]+)_.*|"kb_l1_\1"|' | paste -sd, | sed 's/,/, /g')
ids=$(ls "$problems"/*.py | sed -E 's|.*/([0-9]+)_.*|\1|' | tr '\n' ' ')
for step in $steps; do
  start=$(date +%s)
  case $step in
    import)
      build-gpu/tools/crucible tasks import --kernelbench "$problems"/*.py --cuda --jobs 4 --out "$tasks_dir" \
        --json > "$out/import.json"
      build-gpu/tools/bench_kb_candidates "$out/candidates" "${K:-64}" $ids ;;
    own|small)
      sizes=cuda; [ "$step" = small ] && sizes=cpu
      MODE=full SIZES=$sizes TASKS_DIR="$tasks_dir" REPLAY_DIR="$out/candidates" LABEL="$step sizes" \
        bash tools/gpu_node/bench_cluster.sh build-gpu "$out/$step" "${NODE_COUNTS:-1 4}" "${K:-64}" "$names" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "$step: $(( $(date +%s) - start )) s"
done
