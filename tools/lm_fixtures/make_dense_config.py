#!/usr/bin/env python3
"""config.json of a published dense model's shape, for benchmarks on weights drawn on the GPU (`bench_lm
--random-weights SEED`, `bench_grpo_step --random-weights SEED`), and the fixture tokenizer padded to its vocabulary
(pad_tokenizer.py: the GRPO bench renders prompts and decodes samples). Nothing is downloaded.

  python3 tools/lm_fixtures/make_dense_config.py qwen3-8b DIR
  python3 tools/lm_fixtures/make_dense_config.py qwen2.5-7b DIR
Standard library only.
"""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

QWEN_TOKENS = dict(vocab_size=151936, bos_token_id=151643, eos_token_id=151645, rope_theta=1000000.0,
                   rms_norm_eps=1e-6, hidden_act="silu", torch_dtype="bfloat16", tie_word_embeddings=False)

# The published config.json values of Qwen/Qwen3-8B and Qwen/Qwen2.5-7B (sizes, heads, vocabulary, rotary base).
SHAPES = {
    "qwen3-8b": dict(QWEN_TOKENS, architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=4096,
                     intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, max_position_embeddings=40960, attention_bias=False),
    "qwen2.5-7b": dict(QWEN_TOKENS, architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=3584,
                       intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       vocab_size=152064, max_position_embeddings=32768),
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: make_dense_config.py {{{','.join(sorted(SHAPES))}}} DIR")
    out = sys.argv[2]
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        sys.exit(f"make_dense_config.py: cannot make {out}: {e.strerror}")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(SHAPES[sys.argv[1]], f, indent=1)
    subprocess.run([sys.executable, str(ROOT / "tools/lm_fixtures/pad_tokenizer.py"),
                    str(ROOT / "tests/fixtures/lm/qwen2_tiny/tokenizer.json"), out], check=True)
    print(f"{out}: config.json ({sys.argv[1]} shape) and tokenizer.json")


if __name__ == "__main__":
    main()
