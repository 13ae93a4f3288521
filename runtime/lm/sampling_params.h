#pragma once
// How one request samples: plain values, shared by the facade (no torch) and the batch sampler.
#include <cstdint>

namespace crucible::lm {

// SplitMix64's finaliser: spreads a seed over all 64 bits (the sampler's noise keys, a policy's per-request seeds).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // 1 = off
  int64_t top_k = 0;         // 0 = off
  uint64_t seed = 0;
};

}  // namespace crucible::lm
