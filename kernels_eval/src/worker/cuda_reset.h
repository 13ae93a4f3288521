#pragma once
// What the CUDA worker tracks of a candidate so that a reset can prove it left nothing behind (cuda_reset.cpp):
// the device memory it allocated through the worker's exported allocation functions, and the device libraries it
// loaded (split builds).
#include <cuda_runtime.h>

#include <cstddef>

namespace crucible::eval::worker {

cudaStream_t own_stream();  // the worker's stream (worker_device_cuda.cpp)

void note_allocation(void* ptr, std::size_t bytes);
void note_free(void* ptr);
void note_library(cudaLibrary_t library);

}  // namespace crucible::eval::worker
