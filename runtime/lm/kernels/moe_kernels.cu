// The experts of a mixture of experts read straight from MXFP4, each block finding the assignments routed to its
// expert on the device (no host synchronisation, so a decode step can be captured in a CUDA graph) and reading its
// rows once for all of them: float32 products on CUDA cores (expert_gemv_cuda_cores.cu) or bfloat16 products on
// tensor cores (expert_mma.cu), chosen here. And the layer's other kernels: whole experts decoded, the router's top k,
// the clamped SwiGLU and the weighted sum.
#include <climits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/moe_device.cuh"

namespace crucible::lm::kernels {
namespace {

// One MXFP4 block of paired codes (mxfp4_pairs.h) decoded whole into 32 values in the stored order: bfloat16 pairs
// scaled, or float32 values (both exact).
__device__ __forceinline__ void decode_block_into(const uint4& code, unsigned scale, __nv_bfloat16* out) {
  uint4* to = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t pairs[4];
    with_two_steps(takes_two_steps(scale), [&](auto two_steps) {
      decode_pairs<decltype(two_steps)::value>(word_of(code, u), pair_scale_of(scale), pairs);
    });
    to[u] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

__device__ __forceinline__ void decode_block_into(const uint4& code, unsigned scale, float* out) {
  const float factor = scale_of(scale);
  float4* to = reinterpret_cast<float4*>(out);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    float w[8];
    decode8(word_of(code, u), w);
    to[2 * u] = make_float4(w[0] * factor, w[1] * factor, w[2] * factor, w[3] * factor);
    to[2 * u + 1] = make_float4(w[4] * factor, w[5] * factor, w[6] * factor, w[7] * factor);
  }
}

template <typename T>
__global__ void mxfp4_decode_kernel(const uint4* codes, const uint8_t* scales, T* out, int64_t blocks) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    decode_block_into(__ldg(codes + b), __ldg(scales + b), out + b * kMxBlock);
}

__global__ void clamped_swiglu_kernel(const float* gate_up, void* out, Element out_element, int64_t count, int width,
                                      float limit, float alpha) {
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, column = i % width;
    const float2 pair = reinterpret_cast<const float2*>(gate_up)[row * width + column];  // gate, linear
    store_as(out, i, clamped_swiglu_of(pair.x, pair.y, limit, alpha), out_element);
  }
}

// Up to kUnrolled choices a token (kUnrolled = 0: any number, one at a time): their products, weights and the residual
// loaded at once before the sum, not one after another in its chain (a few L2 round trips in a batch-1 step's layer).
template <int kUnrolled>
__global__ void weighted_expert_sum_kernel(const float* experts_out, const void* weights, Element weights_element,
                                           const void* residual, void* out, Element out_element, int64_t count, int k,
                                           int width) {
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / width, column = i % width;
    const float before = residual ? to_float(residual, i, out_element) : 0.0f;
    float sum = 0.0f;
    if constexpr (kUnrolled > 0) {
      float product[kUnrolled], weight[kUnrolled];
#pragma unroll
      for (int j = 0; j < kUnrolled; ++j)
        if (j < k) {
          product[j] = experts_out[(token * k + j) * width + column];
          weight[j] = to_float(weights, token * k + j, weights_element);
        }
      sum = weighted_sum_of(product, weight, k);
    } else {
      for (int j = 0; j < k; ++j)
        sum += experts_out[(token * k + j) * width + column] * to_float(weights, token * k + j, weights_element);
    }
    if (residual) sum = plus_residual(sum, before, out_element);
    store_as(out, i, sum, out_element);
  }
}

// Whether (v, i) ranks before (w, j) in a top-k: the larger logit, a NaN above any number (as LibTorch's topk ranks
// it), the lower index between equals.
__device__ __forceinline__ bool ranks_before(float v, int i, float w, int j) {
  if (isnan(v) != isnan(w)) return isnan(v);
  return v > w || (!(v < w) && i < j);
}

// One warp per token: each lane holds its share of the logits; k rounds of a warp-wide arg-max, the winner's lane
// striking it out.
__global__ void route_top_k_kernel(const void* logits, Element element, int64_t tokens, int experts, int k,
                                   int64_t* chosen, void* weights) {
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  constexpr int kPerLane = kMaxRouteExperts / 32;
  const int lane = threadIdx.x % 32;
  const int64_t token = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (token >= tokens) return;  // the whole warp
  float value[kPerLane];
  bool taken[kPerLane];
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const int e = s * 32 + lane;
    value[s] = e < experts ? to_float(logits, token * experts + e, element) : -INFINITY;
    taken[s] = e >= experts;
  }
  float top[kMaxRouteK];
  for (int r = 0; r < k; ++r) {
    float best = -INFINITY;
    int index = INT_MAX;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s)
      if (!taken[s] && (index == INT_MAX || ranks_before(value[s], s * 32 + lane, best, index)))
        best = value[s], index = s * 32 + lane;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, best, offset);
      const int other_index = __shfl_xor_sync(0xFFFFFFFFu, index, offset);
      if (other_index != INT_MAX && (index == INT_MAX || ranks_before(other, other_index, best, index)))
        best = other, index = other_index;
    }
#pragma unroll
    for (int s = 0; s < kPerLane; ++s)
      if (s * 32 + lane == index) taken[s] = true;
    top[r] = best;
    if (lane == 0) chosen[token * k + r] = index;
  }
  if (lane != 0) return;
  float sum = 0.0f;
  for (int r = 0; r < k; ++r) sum += expf(top[r] - top[0]);  // top[0] is the largest
  for (int r = 0; r < k; ++r) store_as(weights, token * k + r, expf(top[r] - top[0]) / sum, element);
}

int elementwise_blocks(int64_t count) {
  return static_cast<int>(min(static_cast<int64_t>(4096), (count + 255) / 256));
}

}  // namespace

bool launch_expert_gemv(const ExpertGemvArgs& args, cudaStream_t stream) {
  const bool ordered = args.order && args.offsets && args.bf16_products && args.experts_count <= kMaxRouteExperts;
  if (args.assignments <= 0 || (args.assignments > kMaxExpertAssignments && !ordered) || args.cols % 32 != 0 ||
      args.rows <= 0 || args.experts_count <= 0 || args.x_divisor <= 0 ||
      (args.ordered_tile != kOrderedTile && args.ordered_tile != kWideOrderedTile) ||
      static_cast<int64_t>(args.experts_count) * args.rows * (args.cols / 32) > INT_MAX - 64)
    return false;
  const bool epilogue = args.activated || args.summed;
  if (epilogue && (!args.bf16_products || (args.activated && args.summed)))
    return false;
  if (args.activated && args.rows % 2 != 0) return false;
  // The summed epilogue's blocks (one an assignment) meet in one cluster, on a GPU and in code that have clusters.
  if (args.summed && (args.assignments > kMaxRouteK || args.assignments > args.experts_count || !args.weights ||
                      args.order || current_gpu().major < 9 || !summed_epilogue_built()))
    return false;
  if (!epilogue && !args.out) return false;
  if (args.bf16_products) {  // an order comes only with bfloat16 products
    if (args.x_element != Element::bf16) return false;
    launch_expert_mma(args, stream);
    return cudaGetLastError() == cudaSuccess;
  }
  launch_expert_gemv_cuda_cores(args, stream);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_mxfp4_decode(const uint8_t* codes, const uint8_t* scales, void* out, Element element, int64_t blocks,
                         cudaStream_t stream) {
  if (blocks <= 0) return blocks == 0;
  const int grid = static_cast<int>(min(static_cast<int64_t>(65536), (blocks + 255) / 256));
  const auto* code_blocks = reinterpret_cast<const uint4*>(codes);
  if (element == Element::bf16)
    mxfp4_decode_kernel<<<grid, 256, 0, stream>>>(code_blocks, scales, static_cast<__nv_bfloat16*>(out), blocks);
  else if (element == Element::f32)
    mxfp4_decode_kernel<<<grid, 256, 0, stream>>>(code_blocks, scales, static_cast<float*>(out), blocks);
  else
    return false;
  return cudaGetLastError() == cudaSuccess;
}

bool launch_route_top_k(const void* logits, Element element, int64_t tokens, int experts, int k, int64_t* chosen,
                        void* weights, cudaStream_t stream) {
  if (tokens <= 0 || experts <= 0 || experts > kMaxRouteExperts || k <= 0 || k > kMaxRouteK || k > experts)
    return false;
  constexpr int kWarpsPerBlock = 4;
  const int64_t blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch(route_top_k_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * 32), 0, stream, logits, element,
         tokens, experts, k, chosen, weights);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_clamped_swiglu(const float* gate_up, void* out, Element out_element, int64_t rows, int width, float limit,
                           float alpha, cudaStream_t stream) {
  const int64_t count = rows * width;
  if (count <= 0) return count == 0;
  launch(clamped_swiglu_kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, gate_up, out, out_element, count,
         width, limit, alpha);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_weighted_expert_sum(const float* experts_out, const void* weights, Element weights_element,
                                const void* residual, void* out, Element out_element, int64_t tokens, int k, int width,
                                cudaStream_t stream) {
  const int64_t count = tokens * width;
  if (count <= 0 || k <= 0) return count == 0;
  const auto kernel = k <= kMaxRouteK ? weighted_expert_sum_kernel<kMaxRouteK> : weighted_expert_sum_kernel<0>;
  launch(kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, experts_out, weights, weights_element,
         residual, out, out_element, count, k, width);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
