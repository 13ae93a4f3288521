#pragma once
// Peak device memory as LibTorch's CUDA caching allocator counts it (what torch.cuda.max_memory_allocated reports).
#include <c10/core/Device.h>

#include <cstdint>

namespace crucible::lm {

void reset_peak_memory(c10::Device device);
int64_t peak_memory_bytes(c10::Device device);  // 0 on the CPU or without a CUDA LibTorch

}  // namespace crucible::lm
