"""Times a compiled Crucible relu candidate (its shared object) with triton.testing.do_bench, the outside timer that
Crucible's own timing is compared with. Same contract as the evaluator: crucible_forward(inputs, outputs, stream).
With --one-allocation, input and output are carved out of one allocation at the offsets Crucible's arena uses.
Usage: python3 tools/gpu_node/do_bench_candidate.py SO_PATH M N [REPS] [--one-allocation]"""
import ctypes
import statistics
import sys

import torch
import triton.testing


class CrucibleTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


def describe(t, keep):
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    strides = (ctypes.c_int64 * t.dim())(*t.stride())
    keep += [shape, strides]
    return CrucibleTensor(t.data_ptr(), 0, t.dim(), shape, strides)


def main():
    one_allocation = "--one-allocation" in sys.argv
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    so, m, n = args[0], int(args[1]), int(args[2])
    reps = int(args[3]) if len(args) > 3 else 5
    lib = ctypes.CDLL(so)
    if one_allocation:
        numel = m * n
        arena = torch.empty(1024 + 2 * numel + 1024 + 64, dtype=torch.float32, device="cuda")
        x = arena[1024:1024 + numel].view(m, n)
        y = arena[1024 + numel:1024 + 2 * numel].view(m, n)  # exactly 6 GiB apart at the default size, as there
        x.normal_()
    else:
        x = torch.randn(m, n, device="cuda")
        y = torch.empty_like(x)
    keep = []
    inputs = (CrucibleTensor * 1)(describe(x, keep))
    outputs = (CrucibleTensor * 1)(describe(y, keep))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def call():
        lib.crucible_forward(inputs, 1, outputs, 1, stream)

    call()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.relu(x)), "the candidate disagrees with torch.relu"
    medians = [triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") for _ in range(reps)]
    print(f"do_bench median over {reps} runs: {statistics.median(medians) * 1e3:.2f} us "
          f"(each: {', '.join(f'{v * 1e3:.2f}' for v in medians)})")


if __name__ == "__main__":
    main()
