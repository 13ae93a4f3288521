#!/usr/bin/env python3
"""Checks that an adapter Crucible trained loads in PEFT and behaves the same there: PEFT's greedy continuation of
the prompt equals Crucible's, and PEFT's log-probabilities of those tokens match Crucible's model_logprobs.
Run on a node with transformers + peft:
  python3 tools/lm_fixtures/check_adapter_in_peft.py [ADAPTER_DIR] [BASE_MODEL_DIR]
The adapter directory holds crucible_greedy.json, written by
  crucible generate --model BASE --adapter DIR --prompt 'Task: attention\nKernel:' --temperature 0 --max-new 16 --json
"""
import json, pathlib, sys
import torch
import transformers
import peft

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTER = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/lm/qwen2_tiny_crucible_adapter"
BASE = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "tests/fixtures/lm/qwen2_tiny"


def main():
    crucible = json.loads((ADAPTER / "crucible_greedy.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(BASE)
    try:
        base = transformers.AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        base = transformers.AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32, attn_implementation="eager")
    model = peft.PeftModel.from_pretrained(base, ADAPTER).eval()
    ids = tok("Task: attention\nKernel:", return_tensors="pt").input_ids
    assert ids.shape[1] == crucible["prompt_tokens"], (ids.shape, crucible["prompt_tokens"])
    tokens, logprobs = [], []
    with torch.no_grad():
        seq = ids
        for _ in range(len(crucible["tokens"])):
            lp = torch.log_softmax(model(seq).logits[0, -1].float(), -1)
            nxt = int(lp.argmax())
            tokens.append(nxt)
            logprobs.append(float(lp[nxt]))
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    worst = max(abs(a - b) for a, b in zip(logprobs, crucible["model_logprobs"]))
    print("PEFT greedy:", tokens)
    print("Crucible:   ", crucible["tokens"])
    print(f"max |log-prob difference| = {worst:.2e}")
    ok = tokens == crucible["tokens"] and worst < 1e-4
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
