#!/usr/bin/env python3
"""Random-weight models in published configurations, and transformers' generate() on them: the baseline that
tools/bench_lm is compared against (same directory, same GPU, same call).

  python3 tools/lm_fixtures/bench_hf_generate.py make qwen2.5-0.5b DIR      # bf16 weights, seeded
  python3 tools/lm_fixtures/bench_hf_generate.py bench DIR [--batches 1,8,64] [--prompt 512] [--new 512]
Prints a markdown table like bench_lm's: prefill tokens/s (one forward over the prompts), decode and overall
new tokens/s of generate() (sampling at temperature 0.7, EOS suppressed so every row makes all its tokens),
and torch.cuda.max_memory_allocated.
"""
import argparse, json, time
import torch
import transformers

SHAPES = {
    # The published config.json values of Qwen/Qwen2.5-0.5B and Qwen/Qwen2.5-Coder-1.5B.
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         bos_token_id=151643, eos_token_id=151643),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                               num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                               rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                               bos_token_id=151643, eos_token_id=151643),
}


def make(shape, out):
    torch.manual_seed(0)
    config = transformers.Qwen2Config(**SHAPES[shape])
    with torch.device("cuda"):
        model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(f"made {shape} in {out}: {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters")


def bench(model_dir, batches, prompt, new):
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {model_dir}, attention "
          f"{model.config._attn_implementation}")
    print("| batch | prefill tok/s | decode tok/s | new tok/s overall | total s | peak GiB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    g = torch.Generator(device="cuda").manual_seed(1234)
    for b in batches:
        ids = torch.randint(0, vocab, (b, prompt), device="cuda", generator=g)
        mask = torch.ones_like(ids)
        kwargs = dict(attention_mask=mask, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                      pad_token_id=model.config.eos_token_id)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            model(ids, attention_mask=mask, use_cache=True)
            torch.cuda.synchronize()
            prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kwargs)
            torch.cuda.synchronize()
            total = time.perf_counter() - t0
        made = out.shape[1] - prompt
        print(f"| {b} | {b * prompt / prefill:.0f} | {b * (made - 1) / (total - prefill):.0f} | {b * made / total:.0f} "
              f"| {total:.2f} | {torch.cuda.max_memory_allocated() / 2**30:.2f} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("shape", choices=sorted(SHAPES))
    m.add_argument("out")
    b = sub.add_parser("bench")
    b.add_argument("model_dir")
    b.add_argument("--batches", default="1,8,64")
    b.add_argument("--prompt", type=int, default=512)
    b.add_argument("--new", type=int, default=512)
    a = p.parse_args()
    if a.cmd == "make":
        make(a.shape, a.out)
    else:
        bench(a.model_dir, [int(x) for x in a.batches.split(",")], a.prompt, a.new)


if __name__ == "__main__":
    main()
