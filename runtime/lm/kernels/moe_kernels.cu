// The experts of a mixture of experts for a few tokens, read straight from MXFP4: one block per (expert, 32 rows),
// which finds the assignments routed to its expert on the device (no host synchronisation, so a decode step can be
// captured in a CUDA graph) and reads its rows once for all of them. A warp takes a row, 256 columns a step: lane l
// reads 4 code bytes (8 values) of the row's block step * 8 + l / 4, so the warp's code reads are 128 contiguous bytes
// and its reads of an input row 256 contiguous values, 8 to a lane in one or two 16-byte loads. Each 8 values are
// decoded into registers once and multiplied with up to kChunk assignments' inputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/moe_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunk = 8;  // assignments a warp multiplies with one decoded run of 8 values

// 8 consecutive values at p (16-byte aligned) as floats.
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ float2 to_float2(__half2 h) { return __half22float2(h); }

// 16-bit values: one 16-byte load, converted a pair at a time (T2: __nv_bfloat162 or __half2).
template <typename T2>
__device__ __forceinline__ void load8_pairs(const void* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const T2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) { load8_pairs<__nv_bfloat162>(p, v); }
__device__ __forceinline__ void load8(const __half* p, float (&v)[8]) { load8_pairs<__half2>(p, v); }

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

// 2^(scale - 127) built from its bits: exact (scale 0 is 2^-127, a subnormal; 255, NaN in the MX format, is refused
// at load).
__device__ __forceinline__ float scale_of(unsigned scale) {
  return scale == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(scale) << 23);
}

template <typename T>
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
  const T* x = static_cast<const T*>(a.x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quarter = lane % 4;
  const int blocks_per_row = a.cols / 32;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int row = blockIdx.y * kRowsPerBlock + warp * kRowsPerWarp + rr;
    if (row >= a.rows) return;  // the whole warp: rows are per warp
    const int64_t row_index = static_cast<int64_t>(expert) * a.rows + row;
    const uint8_t* codes = a.blocks + row_index * blocks_per_row * 16;
    const uint8_t* scales = a.scales + row_index * blocks_per_row;
    const float bias = a.bias ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
    for (int first = 0; first < n; first += kChunk) {
      const int chunk = min(kChunk, n - first);
      float acc[kChunk];
#pragma unroll
      for (int c = 0; c < kChunk; ++c) acc[c] = 0.0f;
      for (int b = lane / 4; b < blocks_per_row; b += 8) {
        const unsigned word = reinterpret_cast<const unsigned*>(codes + static_cast<int64_t>(b) * 16)[quarter];
        const float scale = scale_of(scales[b]);
        float w[8];
#pragma unroll
        for (int byte = 0; byte < 4; ++byte) {
          const unsigned v = (word >> (8 * byte)) & 0xFFu;
          w[2 * byte] = e2m1(v & 0xFu) * scale;  // the low nibble is the earlier value
          w[2 * byte + 1] = e2m1(v >> 4) * scale;
        }
        const int64_t column = static_cast<int64_t>(b) * 32 + quarter * 8;
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          if (c >= chunk) break;
          float in[8];
          load8(x + static_cast<int64_t>(mine[first + c] / a.x_divisor) * a.x_row_stride + column, in);
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) sum += w[i] * in[i];
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
  switch (args.x_element) {
    case Element::bf16: expert_gemv_kernel<__nv_bfloat16><<<grid, kWarps * 32, 0, stream>>>(args); break;
    case Element::f16: expert_gemv_kernel<__half><<<grid, kWarps * 32, 0, stream>>>(args); break;
    default: expert_gemv_kernel<float><<<grid, kWarps * 32, 0, stream>>>(args); break;
  }
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
