#pragma once
// The self-test a reusable worker runs after unloading a candidate (docs/cuda.md, "Reusing a worker"): from the
// evaluator's challenge, a value per element, summed. The CUDA worker computes it with a kernel on its own stream;
// the evaluator computes it here, so a worker whose device path no longer works, or that answers without
// computing, is caught.
#include <cstdint>

#if defined(__CUDACC__)
#define CRUCIBLE_SELF_TEST_FN __host__ __device__ inline
#else
#define CRUCIBLE_SELF_TEST_FN inline
#endif

namespace crucible::eval::self_test {

constexpr uint32_t kElements = 1u << 16;

// splitmix64 of the challenge and the element's index: every element depends on the whole challenge.
CRUCIBLE_SELF_TEST_FN uint64_t element(uint64_t challenge, uint32_t i) {
  uint64_t z = challenge + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(i) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t expected(uint64_t challenge) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kElements; ++i) sum += element(challenge, i);
  return sum;
}

}  // namespace crucible::eval::self_test
