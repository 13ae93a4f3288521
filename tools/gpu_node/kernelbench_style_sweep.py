"""The KernelBench-style pipeline that Crucible's sweep is compared with: each candidate built by
torch.utils.cpp_extension.load_inline (compiled in parallel processes, one per candidate), then 5 correctness
trials against torch.relu and 50 trials timed one by one with CUDA events, as KernelBench's eval does.
The candidates are Crucible's own sweep variants (bench_sweep --emit DIR), wrapped in a torch extension function.
Usage: python3 tools/gpu_node/kernelbench_style_sweep.py DIR COUNT M N"""
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.cpp_extension import load_inline

WRAPPER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t shape[2] = {x.size(0), x.size(1)}, strides[2] = {x.stride(0), x.stride(1)};
  crucible_tensor in{x.data_ptr(), 0, 2, shape, strides}, out{y.data_ptr(), 0, 2, shape, strides};
  crucible_forward(&in, 1, &out, 1, at::cuda::getCurrentCUDAStream().stream());
  return y;
}
"""
INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels_eval", "include")


def build(args):
    index, source, build_root = args
    build_dir = os.path.join(build_root, f"v{index}")
    os.makedirs(build_dir, exist_ok=True)
    start = time.perf_counter()
    load_inline(name=f"kb_variant_{index}", cpp_sources="torch::Tensor run(torch::Tensor x);",
                cuda_sources=source + WRAPPER, functions=["run"], build_directory=build_dir,
                extra_include_paths=[INCLUDE], extra_cuda_cflags=["-O3"], verbose=False)
    return time.perf_counter() - start


def main():
    directory, count, m, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sources = [open(os.path.join(directory, f"variant_{i}.cu")).read() for i in range(count)]
    wall_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as build_root:
        with mp.get_context("spawn").Pool(count) as pool:
            compile_times = pool.map(build, [(i, s, build_root) for i, s in enumerate(sources)])
        compile_wall = time.perf_counter() - wall_start
        rows = []
        for i, source in enumerate(sources):
            start = time.perf_counter()
            module = load_inline(name=f"kb_variant_{i}", cpp_sources="torch::Tensor run(torch::Tensor x);",
                                 cuda_sources=source + WRAPPER, functions=["run"],
                                 build_directory=os.path.join(build_root, f"v{i}"), extra_include_paths=[INCLUDE],
                                 extra_cuda_cflags=["-O3"], verbose=False)
            correct = True
            for trial in range(5):
                x = torch.randn(m, n, device="cuda")
                correct &= torch.allclose(module.run(x), torch.relu(x), atol=1e-6, rtol=1e-6)
            x = torch.randn(m, n, device="cuda")
            times = []
            for _ in range(50):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                module.run(x)
                end.record()
                torch.cuda.synchronize()
                times.append(begin.elapsed_time(end) * 1e3)
            rows.append((i, compile_times[i], time.perf_counter() - start, correct, statistics.median(times)))
    wall = time.perf_counter() - wall_start
    print(f"{'#':<4} {'compile_s':>9} {'eval_s':>8} {'correct':>8} {'median_us':>10}")
    for i, c, e, ok, med in rows:
        print(f"{i:<4} {c:9.2f} {e:8.3f} {str(ok):>8} {med:10.1f}")
    print(f"\n{count} candidates, KernelBench-style: compile wall {compile_wall:.1f} s ({count} in parallel on "
          f"{os.cpu_count()} cores), total wall {wall:.1f} s, median compile {statistics.median(compile_times):.1f} s")


if __name__ == "__main__":
    main()
