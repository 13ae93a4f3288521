"""The compile step for a Triton candidate: runs it once on scratch tensors of the task's shapes, so that Triton
compiles every kernel it launches (ptxas included) into the candidate's own cache. The evaluator runs this as an
unprivileged, file-confined process with a time limit; the sandboxed worker then only loads from that cache.

Usage: python3 -I compile.py --candidate PATH --cache DIR --device N --shapes JSON
  JSON: {"inputs": [[dtype, [dims]], ...], "outputs": [...]}, dtype a crucible_dtype number.
Prints one JSON object: {"ok": true} or {"ok": false, "error": TEXT, "kind": "compile" | "run"}.
"""
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from crucible_triton.worker import load_module, one_line  # noqa: E402


def arg(name):
    return sys.argv[sys.argv.index(name) + 1]


def main():
    os.environ["TRITON_CACHE_DIR"] = arg("--cache")
    os.environ["TRITON_F32_DEFAULT"] = "ieee"
    import torch
    import triton
    device = torch.device("cuda", int(arg("--device")))
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float64, 4: torch.int32,
              5: torch.int64, 6: torch.bool}
    shapes = json.loads(arg("--shapes"))

    def scratch(dtype, shape, fill):
        t = dtypes[dtype]
        if t.is_floating_point:
            return torch.randn(shape, device=device, dtype=t) if fill else torch.empty(shape, device=device, dtype=t)
        return torch.zeros(shape, device=device, dtype=t)

    inputs = [scratch(d, s, True) for d, s in shapes["inputs"]]
    outputs = [scratch(d, s, False) for d, s in shapes["outputs"]]
    path = arg("--candidate")
    with open(path, "rb") as f:
        source = f.read().decode("utf-8", errors="replace")
    stream = torch.cuda.Stream(device)
    torch.cuda.set_stream(stream)
    try:
        module = load_module("candidate.py", source)  # the worker uses the same name: the same cache keys
        module["crucible_forward"](inputs, outputs)
        torch.cuda.synchronize()
    except triton.compiler.errors.CompilationError as e:
        return {"ok": False, "kind": "compile", "error": compile_message(e, path)}
    except Exception as e:
        kind = "compile" if type(e).__module__.startswith("triton") else "run"
        return {"ok": False, "kind": kind, "error": one_line(e)}
    return {"ok": True}


def compile_message(e, path):
    """Triton's message, pointing at the user's file name rather than the cache's path."""
    text = str(e)
    return text[-3000:]


if __name__ == "__main__":
    try:
        result = main()
    except Exception as e:  # the environment, not the candidate: no GPU, no Triton, a full disk
        result = {"ok": False, "kind": "environment", "error": one_line(e)}
    print(json.dumps(result))

