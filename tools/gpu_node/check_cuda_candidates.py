"""Runs every configs/candidates/cuda/*.cu on the GPU against PyTorch, outside the evaluator: builds each
with the CUDA backend's nvcc flags, calls crucible_forward through ctypes on torch CUDA tensors (launching on
torch's current stream), and compares with the task's PyTorch reference under the task's tolerance.
A check of the shipped candidates until the CUDA evaluator runs them; not part of the evaluator.
Usage: python3 tools/gpu_node/check_cuda_candidates.py [--sizes cpu|cuda]"""
import ctypes
import pathlib
import subprocess
import sys
import tempfile
import tomllib

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
DTYPES = {"float32": (torch.float32, 0), "int64": (torch.int64, 5)}


class CrucibleTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


REFERENCES = {
    "relu": lambda x: torch.relu(x),
    "gelu": lambda x: F.gelu(x),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layernorm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    "rmsnorm": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
    "sum_dim": lambda x: x.sum(-1),
    "argmax_dim": lambda x: x.argmax(-1),
    "matmul": lambda a, b: a @ b,
    "bmm": lambda a, b: torch.bmm(a, b),
    "matvec": lambda a, x: torch.mv(a, x),
    "conv2d": lambda x, w: F.conv2d(x, w, stride=1, padding=1),
    "maxpool2d": lambda x: F.max_pool2d(x, 2, 2),
    "cumsum": lambda x: torch.cumsum(x, -1),
    "mse_loss": lambda p, t: F.mse_loss(p, t),
    "cross_entropy": lambda l, t: F.cross_entropy(l, t),
}


def resolve(shape, sizes):
    return [int(d) if isinstance(d, int) or str(d).isdigit() else sizes[d] for d in shape]


def draw(spec, shape, sizes):
    init = spec.get("init", {"dist": "normal"})
    if init["dist"] == "randint":
        high = init["high"] if isinstance(init["high"], int) else sizes[init["high"]]
        return torch.randint(init.get("low", 0), high, shape, device="cuda")
    if init["dist"] == "uniform":
        return torch.empty(shape, device="cuda").uniform_(init.get("low", 0.0), init.get("high", 1.0))
    return torch.randn(shape, device="cuda") * init.get("std", 1.0) + init.get("mean", 0.0)


def as_crucible(tensors):
    keep, array = [], (CrucibleTensor * len(tensors))()
    for i, t in enumerate(tensors):
        shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
        strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
        keep += [shape, strides]
        array[i] = CrucibleTensor(t.data_ptr(), DTYPES[str(t.dtype).split(".")[1]][1], t.dim(), shape, strides)
    return array, keep


def check(task_file, size_kind, build_dir):
    task = tomllib.loads(task_file.read_text())
    name = task["name"]
    source = ROOT / "configs/candidates/cuda" / f"{name}.cu"
    if not source.exists():
        return name, "MISSING", ""
    so = build_dir / f"{name}.so"
    cmd = ["/usr/local/cuda/bin/nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-shared", "-cudart", "shared",
           "-Xcompiler", "-fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden,-fno-gnu-unique",
           f"-I{ROOT}/kernels_eval/include", str(source), "-o", str(so)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    if build.returncode:
        return name, "COMPILE_ERROR", build.stderr[:300]
    sizes = task["sizes"][size_kind]
    inputs = [draw(s, resolve(s["shape"], sizes), sizes).to(DTYPES[s["dtype"]][0]) for s in task["inputs"]]
    outputs = [torch.full(resolve(s["shape"], sizes), float("nan"), device="cuda").to(DTYPES[s["dtype"]][0])
               for s in task["outputs"]]
    expected = REFERENCES[name](*inputs)
    lib = ctypes.CDLL(str(so))
    ins, keep_in = as_crucible(inputs)
    outs, keep_out = as_crucible(outputs)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    rc = lib.crucible_forward(ins, len(inputs), outs, len(outputs), stream)
    torch.cuda.synchronize()
    if rc != 0:
        return name, "RUNTIME_ERROR", f"crucible_forward returned {rc}"
    tol = task.get("tolerance", {}).get("float32", {"atol": 0, "rtol": 0})
    out = outputs[0]
    if out.dtype == torch.int64:
        ok = torch.equal(out, expected)
        err = (out != expected).sum().item()
    else:
        ok = torch.allclose(out, expected, atol=tol["atol"], rtol=tol["rtol"])
        err = (out - expected).abs().max().item()
    return name, "correct" if ok else "INCORRECT", f"max error {err:.3g}"


def main():
    # References in true float32: PyTorch lets cuDNN convolutions use TF32 by default, which misses conv2d's
    # 1e-4 tolerance on most outputs (the CUDA evaluator must do the same).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    size_kind = sys.argv[sys.argv.index("--sizes") + 1] if "--sizes" in sys.argv else "cpu"
    failures = 0
    task_files = sorted((ROOT / "configs/tasks").glob("*.toml"))
    with tempfile.TemporaryDirectory() as build_dir:
        for task_file in task_files:
            name, status, detail = check(task_file, size_kind, pathlib.Path(build_dir))
            failures += status != "correct"
            print(f"{name:14s} {status:14s} {detail}", flush=True)
    print(f"{len(task_files) - failures} correct, {failures} not ({size_kind} sizes)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
