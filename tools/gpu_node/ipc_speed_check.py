"""Is GPU memory imported through CUDA IPC slower to stream than the process's own? Times relu (clamp_min with out=) on a large
tensor (events, L2 flushed) in a child process: once on memory the parent shared through CUDA IPC, once on memory
the child allocated itself. With --arena, the shared memory is one allocation of 4x the tensor size (two sets of
input and output, as Crucible's arena holds) and the tensors are slices of it.
Usage: python3 tools/gpu_node/ipc_speed_check.py [ELEMENTS] [--arena]"""
import sys

import torch
import torch.multiprocessing as mp


def timed(fn, reps=20):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(reps):
        flush.zero_()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def child(x_shared, y_shared, queue, arena=None):
    if arena is not None:
        n = x_shared.numel()
        x_shared, y_shared = arena[1024:1024 + n], arena[1024 + n:1024 + 2 * n]
    local_x, local_y = x_shared.clone(), torch.empty_like(y_shared)
    torch.cuda.synchronize()
    shared_us = timed(lambda: torch.clamp_min(x_shared, 0, out=y_shared))
    local_us = timed(lambda: torch.clamp_min(local_x, 0, out=local_y))
    queue.put((shared_us, local_us))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 4096 * 393216
    arena = None
    if "--arena" in sys.argv:
        arena = torch.empty(4 * n + 4096, device="cuda")
        x, y = arena[1024:1024 + n], arena[1024 + n:1024 + 2 * n]
        x.normal_()
    else:
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
    parent_us = timed(lambda: torch.clamp_min(x, 0, out=y))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=child, args=(x, y, queue, arena))
    p.start()
    shared_us, local_us = queue.get()
    p.join()
    print(f"{'arena' if arena is not None else 'separate'}: relu over {n} floats: parent's own memory {parent_us:.1f} us; child on IPC-imported memory "
          f"{shared_us:.1f} us; child on its own memory {local_us:.1f} us")


if __name__ == "__main__":
    main()
