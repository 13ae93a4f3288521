#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "lm/kernels/device_memory.h"

namespace crucible::lm {

void reset_peak_memory(c10::Device device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

int64_t peak_memory_bytes(c10::Device device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

DeviceMemory device_memory(c10::Device device) {
  DeviceMemory m;
  if (!device.is_cuda()) return m;
  const c10::cuda::CUDAGuard guard(device);
  std::size_t free = 0, total = 0, stack = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) m.device_used = static_cast<int64_t>(total - free);
  if (cudaDeviceGetLimit(&stack, cudaLimitStackSize) == cudaSuccess) m.stack_per_thread = static_cast<int64_t>(stack);
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    constexpr auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    m.reserved = stats.reserved_bytes[all].current;
    m.allocated = stats.allocated_bytes[all].current;
  } catch (const std::exception&) {
    // The allocator is made at LibTorch's first CUDA allocation: before that it holds nothing.
  }
  return m;
}

void release_cached_memory(c10::Device device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace crucible::lm
