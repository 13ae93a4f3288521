#!/usr/bin/env python3
"""Qwen3 and gpt-oss goldens on the GPU node: Crucible's model against transformers on tiny random models that keep
every structural feature (Qwen3's per-head q/k norms; gpt-oss's sinks, a sliding window shorter than the prompts,
several experts with real routing, YaRN, untied unembedding, MXFP4 experts packed by Crucible's own packer).

  CRUCIBLE_TARGETS="lm_pack_mxfp4 lm_logits_dump" bash tools/gpu_node/ensure_built.sh OUT
  python3 tools/gpu_node/golden_families.py [BUILD_DIR] [OUT_DIR]

For each model and dtype (float32, bfloat16): the logits at every position of prompts of 1, 9 and 40 tokens, and a
24-token greedy continuation (transformers' argmax loop against Crucible's cached decode). float32 must agree within
2e-4 with identical continuations; bfloat16 must stay within 5% of the logit scale (as the Qwen2 GPU test asks),
and its top-1 and greedy agreement are reported.
The MXFP4 model is also checked at the format level: transformers' dequantised experts equal a decoder written
here from the format's definition. With PEFT installed (skipped visibly when not): a random PEFT adapter on
attention, router and experts loads in Crucible with PEFT's logits and gradients. Exits non-zero on any failure. Needs no internet and no weights.
"""
import json, pathlib, subprocess, sys
import torch
import transformers
from safetensors.torch import load_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build-gpu"
OUT = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else pathlib.Path("/tmp/crucible-golden-families")
PROMPT_LENGTHS = (1, 9, 40)
NEW_TOKENS = 24
F32_TOLERANCE = 2e-4
BF16_RELATIVE = 0.05
FAILURES = []

QWEN3 = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rope_theta=1000000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
             bos_token_id=1, eos_token_id=2)
# Window 8 < the 40-token prompt; 8 experts, 2 per token; YaRN as gpt-oss configures it; hidden and expert widths
# multiples of 32 (MXFP4 blocks) and different (so a dense expert tensor's layout shows in its shape).
GPT_OSS = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, max_position_embeddings=131072, num_local_experts=8,
               num_experts_per_tok=2, sliding_window=8, rms_norm_eps=1e-5, tie_word_embeddings=False,
               bos_token_id=1, eos_token_id=2,
               rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                    beta_slow=1.0, truncate=False, original_max_position_embeddings=4096))


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def randomise(model, seed):
    """Weights of a trained model's spread, not the initialiser's: norms away from one, biases and sinks nonzero,
    expert values large enough that the SwiGLU clamp at 7 is reached."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "sinks" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "experts" in name:
                p.copy_((0.5 if "gate_up" in name else 0.1) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def make(kind, out):
    torch.manual_seed(0)
    if kind == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**QWEN3))
    else:
        model = transformers.GptOssForCausalLM(transformers.GptOssConfig(**GPT_OSS))
    randomise(model, 1 if kind == "qwen3" else 2)
    model.save_pretrained(out, safe_serialization=True)
    return out


def load_hf(model_dir, dtype, mxfp4=False):
    kwargs = dict(attn_implementation="eager")
    if mxfp4:
        kwargs["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kwargs)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, **kwargs)
    return model.to(dtype).cuda().eval()


def prompts(vocab):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


@torch.no_grad()
def transformers_outputs(model, all_ids):
    out = []
    for ids in all_ids:
        x = torch.tensor([ids], device="cuda")
        logits = model(x).logits[0].float().cpu()
        seq, greedy = x, []
        for _ in range(NEW_TOKENS):  # argmax over whole-sequence passes: no cache layout to disagree about
            nxt = model(seq).logits[0, -1].argmax().view(1, 1)
            greedy.append(int(nxt))
            seq = torch.cat([seq, nxt], 1)
        out.append((logits, greedy))
    return out


def crucible_outputs(model_dir, all_ids, dtype, out_file):
    prompts_text = ";".join(",".join(map(str, ids)) for ids in all_ids)
    subprocess.run([str(BUILD / "tools/lm_logits_dump"), "--model", str(model_dir), "--prompts", prompts_text,
                    "--new", str(NEW_TOKENS), "--device", "cuda:0", "--dtype", dtype, "--out", str(out_file)],
                   check=True)
    t = load_file(str(out_file))
    return [(t[f"logits_{i}"], t[f"greedy_{i}"].tolist()) for i in range(len(all_ids))]


def compare(label, model_dir, mxfp4=False):
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    all_ids = prompts(vocab)
    truth = None  # transformers in float32: what both bfloat16 runs are measured against
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        hf = transformers_outputs(load_hf(model_dir, dtype, mxfp4), all_ids)
        ours = crucible_outputs(model_dir, all_ids, name, OUT / f"{label}-{name}.safetensors")
        truth = truth or hf
        for n, (h, c, t) in zip(PROMPT_LENGTHS, zip(hf, ours, truth)):
            diff = (h[0] - c[0]).abs().max().item()
            top1 = (h[0].argmax(-1) == c[0].argmax(-1)).float().mean().item()
            what = f"{label} {name} prompt {n}: max |logit diff| {diff:.2e}, top-1 agreement {top1:.3f}"
            if name == "f32":
                check(diff < F32_TOLERANCE, what)
                check(h[1] == c[1], f"{label} f32 prompt {n}: greedy {c[1][:8]}... equals transformers'")
            else:
                check(diff < BF16_RELATIVE * h[0].abs().max().item(), what + " (5% of the logit scale allowed)")
                # Both bfloat16 runs against float32: which of the two rounds further from the exact model.
                theirs = (h[0] - t[0]).abs().max().item()
                mine = (c[0] - t[0]).abs().max().item()
                print(f"      {label} bf16 prompt {n}: from float32, transformers {theirs:.2e}, crucible {mine:.2e}; "
                      f"greedy agrees on {sum(a == b for a, b in zip(h[1], c[1]))}/{NEW_TOKENS} tokens")


def decode_mxfp4(blocks, scales):
    """The format's definition: e2m1 codes, low nibble first, times 2^(scale - 127)."""
    lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
    codes = torch.stack([blocks & 0x0F, blocks >> 4], -1).long()
    values = lut[codes].flatten(-2) * torch.exp2(scales.float() - 127).unsqueeze(-1)
    return values.flatten(-2)


def check_mxfp4_reading(packed_dir):
    """transformers' dequantiser and the format's definition read Crucible's packing identically."""
    stored = load_file(str(packed_dir / "model.safetensors"))
    model = load_hf(packed_dir, torch.float32, mxfp4=True)
    for layer in range(GPT_OSS["num_hidden_layers"]):
        experts = model.model.layers[layer].mlp.experts
        for proj in ("gate_up_proj", "down_proj"):
            p = f"model.layers.{layer}.mlp.experts.{proj}"
            ours = decode_mxfp4(stored[p + "_blocks"], stored[p + "_scales"])  # [E, out, in]
            theirs = getattr(experts, proj).detach().float().cpu()
            if theirs.shape != ours.shape:
                theirs = theirs.transpose(1, 2)
            check(torch.equal(theirs, ours), f"layer {layer} {proj}: transformers' dequantised experts equal the "
                                             f"definition's decoding of Crucible's packing")


def check_peft(packed_dir):
    """A PEFT adapter on gpt-oss's attention, router and experts (random A and B): Crucible loads PEFT's files, gives
    its logits, and the same gradients of the first prompt's summed token log-probabilities."""
    try:
        import peft
    except ImportError:
        print("SKIP  PEFT is not installed on this node: no LoRA comparison", flush=True)
        return
    torch.manual_seed(3)
    base = load_hf(packed_dir, torch.float32, mxfp4=True)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"],
                             target_parameters=["mlp.router.weight", "mlp.experts.gate_up_proj",
                                                "mlp.experts.down_proj"], init_lora_weights=False)
    model = peft.get_peft_model(base, config)
    adapter_dir = OUT / "gpt_oss_adapter"
    model.save_pretrained(adapter_dir)
    ids = prompts(GPT_OSS["vocab_size"])
    x = torch.tensor([ids[1]], device="cuda")
    logits = model(x).logits[0].float()
    logprobs = logits[:-1].log_softmax(-1).gather(-1, x[0, 1:, None]).sum()
    model.zero_grad()
    logprobs.backward()
    ours_file = OUT / "gpt_oss_adapter_crucible.safetensors"
    grads_dir = OUT / "gpt_oss_adapter_gradients"
    prompts_text = ";".join(",".join(map(str, p)) for p in (ids[1], ids[2]))
    subprocess.run([str(BUILD / "tools/lm_logits_dump"), "--model", str(packed_dir), "--prompts", prompts_text,
                    "--new", "4", "--device", "cuda:0", "--dtype", "f32", "--out", str(ours_file),
                    "--adapter", str(adapter_dir), "--gradients", str(grads_dir)], check=True)
    ours = load_file(str(ours_file))
    diff = (ours["logits_0"] - logits.detach().cpu()).abs().max().item()
    check(diff < F32_TOLERANCE, f"PEFT adapter on gpt-oss: max |logit diff| {diff:.2e}")
    grads = load_file(str(grads_dir / "adapter_model.safetensors"))
    theirs = {n.replace(".default", ""): p.grad.float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    check(set(grads) == set(theirs), f"PEFT adapter on gpt-oss: the same {len(theirs)} adapted tensors by name")
    for name in sorted(set(grads) & set(theirs)):
        scale = theirs[name].abs().max().item() + 1e-6
        rel = (grads[name] - theirs[name]).abs().max().item() / scale
        check(rel < 1e-3, f"gradient {name}: max difference {rel:.1e} of its largest entry")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    qwen3 = make("qwen3", OUT / "qwen3")
    compare("qwen3", qwen3)
    dense = make("gpt_oss", OUT / "gpt_oss")
    compare("gpt_oss dense", dense)
    packed = OUT / "gpt_oss_mxfp4"
    subprocess.run([str(BUILD / "tools/lm_pack_mxfp4"), "--model", str(dense), "--out", str(packed)], check=True)
    check_mxfp4_reading(packed)
    compare("gpt_oss mxfp4", packed, mxfp4=True)
    check_peft(packed)
    print(f"\n{len(FAILURES)} failure(s)" if FAILURES else "\nall goldens agree")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
