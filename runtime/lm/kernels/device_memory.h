#pragma once
// Peak device memory as LibTorch's CUDA caching allocator counts it (what torch.cuda.max_memory_allocated reports).
#include <c10/core/Device.h>

#include <cstdint>

namespace crucible::lm {

void reset_peak_memory(c10::Device device);
int64_t peak_memory_bytes(c10::Device device);  // 0 on the CPU or without a CUDA LibTorch

// Where a device's memory is, now: what the driver says is in use on the whole device, what LibTorch's allocator holds
// and hands out, and the per-thread stack the driver sized local memory by (it grows that for the most demanding
// kernel launched and keeps it, for every thread the device can hold). All 0 on the CPU.
struct DeviceMemory {
  int64_t device_used = 0;
  int64_t reserved = 0;
  int64_t allocated = 0;
  int64_t stack_per_thread = 0;
};
DeviceMemory device_memory(c10::Device device);

// Gives the blocks LibTorch's allocator caches but no tensor uses back to the driver, for other processes (an
// evaluator's workers) and other allocators. Nothing on the CPU.
void release_cached_memory(c10::Device device);

}  // namespace crucible::lm
