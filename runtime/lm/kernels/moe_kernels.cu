// The experts of a mixture of experts for a few tokens, read straight from MXFP4: one block per (expert, 32 rows),
// which finds the assignments routed to its expert on the device (no host synchronisation, so a decode step can be
// captured in a CUDA graph) and reads its rows once for all of them. A warp takes a row: its lanes read the row's
// 17-byte blocks (16 bytes of codes and a scale) side by side, decode each block's 32 values into registers, and
// multiply them with up to kChunk assignments' inputs at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/moe_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunk = 8;  // assignments a warp multiplies with one decoded block

__device__ __forceinline__ float to_float(const void* p, int64_t i, Element e) {
  switch (e) {
    case Element::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case Element::f16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// e2m1 codes: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1(unsigned code) {
  constexpr float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = magnitudes[code & 7u];
  return (code & 8u) ? -m : m;
}

__global__ void __launch_bounds__(kWarps * 32) expert_gemv_kernel(ExpertGemvArgs a) {
  __shared__ int mine[kMaxExpertAssignments];
  __shared__ int count;
  const int expert = blockIdx.x;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < a.assignments; i += blockDim.x)
    if (a.experts[i] == expert) mine[atomicAdd(&count, 1)] = i;
  __syncthreads();
  const int n = count;
  if (n == 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int blocks_per_row = a.cols / 32;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int row = blockIdx.y * kRowsPerBlock + warp * kRowsPerWarp + rr;
    if (row >= a.rows) return;
    const int64_t row_index = static_cast<int64_t>(expert) * a.rows + row;
    const uint8_t* codes = a.blocks + row_index * blocks_per_row * 16;
    const uint8_t* scales = a.scales + row_index * blocks_per_row;
    const float bias = a.bias ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
    for (int first = 0; first < n; first += kChunk) {
      const int chunk = min(kChunk, n - first);
      float acc[kChunk];
#pragma unroll
      for (int c = 0; c < kChunk; ++c) acc[c] = 0.0f;
      for (int b = lane; b < blocks_per_row; b += 32) {
        const uint4 packed = *reinterpret_cast<const uint4*>(codes + static_cast<int64_t>(b) * 16);
        const float scale = exp2f(static_cast<float>(scales[b]) - 127.0f);
        const unsigned words[4] = {packed.x, packed.y, packed.z, packed.w};
        float w[32];
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
          for (int byte = 0; byte < 4; ++byte) {
            const unsigned v = (words[q] >> (8 * byte)) & 0xFFu;
            w[q * 8 + byte * 2] = e2m1(v & 0xFu) * scale;  // the low nibble is the earlier value
            w[q * 8 + byte * 2 + 1] = e2m1(v >> 4) * scale;
          }
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          if (c >= chunk) break;
          const int64_t x_row = mine[first + c] / a.x_divisor;
          const int64_t base = x_row * a.x_row_stride + static_cast<int64_t>(b) * 32;
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < 32; ++i) sum += w[i] * to_float(a.x, base + i, a.x_element);
          acc[c] += sum;
        }
      }
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        float v = acc[c];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
        if (lane == 0 && c < chunk) a.out[static_cast<int64_t>(mine[first + c]) * a.rows + row] = v + bias;
      }
    }
  }
}

}  // namespace

bool launch_expert_gemv(const ExpertGemvArgs& args, cudaStream_t stream) {
  if (args.assignments <= 0 || args.assignments > kMaxExpertAssignments || args.cols % 32 != 0 || args.rows <= 0 ||
      args.experts_count <= 0 || args.x_divisor <= 0)
    return false;
  const dim3 grid(args.experts_count, (args.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  expert_gemv_kernel<<<grid, kWarps * 32, 0, stream>>>(args);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
