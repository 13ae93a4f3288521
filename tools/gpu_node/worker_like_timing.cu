// Diagnostic: times a candidate shared object the way the CUDA worker runs it (own context, events on a stream,
// device synchronisation), with the worker's settings switchable, to find which one changes a kernel's speed.
// Usage: worker_like_timing SO M N [spin 0|1] [nonblocking 0|1] [one_allocation 0|1]
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "crucible/kernel.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const int64_t m = atoll(argv[2]), n = atoll(argv[3]);
  const bool spin = argc > 4 && atoi(argv[4]), nonblocking = argc > 5 && atoi(argv[5]), one = argc > 6 && atoi(argv[6]);
  if (spin) cudaSetDeviceFlags(cudaDeviceScheduleSpin);
  void* lib = dlopen(argv[1], RTLD_NOW);
  auto forward = reinterpret_cast<decltype(&crucible_forward)>(dlsym(lib, "crucible_forward"));
  const size_t bytes = m * n * sizeof(float);
  char *x, *y;
  if (one) {
    char* arena;
    cudaMalloc(&arena, 4096 + 2 * bytes + 8192);
    x = arena + 4096;
    y = x + bytes;
  } else {
    cudaMalloc(&x, bytes);
    cudaMalloc(&y, bytes);
  }
  cudaMemset(x, 0x3f, bytes);
  cudaStream_t stream = nullptr;
  if (nonblocking) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int64_t shape[2] = {m, n}, strides[2] = {n, 1};
  crucible_tensor in{x, 0, 2, shape, strides}, out{y, 0, 2, shape, strides};
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a, stream);
    forward(&in, 1, &out, 1, stream);
    cudaEventRecord(b, stream);
    cudaDeviceSynchronize();
    float t;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("spin=%d nonblocking=%d one_allocation=%d: median %.1f us (%s)\n", spin, nonblocking, one, ms[10] * 1e3,
              cudaGetErrorString(cudaGetLastError()));
  return 0;
}
