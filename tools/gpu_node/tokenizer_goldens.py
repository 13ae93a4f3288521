#!/usr/bin/env python3
"""Writes the Hugging Face tokenizers library's ids and decodings of the tokenizer corpus for real vocabularies.

The GPU node has `tokenizers` but no internet, so the tokenizer.json files come as arguments (the lead carries over
the ones tools/install_tokenizers.sh fetched). The output is what test_tokenizer's "goldens" case compares with when
CRUCIBLE_TOKENIZER_GOLDENS names it; tools/gpu_node/check_tokenizers.sh runs both.
Usage: python3 tools/gpu_node/tokenizer_goldens.py OUT.json NAME=path/to/tokenizer.json [NAME=...]
"""
import json
import pathlib
import sys

from tokenizers import Tokenizer
import tokenizers

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fixtures/lm/tokenizer_corpus.json"


def cases_for(tokenizer, texts):
    out = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=True).ids
        out.append({
            "text": text,
            "ids": ids,
            "ids_plain": tokenizer.encode(text, add_special_tokens=False).ids,
            "decoded": tokenizer.decode(ids, skip_special_tokens=False),
            "decoded_skip": tokenizer.decode(ids, skip_special_tokens=True),
        })
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    texts = json.loads(CORPUS.read_text(encoding="utf-8"))
    goldens = {}
    for arg in sys.argv[2:]:
        name, _, path = arg.partition("=")
        if not path or not pathlib.Path(path).is_file():
            sys.exit(f"tokenizer_goldens: '{arg}' is not NAME=path/to/tokenizer.json")
        path = str(pathlib.Path(path).resolve())
        goldens[name] = {"tokenizer": path, "cases": cases_for(Tokenizer.from_file(path), texts)}
        print(f"{name}: {len(texts)} texts, {sum(len(c['ids']) for c in goldens[name]['cases'])} tokens")
    pathlib.Path(sys.argv[1]).write_text(json.dumps(goldens, ensure_ascii=False), encoding="utf-8")
    print(f"tokenizers {tokenizers.__version__}: wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
