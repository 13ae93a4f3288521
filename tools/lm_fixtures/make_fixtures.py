#!/usr/bin/env python3
"""Makes the language-model golden fixtures in tests/fixtures/lm (run once on a node with transformers + tokenizers).

Writes, per model directory: a Hugging Face model (config.json, safetensors weights, tokenizer files) with random
weights, and expected.safetensors with transformers' float32 logits for prompts of several lengths and greedy
continuations. tokenizer_cases.json holds the tokenizers library's encodings and decodings of a test corpus, and
the chat templates' renderings. Everything is seeded: re-running gives the same files.
Usage: python3 tools/lm_fixtures/make_fixtures.py [OUT_DIR]
"""
import json, os, pathlib, sys
import torch
import tokenizers
from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
import transformers
from transformers import PreTrainedTokenizerFast
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/lm"

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML = ("{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_CHAT = ("{{ bos_token }}{% for message in messages %}"
               "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
               " + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def training_corpus():
    files = sorted(p for p in ROOT.rglob("*") if p.suffix in {".cpp", ".h", ".cu", ".md", ".toml", ".py"}
                   and "build" not in p.parts and ".gpu-node" not in p.parts and "fixtures" not in p.parts)
    texts = [p.read_text(errors="replace") for p in files]
    texts += ["naïve café résumé Ünïcödé straße 東京 中文字符 日本語テキスト 😀🚀 ∑∫√ “quotes” — dash"] * 50
    return texts


def train_tokenizer(kind):
    tok = Tokenizer(models.BPE())
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
        pattern, specials = QWEN_SPLIT, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        pattern = LLAMA3_SPLIT
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    tok.add_tokens(["<tool_call>", "</tool_call>"])  # added, not special: kept on decode
    if kind == "qwen2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        fast.chat_template = CHATML
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
        fast.chat_template = LLAMA3_CHAT
    return tok, fast


CASES = [
    "def relu(x):\n    return x if x > 0 else 0\n",
    "__global__ void k(const float* __restrict__ a, float* b, int n) {\n\tint i = blockIdx.x * blockDim.x + threadIdx.x;\n\tif (i < n) b[i] = a[i] > 0.f ? a[i] : 0.f;\n}\n",
    "a   b\n\n\n  c\t\td   \n  \r\n\r\nend    ",
    "   leading spaces and trailing   ",
    "numbers 1234567890 3.14159 1e-6 0x7fff 12,345",
    "I'm sure you'LL see it's THEY'RE and we'VE, he'd",
    "naïve café — “quotes” 東京 中文字符 😀🚀 ∑∫√ e\u0301 A\u030a Å",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
    "call <tool_call>{\"name\": \"f\"}</tool_call> done",
    "",
    " ",
    "\n",
    "x" * 40 + " " + "ab" * 30,
    "#include <cuda_runtime.h>\nextern \"C\" int crucible_forward(const crucible_tensor* in, int n_in) { return 0; }",
]


def tokenizer_cases(tok, fast):
    out = []
    for text in CASES:
        ids = tok.encode(text, add_special_tokens=False).ids
        with_specials = tok.encode(text, add_special_tokens=True).ids
        out.append({"text": text, "ids": ids, "ids_with_special_tokens": with_specials,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    chats = []
    for system in [None, "You write fast CUDA kernels."]:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": "Write a ReLU kernel.\n  Keep it short.  "}]
        chats.append({"system": system, "user": messages[-1]["content"],
                      "rendered": fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)})
    return {"cases": out, "chat": chats}


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def model_fixture(name, arch, vocab, dtype, shard, tok, seed):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-6)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=(dtype == torch.float32),
                                       bos_token_id=tok.token_to_id("<|endoftext|>"),
                                       eos_token_id=tok.token_to_id("<|im_end|>"))
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.LlamaConfig(**common, rope_theta=500000.0, tie_word_embeddings=False,
                                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                                       bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                                       eos_token_id=tok.token_to_id("<|eot_id|>"))
        model = transformers.LlamaForCausalLM(cfg)
    randomize(model, seed)
    model = model.to(dtype)
    model.generation_config.temperature = 0.7
    model.generation_config.top_p = 0.9
    model.generation_config.do_sample = True
    kwargs = {"max_shard_size": "200KB"} if shard else {}
    model.save_pretrained(d, safe_serialization=True, **kwargs)
    # The reference runs in float32 from exactly the stored (possibly bf16/f16) weights.
    try:
        ref = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        ref = type(model).from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    expected = {}
    texts = ["x", "def relu(x):\n    return", CASES[1][:90], CASES[0] * 2 + CASES[5]]
    with torch.no_grad():
        for i, text in enumerate(texts):
            ids = torch.tensor([tok.encode(text, add_special_tokens=False).ids], dtype=torch.long)
            expected[f"prompt_{i}"] = ids[0].clone()
            expected[f"logits_{i}"] = ref(ids).logits[0].float().contiguous()
            seq = ids
            for _ in range(24):
                nxt = ref(seq).logits[0, -1].argmax().view(1, 1)
                seq = torch.cat([seq, nxt], dim=1)
            expected[f"greedy_{i}"] = seq[0, ids.shape[1]:].clone()
    save_file(expected, str(d / "expected.safetensors"))
    print(name, "prompt lengths", [int(expected[f"prompt_{i}"].numel()) for i in range(len(texts))],
          "files", sorted(os.listdir(d)))
    print(json.dumps(json.load(open(d / "config.json")), sort_keys=True))


def main():
    print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    cases = {}
    for kind in ["qwen2", "llama3"]:
        tok, fast = train_tokenizer(kind)
        name = {"qwen2": "qwen2_tiny", "llama3": "llama_tiny"}[kind]
        d = OUT / name
        d.mkdir(parents=True, exist_ok=True)
        fast.save_pretrained(d)
        cases[kind] = tokenizer_cases(tok, fast)
        cases[kind]["tokenizer_dir"] = name
        vocab = tok.get_vocab_size(with_added_tokens=True)
        if kind == "qwen2":
            model_fixture("qwen2_tiny", "qwen2", vocab, torch.float32, False, tok, 1)
            dd = OUT / "qwen2_tiny_f16"
            dd.mkdir(parents=True, exist_ok=True)
            fast.save_pretrained(dd)
            model_fixture("qwen2_tiny_f16", "qwen2", vocab, torch.float16, False, tok, 2)
        else:
            model_fixture("llama_tiny", "llama", vocab, torch.bfloat16, True, tok, 3)
    with open(OUT / "tokenizer_cases.json", "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"fixtures: {total / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    main()
