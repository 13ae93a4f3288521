#!/usr/bin/env bash
# On a GPU node: KernelBench's own evaluator and Crucible's side by side on the agreement answers
# (tests/fixtures/kernelbench/agreement, kernelbench_agreement.py), in steps that fit the device tool's calls: a step
# may run in a later call on the same (warm) machine, as long as WORK stays.
# Usage: bash tools/gpu_node/kernelbench_agreement.sh KB_CHECKOUT OUT_DIR STEP...
#   import[:TASKS]         the answers' problems imported at their CUDA sizes (WORK/tasks)
#   prebuild[:TASKS]       KernelBench's side built with load_inline, 16 at a time (WORK/kbbuild)
#   agree[:TASKS]          both evaluators on the answers of TASKS (comma-separated; default all), one JSON per step
# AGREE_ARGS adds options of kernelbench_agreement.py to prebuild and agree (--names honest.py --repeat 3 ...).
#   bench                  bench_kernelbench_compile, lean, on the 20 honest CUDA answers
#   load_inline            tools/bench_load_inline.py 1 (the baseline of the row above)
#   suite                  the GPU suite's KernelBench and Triton cases
# WORK defaults to /tmp/kbagree. Each step's wall time goes to OUT_DIR/progress.log. The first call builds (a minute or
# two with CRUCIBLE_TARGETS="crucible crucible-worker crucible-cuda-worker crucible-nvrtc
# crucible-python-worker-support test_gpu bench_kernelbench_compile"). KernelBench's prebuild of all 36 load_inline
# answers takes about 5 minutes on 16 cores: split it (prebuild:kb_l1_19,kb_l1_21, then the rest).
set -uo pipefail
cd "$(dirname "$0")/../.."
kb=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
mkdir -p "$out"
work=${WORK:-/tmp/kbagree}
mkdir -p "$work"
bash tools/gpu_node/ensure_built.sh "$out" || exit 1
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-$(command -v python3)}
answers=tests/fixtures/kernelbench/agreement
all_tasks=$(ls "$answers" | grep '^kb_' | paste -sd,)

agreement() {  # TASKS ARGS...
  local tasks=$1
  shift
  "$CRUCIBLE_PYTHON" tools/gpu_node/kernelbench_agreement.py --kernelbench "$kb" --tasks "$work/tasks" \
    --answers "$answers" --crucible build-gpu/tools/crucible --build-root "$work/kbbuild" --only "$tasks" ${AGREE_ARGS:-} "$@"
}

problems() {  # TASKS: the problem file of each task (comma-separated)
  for t in ${1//,/ }; do
    level=$(echo "$t" | cut -d_ -f2 | tr -d l)
    ls "$kb/KernelBench/level$level/$(echo "$t" | cut -d_ -f3)_"*.py
  done
}

run_step() {  # NAME TASKS TAG: the step's own exit status
  case $1 in
    import) build-gpu/tools/crucible tasks import --kernelbench $(problems "$2") --cuda --jobs 8 --out "$work/tasks" \
              > "$out/import.txt" 2>&1 ;;
    prebuild) agreement "$2" --prebuild 16 --prebuild-only > "$out/prebuild-$3.log" 2>&1 ;;
    agree) agreement "$2" --prebuild 0 --json "$out/agreement-$3.json" > "$out/agreement-$3.log" 2>&1 ;;
    bench) stdbuf -oL build-gpu/tools/bench_kernelbench_compile "$answers"/*/honest.py --backend cuda --arch sm_90 \
             --modes lean > "$out/bench_lean.log" 2>&1 ;;
    load_inline) "$CRUCIBLE_PYTHON" tools/bench_load_inline.py 1 > "$out/load_inline.log" 2>&1 ;;
    suite) CRUCIBLE_KERNELBENCH_DIR="$kb/KernelBench" build-gpu/tests/test_gpu -tc='kernelbench gpu*,triton gpu*' \
             > "$out/suite.log" 2>&1 ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

for step in "$@"; do
  start=$(date +%s)
  name=${step%%:*}
  tasks=$all_tasks
  [[ $step == *:* ]] && tasks=${step#*:}
  tag=$(echo "$tasks ${AGREE_ARGS:-}" | md5sum | cut -c1-8)
  run_step "$name" "$tasks" "$tag"
  rc=$?
  echo "$step: rc $rc in $(( $(date +%s) - start )) s" | tee -a "$out/progress.log"
  [ "$name" = agree ] && grep '^kb_' "$out/agreement-$tag.log"
done
exit 0
