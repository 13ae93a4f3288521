#include <c10/cuda/CUDACachingAllocator.h>

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

}  // namespace crucible::lm
