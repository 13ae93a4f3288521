#pragma once
// What the decode kernels share for copying global memory into shared memory behind their own work (cp.async,
// compute capability 8.0 or later): a pointer's shared-memory address, a copy, and a thread's groups of copies
// committed and waited for.
#include <cuda_runtime.h>

#include <cstdint>

namespace crucible::lm::kernels {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, 16-byte aligned both: behind the thread's other work where the GPU copies
// asynchronously (compute capability 8.0 and later), at once before that (where the groups below are no-ops).
__device__ __forceinline__ void copy16_behind(void* to, const void* from) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(to)), "l"(from) : "memory");
#else
  *static_cast<uint4*>(to) = *static_cast<const uint4*>(from);
#endif
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `kPending` of this thread's groups of copies are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace crucible::lm::kernels
