#pragma once
// Hopper's bulk copies (compute capability 9.0): the copy engine moves a contiguous piece of global memory into shared
// memory with one instruction, and counts its bytes against an mbarrier in shared memory, which the readers wait on.
// Where many threads' 16-byte asynchronous copies (async_copy.cuh) are each a request of their own, one bulk copy
// takes a row's piece: a bytes-only probe of one token's first expert projection at gpt-oss-120b read its 33 MB in
// 10.8 µs so, against 17.7 by each lane's copies (docs/benchmarks.md, gpt-oss decode).
#include <cuda_runtime.h>

#include <cstdint>

#include "lm/kernels/async_copy.cuh"

namespace crucible::lm::kernels {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// A barrier that completes a phase when one thread has arrived and the bytes it announced have landed.
__device__ __forceinline__ void init_barrier(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(barrier)) : "memory");
}

// Makes the barriers initialised by this thread visible to the copy engine and to the other threads (after a
// barrier or __syncwarp between them).
__device__ __forceinline__ void barriers_initialised() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The one arrival of the barrier's phase, announcing the bytes its copies will bring.
__device__ __forceinline__ void arrive_expecting(uint64_t* barrier, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16) from `from` to `to`, both 16-byte aligned, counted against `barrier`.
__device__ __forceinline__ void bulk_copy(void* to, const void* from, int bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(to)),
               "l"(from), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

// Waits until the barrier's phase of this parity (0 for its first, 1 for its second, ...) has completed.
__device__ __forceinline__ void wait_barrier(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
}

// Orders this thread's reads of shared memory before bulk copies issued after it into the same bytes (the copy
// engine writes through another proxy than the threads' loads).
__device__ __forceinline__ void reads_before_bulk_copies() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#endif

}  // namespace crucible::lm::kernels
