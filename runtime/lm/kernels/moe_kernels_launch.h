#pragma once
// The mixture-of-experts kernel's launch in plain CUDA types: the .cu file does not see LibTorch.
#include <cuda_runtime.h>

#include <cstdint>

#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm::kernels {

// Assignments (a token's chosen expert) a kernel launch takes: the block keeps the list of its expert's in shared
// memory. 256 is a batch of 64 tokens with 4 experts each.
constexpr int kMaxExpertAssignments = 256;

// out[a, r] = sum_c x[a / x_divisor, c] * W[experts[a], r, c] + bias[experts[a], r], W decoded from MXFP4 as it is
// read (blocks [E, rows, cols / 32, 16], scales [E, rows, cols / 32], uint8), summed in float32.
struct ExpertGemvArgs {
  const void* x = nullptr;  // row i at x + i * x_row_stride elements, `cols` contiguous
  int64_t x_row_stride = 0;
  int x_divisor = 1;               // assignment a reads x's row a / x_divisor (k for the first projection, 1 after)
  Element x_element = Element::f32;
  const int64_t* experts = nullptr;  // [assignments]
  int assignments = 0;
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  const void* bias = nullptr;  // [E, rows], or null
  Element bias_element = Element::f32;
  float* out = nullptr;  // [assignments, rows]
  int experts_count = 0, rows = 0, cols = 0;
};

bool launch_expert_gemv(const ExpertGemvArgs& args, cudaStream_t stream);

}  // namespace crucible::lm::kernels
