#pragma once
// The CUDA worker's self-test kernel (self_test.cu), run by the reset (worker_device_cuda.cpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace crucible::eval::worker {

// Sums self_test::element(challenge, i) on `stream` into `device_word` (8 bytes of the worker's own) and copies the
// sum back; false with the CUDA error when any step fails.
bool run_self_test(uint64_t challenge, void* device_word, cudaStream_t stream, uint64_t& sum, std::string& why);

}  // namespace crucible::eval::worker
