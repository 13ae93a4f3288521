// The CUDA worker's self-test after a reset (worker_self_test.h): a kernel on the worker's own stream sums the
// challenge's elements into the worker's own 8 bytes of device memory.
#include <cuda_runtime.h>

#include <string>

#include "worker_self_test.h"
#include "self_test_device.h"

namespace crucible::eval::worker {
namespace {

__global__ void sum_elements(uint64_t challenge, unsigned long long* sum) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < self_test::kElements) atomicAdd(sum, static_cast<unsigned long long>(self_test::element(challenge, i)));
}

}  // namespace

bool run_self_test(uint64_t challenge, void* device_word, cudaStream_t stream, uint64_t& sum, std::string& why) {
  auto* word = static_cast<unsigned long long*>(device_word);
  cudaError_t e = cudaMemsetAsync(word, 0, sizeof *word, stream);
  if (e == cudaSuccess) {
    sum_elements<<<self_test::kElements / 256, 256, 0, stream>>>(challenge, word);
    e = cudaGetLastError();
  }
  unsigned long long host = 0;
  if (e == cudaSuccess) e = cudaMemcpyAsync(&host, word, sizeof host, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    why = std::string("self-test: ") + cudaGetErrorName(e);
    return false;
  }
  sum = host;
  return true;
}

}  // namespace crucible::eval::worker
