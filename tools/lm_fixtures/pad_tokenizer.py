#!/usr/bin/env python3
"""Gives a random-weight benchmark model a tokenizer: the fixture tokenizer (ChatML, 1k-token byte-level BPE) with
filler tokens appended to its vocabulary until it covers the model's, so every id the model samples decodes.
The fillers are never produced by encoding (no merges lead to them); they decode to " fill<id>". A gpt-oss config
(model_type gpt_oss) also gets harmony's special tokens at o200k_harmony's ids, so its default chat format renders.

  python3 tools/lm_fixtures/pad_tokenizer.py tests/fixtures/lm/qwen2_tiny/tokenizer.json MODEL_DIR
Reads the vocabulary size from MODEL_DIR/config.json and writes MODEL_DIR/tokenizer.json.
"""
import json, sys

source, model_dir = sys.argv[1], sys.argv[2]
tok = json.load(open(source))
config = json.load(open(f"{model_dir}/config.json"))
vocab_size = config["vocab_size"]
vocab = tok["model"]["vocab"]
HARMONY = {"<|return|>": 200002, "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006,
           "<|end|>": 200007, "<|message|>": 200008, "<|call|>": 200012}
if config.get("model_type") == "gpt_oss":
    for content, i in HARMONY.items():
        if i < vocab_size:
            tok["added_tokens"].append({"id": i, "content": content, "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": True})
taken = set(vocab.values()) | {a["id"] for a in tok["added_tokens"]}
for i in range(vocab_size):
    if i not in taken:
        vocab[f"\u0120fill{i}"] = i
json.dump(tok, open(f"{model_dir}/tokenizer.json", "w"), ensure_ascii=False)
print(f"{model_dir}/tokenizer.json: {len(vocab)} vocabulary entries + {len(tok['added_tokens'])} added tokens")
