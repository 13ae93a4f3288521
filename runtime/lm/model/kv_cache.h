#pragma once
// A static key/value cache: per layer, keys and values for `capacity` slots, [B, Hkv, capacity, D].
// Static shapes let a CUDA graph replay decode steps without reallocating.
#include <ATen/core/Tensor.h>

#include <vector>

namespace crucible::lm {

struct KvCache {
  std::vector<at::Tensor> keys, values;
  int64_t batch = 0;
  int64_t capacity = 0;
};

}  // namespace crucible::lm
