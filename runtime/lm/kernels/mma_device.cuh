#pragma once
// Tensor-core helpers shared by the kernels that multiply 16-bit tiles (attention at large batches, the experts'
// MXFP4 products): one warp-wide m16n8k16 MMA with float32 accumulators, and two floats packed as its operand.
// Fragment layout (PTX ISA, mma.m16n8k16): lane = 4 g + t; a[0] holds A's row g, columns 2t and 2t + 1, a[1] row
// g + 8 of the same columns, a[2] and a[3] the same rows at columns 2t + 8 and 2t + 9; b0 holds B's rows (k) 2t and
// 2t + 1 of column (n) g, b1 rows 2t + 8 and 2t + 9; c[0], c[1] are row g, columns 2t and 2t + 1, c[2], c[3] row g + 8.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace crucible::lm::kernels {

// c += a (16 x 16, row-major) * b (16 x 8, column-major), float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of two 16-bit elements, the first in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 two = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&two);
}

template <>
__device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  const __half2 two = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&two);
}

}  // namespace crucible::lm::kernels
