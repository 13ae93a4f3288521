#!/usr/bin/env python3
"""A LoRA adapter made by PEFT on the tiny Qwen2 fixture, and PEFT's logits with it: the golden test that adapters
trained elsewhere load in Crucible. Writes tests/fixtures/lm/qwen2_tiny_peft/ (adapter_config.json,
adapter_model.safetensors, expected.safetensors). Run once on a node with transformers + peft.
  python3 tools/lm_fixtures/make_peft_fixture.py [OUT_DIR]
"""
import pathlib, sys
import torch
import transformers
import peft
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / "tests/fixtures/lm/qwen2_tiny"
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/lm/qwen2_tiny_peft"


def main():
    print("peft", peft.__version__, "transformers", transformers.__version__)
    torch.manual_seed(0)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32, attn_implementation="eager")
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM", init_lora_weights=False,
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = peft.get_peft_model(model, config)
    with torch.no_grad():  # larger than PEFT's test init, so the adapter's effect is plain in the logits
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.1)
    model.eval()
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT)
    from safetensors import safe_open
    expected = {}
    with safe_open(str(BASE / "expected.safetensors"), "pt") as f:
        prompts = [f.get_tensor(f"prompt_{i}") for i in (1, 3)]
    with torch.no_grad():
        for i, ids in zip((1, 3), prompts):
            expected[f"prompt_{i}"] = ids.clone()
            expected[f"logits_{i}"] = model(ids.view(1, -1)).logits[0].float().contiguous()
            with model.disable_adapter():
                base = model(ids.view(1, -1)).logits[0].float()
            print(f"prompt {i}: max |adapter - base| logits = {(expected[f'logits_{i}'] - base).abs().max():.3f}")
    save_file(expected, str(OUT / "expected.safetensors"))
    print(sorted(p.name for p in OUT.iterdir()))


if __name__ == "__main__":
    main()
