#pragma once
// How one request samples: plain values, shared by the facade (no torch) and the batch sampler.
#include <cstdint>

// The draw is computed on the host and in the sampling kernels alike: the same bits either way.
#include "lm/host_device.h"

namespace crucible::lm {

// SplitMix64's finaliser: spreads a seed over all 64 bits (the sampler's noise keys, a policy's per-request seeds).
CRUCIBLE_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The uniform number in (0, 1] a row with this seed draws at this step of its completion: 24 random bits plus a half,
// scaled into a float; the highest rounds to exactly 1 (the sampler keeps its target below the total).
CRUCIBLE_HOST_DEVICE inline float row_uniform(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ (static_cast<uint64_t>(step + 1) * 0x9E3779B97F4A7C15ull));
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // 1 = off
  int64_t top_k = 0;         // 0 = off
  uint64_t seed = 0;
};

}  // namespace crucible::lm
