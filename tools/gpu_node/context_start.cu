// Diagnostic: how long one process takes to start CUDA as a fresh evaluation worker does (cuInit, then the primary
// context, then a first allocation). Run many at once (context_starts.sh) to see how starts on one host share the
// driver. Prints "cuinit_ms context_ms alloc_ms".
// Usage: context_start [spin 0|1]
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {
double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  auto t = std::chrono::steady_clock::now();
  if (cuInit(0) != CUDA_SUCCESS) return 1;
  const double init = ms_since(t);
  t = std::chrono::steady_clock::now();
  if (argc > 1 && std::atoi(argv[1]) == 1 && cudaSetDeviceFlags(cudaDeviceScheduleSpin) != cudaSuccess)
    return 1;  // spin-waiting, as the worker does
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  const double context = ms_since(t);
  t = std::chrono::steady_clock::now();
  void* p = nullptr;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 1;
  cudaFree(p);
  std::printf("%.1f %.1f %.1f\n", init, context, ms_since(t));
  return 0;
}
