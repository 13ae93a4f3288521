#pragma once
// What the experts' tensor-core kernels share (expert_mma.cu: blocks of warps over a ring of stages; expert_warps.cu:
// one token, each warp on its own): a span's asynchronous copies, and a lane's span of MXFP4 codes times bfloat16
// inputs on tensor cores.
//
// Each warp multiplies 16 rows of its expert by up to 8 inputs a tile with mma.m16n8k16 (bfloat16 operands, float32
// sums). The products sum over the columns in any order, so the warp takes its k order from whole loads: over a span
// of 4 MX blocks lane (g, t) holds MX block t of rows g and g + 8 (16 code bytes each, decoded times the block's
// scale, exact in bfloat16) and reads the same columns of its input; step s of a block's 8 gives its columns
// 4s .. 4s + 3 the fragments' k positions 2t, 2t + 1, 2t + 8, 2t + 9, in A and B alike. Blocks past a row's end hold
// zeros in both.
#include <cuda_bf16.h>

#include <cstdint>

#include "lm/kernels/mma_device.cuh"
#include "lm/kernels/moe_device.cuh"

namespace crucible::lm::kernels {

constexpr int kSpanBlocks = 4;
constexpr int kSpanPieces = kSpanBlocks * kMxBlock / 8;  // 16-byte pieces of 8 bfloat16 inputs in a span's row
constexpr int kMmaRows = 16;

// Asynchronous copies into shared memory (at a 32-bit shared address): `bytes` of `size` read from global memory,
// the rest zeros.
__device__ __forceinline__ void copy16_async(uint32_t to, const void* from, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(bytes));
}
__device__ __forceinline__ void copy4_async(uint32_t to, const void* from, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(from), "r"(bytes));
}
__device__ __forceinline__ void copy16_async(uint32_t to, const void* from) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}
__device__ __forceinline__ void copy4_async(uint32_t to, const void* from) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(to), "l"(from));
}

// Loads from shared memory at a 32-bit shared address.
__device__ __forceinline__ uint4 load_shared16(uint32_t at) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
  return v;
}
__device__ __forceinline__ uint2 load_shared8(uint32_t at) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(at));
  return v;
}
__device__ __forceinline__ uint32_t load_shared4(uint32_t at) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(at));
  return v;
}

// A lane's scale, `shift` bits into its copied word.
__device__ __forceinline__ unsigned scale_from(uint32_t word, int shift) { return (word >> shift) & 0xFFu; }

// One span of lane (g, t)'s rows g and g + 8: their code blocks (MX block t of the span) and scales' bits, times
// `input(u, j)`, piece u of the lane's inputs in tile j (B fragments), into sums (2u + step) % kChains of each tile:
// several chains of sums let a warp issue an MMA before the one before it has finished. The scales are made inside
// the branch the warp's vote takes: the common one (no scale of the warp's above 128) needs only the first factor
// of each.
template <int kTiles, int kChains, typename Input>
__device__ __forceinline__ void multiply_code_blocks(const uint4& low_code, const uint4& high_code, unsigned low_bits,
                                                     unsigned high_bits, Input&& input,
                                                     float (&acc)[kChains][kTiles][4]) {
  with_two_steps(__any_sync(0xFFFFFFFFu, takes_two_steps(max(low_bits, high_bits))), [&](auto two_steps) {
    constexpr bool kTwoSteps = decltype(two_steps)::value;
    const PairScale low_scale = kTwoSteps ? pair_scale_of(low_bits) : one_step_scale(low_bits);
    const PairScale high_scale = kTwoSteps ? pair_scale_of(high_bits) : one_step_scale(high_bits);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      uint32_t low[4], high[4];
      decode_pairs<kTwoSteps>(word_of(low_code, u), low_scale, low);
      decode_pairs<kTwoSteps>(word_of(high_code, u), high_scale, high);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const uint4 in = input(u, j);
        const uint32_t first[4] = {low[0], high[0], low[1], high[1]}, second[4] = {low[2], high[2], low[3], high[3]};
        mma<__nv_bfloat16>(acc[(2 * u) % kChains][j], first, in.x, in.y);
        mma<__nv_bfloat16>(acc[(2 * u + 1) % kChains][j], second, in.z, in.w);
      }
    }
  });
}

// Sum i of a lane's tile j (row g, or g + 8 where i >= 2; input 2t + i % 2), its chains added in order.
template <int kTiles, int kChains>
__device__ __forceinline__ float chains_summed(const float (&acc)[kChains][kTiles][4], int j, int i) {
  float sum = acc[0][j][i];
#pragma unroll
  for (int c = 1; c < kChains; ++c) sum += acc[c][j][i];
  return sum;
}

// A lane's product of `row` for `assignment`, where `stored`, to the assignment's row of `out`; or, with the SwiGLU
// epilogue, a gate row's (g even) activated with its linear row (g + 1: lane + 4) to the assignment's row of
// `activated`. The same for the whole warp: every lane calls it, since the shuffle takes them all.
__device__ __forceinline__ void store_product(const ExpertGemvArgs& a, int64_t assignment, int row, int g,
                                              bool stored, float product) {
  if (a.activated) {
    const float linear = __shfl_xor_sync(0xFFFFFFFFu, product, 4);
    if (stored && g % 2 == 0)
      static_cast<__nv_bfloat16*>(a.activated)[assignment * (a.rows / 2) + row / 2] =
          narrow<__nv_bfloat16>(clamped_swiglu_of(product, linear, a.swiglu_limit, a.swiglu_alpha));
  } else if (stored) {
    a.out[assignment * a.rows + row] = product;
  }
}

}  // namespace crucible::lm::kernels
