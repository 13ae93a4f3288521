"""KernelBench-style compile of the same elementwise kernel through torch.utils.cpp_extension.load_inline,
each with a unique name so nothing is cached: the baseline for bench_compile. Run where PyTorch with CUDA is.
With --cpu, the same ReLU as C++ alone (cpp_sources only), the baseline for bench_kernelbench_compile on a CPU node.
Usage: python3 tools/bench_load_inline.py [COUNT] [--cpu]"""
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
CPU_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (long i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
  return y;
}
"""


def main():
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    cpu = "--cpu" in sys.argv
    count = int(args[0]) if args else 2
    times = []
    for i in range(count):
        with tempfile.TemporaryDirectory() as build_dir:
            start = time.perf_counter()
            if cpu:
                load_inline(name=f"relu_variant_{os.getpid()}_{i}", cpp_sources=CPU_SOURCE, functions=["relu"],
                            build_directory=build_dir, extra_cflags=["-O3"], verbose=False)
            else:
                load_inline(name=f"relu_variant_{os.getpid()}_{i}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                            functions=["relu"], build_directory=build_dir, extra_cuda_cflags=["-O3"], verbose=False)
            times.append(time.perf_counter() - start)
            print(f"load_inline candidate {i}: {times[-1]:.2f} s", flush=True)
    print(f"load_inline per candidate: median {statistics.median(times):.2f} s over {count}")


if __name__ == "__main__":
    main()
