#!/usr/bin/env bash
# On a GPU node: KernelBench's level 1 imported with the node's own PyTorch (CPU traces and CUDA traces at the
# problems' written sizes), every imported reference run alone on the GPU at those sizes (crucible tasks check),
# then a K=64 best-of-N sweep over kb_l1_19 (ReLU, 4096 x 393216) in full mode (bench_sweep).
# Usage: bash tools/gpu_node/kernelbench_level1.sh KERNELBENCH_DIR OUT_DIR [import|check|sweep ...]
# (no step named: all three; the build comes first when build-gpu/ has no crucible yet).
set -euo pipefail
cd "$(dirname "$0")/../.."
kernelbench=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
steps=${*:-import check sweep}
mkdir -p "$out"
bash tools/gpu_node/ensure_built.sh "$out"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-$(command -v python3)}
for step in $steps; do
  start=$(date +%s)
  case $step in
    import)  # a few problems at once: each traces at its written sizes on the one GPU (up to ~26 GB at a time)
      build-gpu/tools/crucible tasks import --kernelbench "$kernelbench" --levels 1 --cuda --jobs 3 \
        --out "$out/tasks" --json > "$out/import.json" ;;
    check)
      build-gpu/tools/crucible tasks --tasks-dir "$out/tasks" check --device cuda:0 > "$out/check_cuda.txt" || true ;;
    sweep)
      build-gpu/tools/bench_sweep --device cuda:0 --sizes cuda --task kb_l1_19 --tasks-dir "$out/tasks" \
        --count 64 > "$out/sweep.txt" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "$step: $(( $(date +%s) - start )) s"
done
