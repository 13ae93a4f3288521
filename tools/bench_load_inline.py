"""KernelBench-style compile of the same elementwise kernel through torch.utils.cpp_extension.load_inline,
each with a unique name so nothing is cached: the baseline for bench_compile. Run where PyTorch with CUDA is.
Usage: python3 tools/bench_load_inline.py [COUNT]"""
import os
import statistics
import sys
import tempfile
import time

from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
CPP_SOURCE = "torch::Tensor relu(torch::Tensor x);"


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    times = []
    for i in range(count):
        with tempfile.TemporaryDirectory() as build_dir:
            start = time.perf_counter()
            load_inline(name=f"relu_variant_{os.getpid()}_{i}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                        functions=["relu"], build_directory=build_dir, extra_cuda_cflags=["-O3"], verbose=False)
            times.append(time.perf_counter() - start)
            print(f"load_inline candidate {i}: {times[-1]:.2f} s", flush=True)
    print(f"load_inline per candidate: median {statistics.median(times):.2f} s over {count}")


if __name__ == "__main__":
    main()
