"""The compile step for a KernelBench answer with @triton.jit kernels, on a GPU: ModelNew built from the evaluator's
plan exactly as the worker builds it (model.py: the prebuilt extensions imported, the problem's init inputs, moved to
the GPU, its parameters bound by name to the task's parameter inputs), then forward called once on scratch inputs of
the task's shapes, so that Triton compiles every kernel the answer launches into the answer's own cache. The evaluator
runs this as an unprivileged, file-confined process with a time limit (kernels_eval/src/triton_step.h); the sandboxed
worker then only loads from that cache, which cannot run ptxas.

Usage: python3 -I compile_triton.py --plan PATH --cache DIR --device N --shapes JSON
  JSON: shape sets as crucible_triton/compile.py reads them; each is one input set of the plan's task.
Prints one JSON object, as crucible_triton/compile.py does: {"compiled": N, "kind": KIND, "error": TEXT}. A ModelNew
that cannot be built is "run" with nothing compiled: the worker reports it, as it fails the same way.
"""
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from crucible_kernelbench.model import LoadedModel, read_plan  # noqa: E402
from crucible_triton.compile import arg, failure, scratch_tensor  # noqa: E402
from crucible_triton.worker import load_module, one_line  # noqa: E402


def main():
    os.environ["TRITON_CACHE_DIR"] = arg("--cache")
    os.environ["TRITON_F32_DEFAULT"] = "ieee"  # as in the worker: the same cache keys
    import torch
    import torch.utils.cpp_extension  # noqa: F401  (model.py replaces its load_inline)
    import triton  # noqa: F401  (no Triton here is the environment's failure, before any candidate runs)
    device = torch.device("cuda", int(arg("--device")))
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    plan = read_plan(arg("--plan"))
    sets = [([scratch_tensor(torch, device, d, s, True) for d, s in shapes["inputs"]],
             [scratch_tensor(torch, device, d, s, False) for d, s in shapes["outputs"]])
            for shapes in json.loads(arg("--shapes"))]
    try:  # on the default stream, where the worker runs it
        model = LoadedModel(torch, plan, sets, load_module, count_calls=False, device=device)
    except Exception as e:
        return dict(failure(e, plan["candidate"], 0), compiled=0)
    for index in range(len(sets)):
        try:
            model.call(index)
            torch.cuda.synchronize()
        except Exception as e:
            return failure(e, plan["candidate"], index)  # after a failed run the context may be lost
    return {"compiled": len(sets), "kind": "", "error": ""}


if __name__ == "__main__":
    try:
        result = main()
    except Exception as e:  # the environment, not the candidate: no GPU, no Triton, a full disk, an unreadable plan
        result = {"compiled": 0, "kind": "environment", "error": one_line(e)}
    print(json.dumps(result))
