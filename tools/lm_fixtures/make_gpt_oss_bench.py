#!/usr/bin/env python3
"""Random-weight gpt-oss models at the released shapes, for tools/bench_lm and tools/bench_grpo_step: bfloat16
attention, router, norms and embeddings, MXFP4 experts (random codes, scales near 2^-7) written directly as
`_blocks` / `_scales` as the released checkpoints store them, so the 120b model never exists in bfloat16. One
shard per layer, an index, the published config.json, and the fixture tokenizer padded to the vocabulary.

  python3 tools/lm_fixtures/make_gpt_oss_bench.py gpt-oss-20b DIR     # about 13 GB of files
  python3 tools/lm_fixtures/make_gpt_oss_bench.py gpt-oss-120b DIR    # about 61 GB: more disk than a one-GPU node
  ./build-gpu/tools/bench_lm --model DIR --batches 1,64               # 512-token prompts, 512 new tokens
  python3 tools/lm_fixtures/make_gpt_oss_bench.py gpt-oss-120b DIR --config-only   # config and tokenizer only:
  ./build-gpu/tools/bench_lm --model DIR --random-weights 1           # weights drawn on the GPU (any size)
Seeded: the same files every time.
"""
import json, pathlib, subprocess, sys
import torch
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The published config.json values of openai/gpt-oss-20b and -120b (transformers' keys).
COMMON = dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], vocab_size=201088, hidden_size=2880,
              intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8, sliding_window=128,
              max_position_embeddings=131072, rms_norm_eps=1e-5, num_experts_per_tok=4, swiglu_limit=7.0,
              attention_bias=True, tie_word_embeddings=False, hidden_act="silu", rope_theta=150000.0,
              rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                                original_max_position_embeddings=4096),
              eos_token_id=200002, pad_token_id=199999, torch_dtype="bfloat16",
              quantization_config=dict(quant_method="mxfp4"))
SHAPES = {"gpt-oss-20b": dict(num_hidden_layers=24, num_local_experts=32),
          "gpt-oss-120b": dict(num_hidden_layers=36, num_local_experts=128)}


def randn(g, *shape, scale=0.02):
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


def mxfp4(g, experts, rows, cols):
    blocks = torch.randint(0, 256, (experts, rows, cols // 32, 16), generator=g, dtype=torch.uint8)
    scales = torch.randint(118, 122, (experts, rows, cols // 32), generator=g, dtype=torch.uint8)
    return blocks, scales


def layer_tensors(g, c, i):
    h, d, hq, hkv, e, inter = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                               c["num_local_experts"], c["intermediate_size"])
    p = f"model.layers.{i}."
    t = {p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
         p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
         p + "self_attn.sinks": randn(g, hq, scale=1.0)}
    for name, rows, cols in (("q_proj", hq * d, h), ("k_proj", hkv * d, h), ("v_proj", hkv * d, h), ("o_proj", h, hq * d)):
        t[p + f"self_attn.{name}.weight"] = randn(g, rows, cols)
        t[p + f"self_attn.{name}.bias"] = randn(g, rows)
    t[p + "mlp.router.weight"] = randn(g, e, h)
    t[p + "mlp.router.bias"] = randn(g, e)
    for name, rows, cols in (("gate_up_proj", 2 * inter, h), ("down_proj", h, inter)):
        t[p + f"mlp.experts.{name}_blocks"], t[p + f"mlp.experts.{name}_scales"] = mxfp4(g, e, rows, cols)
        t[p + f"mlp.experts.{name}_bias"] = randn(g, e, rows)
    return t


def main():
    shape, out = sys.argv[1], pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    c = dict(COMMON, **SHAPES[shape])
    c["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c["num_hidden_layers"])]
    (out / "config.json").write_text(json.dumps(c, indent=2))
    if "--config-only" in sys.argv[3:]:  # for --random-weights: the benches draw the weights on the GPU
        subprocess.run([sys.executable, str(ROOT / "tools/lm_fixtures/pad_tokenizer.py"),
                        str(ROOT / "tests/fixtures/lm/qwen2_tiny/tokenizer.json"), str(out)], check=True)
        print(f"wrote {shape}'s config.json and tokenizer.json in {out}")
        return
    g = torch.Generator().manual_seed(0)
    weight_map, total = {}, 0
    shards = [("model-embed.safetensors", {"model.embed_tokens.weight": randn(g, c["vocab_size"], c["hidden_size"]),
                                           "lm_head.weight": randn(g, c["vocab_size"], c["hidden_size"]),
                                           "model.norm.weight": torch.ones(c["hidden_size"], dtype=torch.bfloat16)})]
    for name, tensors in shards + [(f"model-layer{i:03d}.safetensors", None) for i in range(c["num_hidden_layers"])]:
        if tensors is None:
            tensors = layer_tensors(g, c, int(name[11:14]))
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = name
            total += v.numel() * v.element_size()
        print(f"{name}: {sum(v.numel() * v.element_size() for v in tensors.values()) / 1e9:.2f} GB", flush=True)
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                  "weight_map": weight_map}))
    subprocess.run([sys.executable, str(ROOT / "tools/lm_fixtures/pad_tokenizer.py"),
                    str(ROOT / "tests/fixtures/lm/qwen2_tiny/tokenizer.json"), str(out)], check=True)
    print(f"made {shape} in {out}: {total / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
