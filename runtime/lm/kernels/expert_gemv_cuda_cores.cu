// The experts' products in float32 on CUDA cores (float32 models, GPUs without bfloat16 tensor cores; up to 256
// assignments): one block per (expert, 32 rows). A warp works on 4 rows at once; lane l takes MX block l + 32 i of each
// (16 code bytes, 32 values, one scale), so a warp reads 512 contiguous bytes of a row per step and has 64 bytes a
// lane in flight. Each 8 decoded values of the 4 rows meet each of up to kChunk assignments' 8 inputs in registers, so
// an input is read once for 4 rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/moe_device.cuh"

namespace crucible::lm::kernels {
namespace {

// 8 consecutive values at p (16-byte aligned) as floats: one 16-byte load of 16-bit values, two of float32.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  widen_all<T, 8>(*reinterpret_cast<const uint4*>(p), v);
}
template <>
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  float low[4], high[4];
  widen_all<float, 4>(reinterpret_cast<const uint4*>(p)[0], low);
  widen_all<float, 4>(reinterpret_cast<const uint4*>(p)[1], high);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = low[i], v[4 + i] = high[i];
}

template <typename T, int kRows, int kChunk>
__global__ void __launch_bounds__(kWarps * 32) expert_gemv_kernel(ExpertGemvArgs a, bool by_assignment) {
  __shared__ Routed routed;
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  int expert = 0;
  const int n = gather_assignments(a, by_assignment, expert, routed);
  const int* mine = routed.mine;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.y * kWarps + warp) * kRows;
  if (n == 0 || row0 >= a.rows) return;  // no barrier follows
  const int rows_here = min(kRows, a.rows - row0);
  const int blocks_per_row = a.cols / kMxBlock;
  const int64_t first_row = static_cast<int64_t>(expert) * a.rows + row0;
  const uint4* codes = reinterpret_cast<const uint4*>(a.blocks) + first_row * blocks_per_row;
  const uint8_t* scales = a.scales + first_row * blocks_per_row;
  const T* x = static_cast<const T*>(a.x);
  for (int first = 0; first < n; first += kChunk) {
    const int chunk = min(kChunk, n - first);
    const T* inputs[kChunk];
#pragma unroll
    for (int c = 0; c < kChunk; ++c)  // past the chunk: its last input again, never read
      inputs[c] = x + static_cast<int64_t>(mine[first + min(c, chunk - 1)] / a.x_divisor) * a.x_row_stride;
    float acc[kRows][kChunk];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kChunk; ++c) acc[r][c] = 0.0f;
    for (int b = lane; b < blocks_per_row; b += 32) {
      uint4 code[kRows];
      float scale[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // past the last row: that row again, never written
        const int64_t at = static_cast<int64_t>(min(r, rows_here - 1)) * blocks_per_row + b;
        code[r] = __ldg(codes + at);
        scale[r] = scale_of(__ldg(scales + at));
      }
#pragma unroll 1
      for (int g = 0; g < 4; ++g) {
        const int64_t column = static_cast<int64_t>(b) * kMxBlock + g * 8;
        float in[kChunk][8];
#pragma unroll
        for (int c = 0; c < kChunk; ++c)
          if (c < chunk) load8(inputs[c] + column, in[c]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float w[8];
          decode8(word_of(code[r], g), w);
#pragma unroll
          for (int c = 0; c < kChunk; ++c) {
            if (c >= chunk) continue;
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) sum = fmaf(w[i], in[c][i], sum);
            acc[r][c] = fmaf(scale[r], sum, acc[r][c]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row_index = first_row + r;
      const float bias = a.bias && r < rows_here ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        float v = acc[r][c];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
        if (lane == 0 && r < rows_here && c < chunk)
          a.out[static_cast<int64_t>(mine[first + c]) * a.rows + row0 + r] = v + bias;
      }
    }
  }
}

// Few assignments (a token or two a step): 4 rows a warp for more code bytes in flight, one input at a time. Many:
// 2 rows and 4 inputs, each decoded value used 4 times (the work is then bound by arithmetic, not memory).
template <typename T>
void launch_for(const ExpertGemvArgs& args, cudaStream_t stream) {
  const bool by_assignment = args.assignments <= args.experts_count;
  const int rows_per_warp = by_assignment ? 4 : 2;
  const int rows_per_block = kWarps * rows_per_warp;
  const dim3 grid(by_assignment ? args.assignments : args.experts_count, (args.rows + rows_per_block - 1) / rows_per_block);
  if (by_assignment)
    launch(expert_gemv_kernel<T, 4, 1>, grid, dim3(kWarps * 32), 0, stream, args, true);
  else
    launch(expert_gemv_kernel<T, 2, 4>, grid, dim3(kWarps * 32), 0, stream, args, false);
}

}  // namespace

void launch_expert_gemv_cuda_cores(const ExpertGemvArgs& args, cudaStream_t stream) {
  switch (args.x_element) {
    case Element::bf16: launch_for<__nv_bfloat16>(args, stream); break;
    case Element::f16: launch_for<__half>(args, stream); break;
    default: launch_for<float>(args, stream); break;
  }
}

}  // namespace crucible::lm::kernels
