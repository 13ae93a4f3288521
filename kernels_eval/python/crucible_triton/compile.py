"""The compile step for a Triton candidate: runs it once on scratch tensors of the task's shapes, so that Triton
compiles every kernel it launches (ptxas included) into the candidate's own cache. The evaluator runs this as an
unprivileged, file-confined process with a time limit; the sandboxed worker then only loads from that cache.

A multi-shape task's shapes are compiled in one step: PyTorch, Triton and the CUDA context are set up once, and a
kernel whose specialisation does not change between shapes is compiled once.

Usage: python3 -I compile.py --candidate PATH --cache DIR --device N --shapes JSON
  JSON: a list of shape sets, each {"inputs": [[dtype, [dims]], ...], "outputs": [...]}, dtype a crucible_dtype number.
Prints one JSON object: {"compiled": N, "kind": KIND, "error": TEXT}: the first N shape sets were compiled; KIND is ""
(all were), "run" (the candidate failed when run on set N-1, after Triton compiled what it launched: the worker reports
it, as it sees the same failure), "compile" (Triton refused it on set N) or "environment" (the machine failed).
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
    import triton  # noqa: F401  (no Triton here is the environment's failure, before any candidate runs)
    device = torch.device("cuda", int(arg("--device")))
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    shape_sets = json.loads(arg("--shapes"))

    def scratch(dtype, shape, fill):
        return scratch_tensor(torch, device, dtype, shape, fill)

    path = arg("--candidate")
    with open(path, "rb") as f:
        source = f.read().decode("utf-8", errors="replace")
    stream = torch.cuda.Stream(device)
    torch.cuda.set_stream(stream)
    try:
        module = load_module("candidate.py", source)  # the worker uses the same name: the same cache keys
    except Exception as e:
        return failure(e, path, 0)
    for index, shapes in enumerate(shape_sets):
        inputs = [scratch(d, s, True) for d, s in shapes["inputs"]]
        outputs = [scratch(d, s, False) for d, s in shapes["outputs"]]
        try:
            module["crucible_forward"](inputs, outputs)
            torch.cuda.synchronize()
        except Exception as e:
            return failure(e, path, index)  # after a failed run the context may be lost: later sets wait
        del inputs, outputs
        torch.cuda.empty_cache()  # one set's scratch at a time: the largest are GBs
    return {"compiled": len(shape_sets), "kind": "", "error": ""}


def scratch_tensor(torch, device, dtype, shape, fill):
    """A scratch tensor of a task's dtype (a crucible_dtype number) and shape: floating inputs random (`fill`), outputs
    uninitialised, integers zero (valid as indices)."""
    t = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float64, 4: torch.int32, 5: torch.int64,
         6: torch.bool}[dtype]
    if t.is_floating_point:
        return torch.randn(shape, device=device, dtype=t) if fill else torch.empty(shape, device=device, dtype=t)
    return torch.zeros(shape, device=device, dtype=t)


def failure(e, path, index):
    """Triton's own errors are the candidate's compile errors; anything else happened when it ran."""
    import triton
    if isinstance(e, triton.compiler.errors.CompilationError):
        return {"compiled": index, "kind": "compile", "error": compile_message(e, path)}
    if type(e).__module__.startswith("triton"):
        return {"compiled": index, "kind": "compile", "error": one_line(e)}
    return {"compiled": index + 1, "kind": "run", "error": one_line(e)}


def compile_message(e, path):
    """Triton's message, pointing at the user's file name rather than the cache's path."""
    text = str(e)
    return text[-3000:]


if __name__ == "__main__":
    try:
        result = main()
    except Exception as e:  # the environment, not the candidate: no GPU, no Triton, a full disk
        result = {"compiled": 0, "kind": "environment", "error": one_line(e)}
    print(json.dumps(result))

