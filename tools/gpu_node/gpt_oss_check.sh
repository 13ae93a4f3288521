#!/usr/bin/env bash
# gpt-oss on one GPU, in one device call: the MoE kernel's GPU tests, then decode throughput and a GRPO step at the
# released shapes on random weights drawn on the GPU (no weight files: gpt-oss-120b's 61 GB would not fit a one-GPU
# node's disk). Each step's log goes to OUT_DIR; OUT_DIR/progress.log has each step's status and wall time.
# Usage: bash tools/gpu_node/gpt_oss_check.sh OUT_DIR [STEP...]
#   tests     the GPU suite's language-model cases (gpt-oss, the MoE kernels, decoding)
#   mxfp4     bench_mxfp4: one expert's decode to bfloat16 (what training and long prefills do per routed expert)
#   20b       bench_lm, gpt-oss-20b shape: batch 1 and 64, 512-token prompts, 128 new tokens
#   120b      bench_lm, gpt-oss-120b shape: the same
#   grpo20b   bench_grpo_step, gpt-oss-20b shape: group 8 x batch 8 x 1024 tokens, LoRA rank 16, policy stages only,
#             micro-batch 4 (MICRO_BATCH=N: N) with activation checkpointing, no warm-up step (each stage's time on stderr
#             as it ends)
#   grpo120b  the same at the gpt-oss-120b shape, micro-batch 8 (its recipe's: the update is faster than with 4)
#   qwen3     bench_lm, Qwen3-8B and Qwen2.5-7B shapes beside each other (make_dense_config.py): batch 1 and 64
#   grpo_qwen3  bench_grpo_step as grpo20b, Qwen3-8B then Qwen2.5-7B
#   handover  the GPU test of an evaluator giving back its arena and pools (a GPU shared with the policy)
# The environment reaches every step: CRUCIBLE_MOE_ORDERED_TILE=64 (the wide tile of long passes), for one.
# Default: tests mxfp4 20b. Builds first unless build-gpu/ has a crucible (CRUCIBLE_TARGETS="test_gpu bench_lm
# bench_grpo_step bench_mxfp4 crucible crucible-worker crucible-cuda-worker crucible-nvrtc").
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "$1")
shift
steps=${*:-tests mxfp4 20b}
mkdir -p "$out"
export CRUCIBLE_TARGETS=${CRUCIBLE_TARGETS:-"test_gpu bench_lm bench_grpo_step bench_mxfp4 crucible crucible-worker crucible-cuda-worker crucible-nvrtc"}
bash tools/gpu_node/ensure_built.sh "$out" || exit 1
shapes=/tmp/gpt-oss-shapes
for shape in gpt-oss-20b gpt-oss-120b; do
  [ -f "$shapes/$shape/config.json" ] ||
    python3 tools/lm_fixtures/make_gpt_oss_bench.py "$shape" "$shapes/$shape" --config-only > /dev/null
done

grpo_step() {  # MODEL_DIR STATE_DIR DEFAULT_MICRO_BATCH
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True build-gpu/tools/bench_grpo_step --model "$1" --random-weights 1 \
    --group-size 8 --max-new 1024 --policy-only --ttt-steps 0 --micro-batch "${MICRO_BATCH:-$3}" \
    --activation-checkpointing --no-warm-up --state "$2"
}

run_step() {
  case $1 in
    tests) build-gpu/tests/test_gpu -tc='lm gpu*' ;;
    handover) build-gpu/tests/test_gpu -tc='gpu: an evaluator gives back*' ;;
    mxfp4) build-gpu/tools/bench_mxfp4 --device cuda:0 ;;
    20b) build-gpu/tools/bench_lm --model "$shapes/gpt-oss-20b" --random-weights 1 --batches 1,64 --new 128 ;;
    120b) build-gpu/tools/bench_lm --model "$shapes/gpt-oss-120b" --random-weights 1 --batches 1,64 --new 128 ;;
    grpo20b) grpo_step "$shapes/gpt-oss-20b" /tmp/gpt-oss-grpo20b 4 ;;
    grpo120b) grpo_step "$shapes/gpt-oss-120b" /tmp/gpt-oss-grpo120b 8 ;;
    grpo_qwen3) for dense in qwen3-8b qwen2.5-7b; do
             python3 tools/lm_fixtures/make_dense_config.py $dense "$shapes/$dense" > /dev/null &&
               grpo_step "$shapes/$dense" "/tmp/grpo-$dense" 4 || return 1
           done ;;
    qwen3) for dense in qwen3-8b qwen2.5-7b; do
             python3 tools/lm_fixtures/make_dense_config.py $dense "$shapes/$dense" > /dev/null &&
               build-gpu/tools/bench_lm --model "$shapes/$dense" --random-weights 1 --batches 1,64 --new 128 || return 1
           done ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

for step in $steps; do
  start=$(date +%s)
  run_step "$step" > "$out/$step.log" 2>&1
  echo "$step: rc $? in $(( $(date +%s) - start )) s" | tee -a "$out/progress.log"
  tail -5 "$out/$step.log"
done
