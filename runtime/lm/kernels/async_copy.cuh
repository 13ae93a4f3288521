#pragma once
// What the tensor-core kernels share for copying global memory into shared memory behind their own work
// (cp.async, compute capability 8.0 or later): a pointer's shared-memory address, and a thread's groups of copies
// committed and waited for.
#include <cuda_runtime.h>

#include <cstdint>

namespace crucible::lm::kernels {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's groups of copies are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace crucible::lm::kernels
