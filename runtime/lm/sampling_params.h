#pragma once
// How one request samples: plain values, shared by the facade (no torch) and the batch sampler.
#include <cstdint>

namespace crucible::lm {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // 1 = off
  int64_t top_k = 0;         // 0 = off
  uint64_t seed = 0;
};

}  // namespace crucible::lm
