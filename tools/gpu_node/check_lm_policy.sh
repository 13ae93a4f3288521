#!/usr/bin/env bash
# The libtorch policy through the whole runtime on a GPU node: a GRPO run and a TTT run of the tiny fixture model on
# cuda:0, sharing the GPU with the CUDA evaluator (so sampling and training take the device's lease). Prints each
# run's steps and the verdict counts. Usage: bash tools/gpu_node/check_lm_policy.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
out=${2:-/tmp/crucible-lm-policy-check}
rm -rf "$out" && mkdir -p "$out"
model=$(realpath tests/fixtures/lm/qwen2_tiny)
for mode in grpo ttt; do
  cat > "$out/$mode.toml" <<TOML
[experiment]
name = "lm-$mode"
mode = "$mode"
[tasks]
names = ["relu", "softmax"]
[policy]
kind = "libtorch"
model = "$model"
device = "cuda:0"
max_new_tokens = 64
[policy.lora]
rank = 4
[grpo]
steps = 3
batch_size = 2
group_size = 4
[ttt]
steps = 2
rollouts = 4
[reward]
kind = "composite"
[eval]
devices = ["cuda:0"]
TOML
  "$build/tools/crucible" run "$out/$mode.toml" --out "$out/$mode" --quiet
  python3 - "$out/$mode/seed-1" <<'PY'
import collections, json, sys
d = sys.argv[1]
steps = [json.loads(l) for l in open(f"{d}/steps.jsonl")]
cands = [json.loads(l) for l in open(f"{d}/candidates.jsonl")]
print(d, len(steps), "units,", len(cands), "candidates:", dict(collections.Counter(c["status"] for c in cands)))
for s in steps:
    print("  ", s["unit"], "version", s["policy_version"], "train", {k: round(v, 4) if isinstance(v, float) else v
                                                                      for k, v in s.get("train", {}).items()})
PY
done
