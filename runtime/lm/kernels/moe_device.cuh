#pragma once
// What the experts' kernels share (expert_gemv_cuda_cores.cu, expert_mma.cu, moe_kernels.cu): MXFP4 codes read as
// float32 values or as bfloat16 pairs, and the assignments routed to a block's expert found on the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/moe_kernels_launch.h"
#include "lm/kernels/mxfp4_pairs.h"

namespace crucible::lm::kernels {

// The experts' products, each launch checked by launch_expert_gemv: float32 products on CUDA cores (any input element
// type, up to kMaxExpertAssignments), bfloat16 products on tensor cores (any number, with an order past that).
void launch_expert_gemv_cuda_cores(const ExpertGemvArgs& args, cudaStream_t stream);
void launch_expert_mma(const ExpertGemvArgs& args, cudaStream_t stream);
// One token's first projection on tensor cores (every assignment reading x's row 0), a warp per 16 rows of an
// assignment (expert_warps.cu): launch_expert_mma takes it there.
bool expert_warps_take(const ExpertGemvArgs& args);
void launch_expert_warps(const ExpertGemvArgs& args, cudaStream_t stream);

constexpr int kWarps = 4;
constexpr int kMxBlock = 32;

__device__ __forceinline__ float to_float(const void* p, int64_t i, Element e) {
  switch (e) {
    case Element::bf16: return widen(static_cast<const __nv_bfloat16*>(p)[i]);
    case Element::f16: return widen(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

#if defined(__CUDACC_FTZ__)
#error "decode8 builds 0.5 as a float32 subnormal: compile without flushing subnormals to zero (-ftz=false)"
#endif

// The 8 values of one paired word of codes (mxfp4_pairs.h), in the stored order of its codes: each placed bfloat16
// is the high half of a float32 of 2^-126 times the code's value (0.5 a subnormal); the multiplication by 2^126 is
// exact.
__device__ __forceinline__ void decode8(unsigned word, float (&w)[8]) {
  uint32_t pair[4];
  placed_pairs(word, pair);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[2 * i] = __uint_as_float(pair[i] << 16) * 0x1p126f;
    w[2 * i + 1] = __uint_as_float(pair[i] & 0xFFFF0000u) * 0x1p126f;
  }
}

__device__ __forceinline__ unsigned word_of(const uint4& q, int g) { return g == 0 ? q.x : g == 1 ? q.y : g == 2 ? q.z : q.w; }

// 2^(scale - 127) built from its bits: exact (scale 0 is 2^-127, a subnormal; 255, NaN in the MX format, is refused
// at load).
__device__ __forceinline__ float scale_of(unsigned scale) {
  return scale == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(scale) << 23);
}

__device__ __forceinline__ void store_as(void* p, int64_t i, float v, Element e) {
  switch (e) {
    case Element::bf16: static_cast<__nv_bfloat16*>(p)[i] = narrow<__nv_bfloat16>(v); break;
    case Element::f16: static_cast<__half*>(p)[i] = narrow<__half>(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// gpt-oss's clamped SwiGLU of a gate and its linear value, as LibTorch's float32 operators compute it (moe.cpp's
// clamped_swiglu). LibTorch's clamp keeps a NaN, where fminf and fmaxf would drop it.
__device__ __forceinline__ float clamped_swiglu_of(float gate_in, float linear_in, float limit, float alpha) {
  const float gate = isnan(gate_in) ? gate_in : fminf(gate_in, limit);
  const float linear = isnan(linear_in) ? linear_in : fminf(fmaxf(linear_in, -limit), limit);
  const float activated = gate * (1.0f / (1.0f + expf(-(gate * alpha))));
  return (linear + 1.0f) * activated;
}

// A token's k experts' outputs times their routing weights, summed in the order j = 0, 1, ...
template <int N>
__device__ __forceinline__ float weighted_sum_of(const float (&product)[N], const float (&weight)[N], int k) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (j < k) sum += product[j] * weight[j];
  return sum;
}

// LibTorch's residual + sum in element type e: the sum rounded to e, the addition in float32 (rounded again when
// stored).
__device__ __forceinline__ float plus_residual(float sum, float residual, Element e) {
  switch (e) {
    case Element::bf16: return widen(narrow<__nv_bfloat16>(sum)) + residual;
    case Element::f16: return widen(narrow<__half>(sum)) + residual;
    default: return sum + residual;
  }
}

// The assignments routed to a block's expert, found on the device.
struct Routed {
  int mine[kMaxExpertAssignments];  // assignment indices, in no particular order
  int count;
  int earlier;  // by assignment: an earlier assignment chose the same expert, and its block does the work
  int expert;   // ordered: the expert of the block's tile
  int first;    // ordered: where the tile starts in the order
};

static_assert(kMaxRouteExperts <= kMaxExpertAssignments, "an ordered block counts its experts' tiles in Routed::mine");

// With the assignments ordered by expert (many of them: prefills), block x takes tile x of `per_tile` assignments,
// the tiles numbered expert by expert (ceil(count / per_tile) each); blocks past the last tile have nothing to do.
// The experts' tile counts are read in parallel into `mine` (up to kMaxRouteExperts experts), which then holds the
// tile's assignments. Returns how many assignments the block has.
__device__ __forceinline__ int ordered_assignments(const ExpertGemvArgs& a, int per_tile, int& expert,
                                                   Routed& routed) {
  for (int e = threadIdx.x; e < a.experts_count; e += blockDim.x)
    routed.mine[e] = (a.offsets[e + 1] - a.offsets[e] + per_tile - 1) / per_tile;
  __syncthreads();
  if (threadIdx.x == 0) {
    int tile = static_cast<int>(blockIdx.x), e = 0;
    while (e < a.experts_count && tile >= routed.mine[e]) tile -= routed.mine[e++];
    routed.expert = e, routed.count = 0, routed.first = 0;
    if (e < a.experts_count) {
      routed.first = a.offsets[e] + tile * per_tile;
      routed.count = min(per_tile, a.offsets[e + 1] - routed.first);
    }
  }
  __syncthreads();
  expert = routed.expert;
  const int n = routed.count, first = routed.first;
  for (int i = threadIdx.x; i < n; i += blockDim.x) routed.mine[i] = a.order[first + i];
  __syncthreads();
  return n;
}

// Which expert a block works for, and its assignments. By expert when there are more assignments than experts
// (every expert likely chosen); by assignment otherwise (a decode step of one token chooses 4 of 32 or 128), the
// first assignment of each expert standing for it, so no block is launched for an expert nobody chose. Returns
// how many assignments the block has (0: nothing to do).
__device__ __forceinline__ int gather_assignments(const ExpertGemvArgs& a, bool by_assignment, int& expert,
                                                  Routed& routed) {
  expert = by_assignment ? static_cast<int>(a.experts[blockIdx.x]) : static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) routed.count = 0, routed.earlier = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < a.assignments; i += blockDim.x)
    if (a.experts[i] == expert) {
      if (by_assignment && i < static_cast<int>(blockIdx.x)) routed.earlier = 1;
      routed.mine[atomicAdd(&routed.count, 1)] = i;
    }
  __syncthreads();
  const bool known = expert >= 0 && expert < a.experts_count;  // a router's top-k always is
  return routed.earlier || !known ? 0 : routed.count;
}

// What turns placed pairs (values times 2^-126) into values times a block's scale 2^(s - 127), as bfloat16 pairs: one
// multiplication by 2^(s - 1) where that is a bfloat16 (s <= 128, as every scale of real weights is), else by 2^126
// (exact) and then by 2^(s - 127). Either way the product is exact wherever it is a bfloat16 (all but the largest
// values at the largest scales), so both give the same bits.
struct PairScale {
  uint32_t first, second;  // second: 1.0 where one multiplication does
};

__device__ __forceinline__ uint32_t bf16_pair(uint32_t bits) { return bits | bits << 16; }

// Whether 2^(s - 1) is past bfloat16's range, so that a scale needs the two multiplications.
__device__ __forceinline__ bool takes_two_steps(unsigned scale) { return scale > 128; }

__device__ __forceinline__ PairScale one_step_scale(unsigned scale) {
  return {bf16_pair((scale + 126) << 7), bf16_pair(0x3F80u)};
}

__device__ __forceinline__ PairScale pair_scale_of(unsigned scale) {
  if (!takes_two_steps(scale)) return one_step_scale(scale);
  return {kPlacedToValues, bf16_pair(scale << 7)};
}

__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t bits) {
  return *reinterpret_cast<const __nv_bfloat162*>(&bits);
}

// f(std::true_type{}) where a scale needs two multiplications, else f(std::false_type{}): decode_pairs' kTwoSteps
// chosen at run time, each branch compiled with its own.
template <typename F>
__device__ __forceinline__ void with_two_steps(bool two_steps, F&& f) {
  if (two_steps)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// The 8 codes of a paired word as 4 bfloat16 pairs (codes 2i and 2i + 1, in pair i), exact: placed (mxfp4_pairs.h),
// then scaled. kTwoSteps where any lane of the warp has a scale above 128.
template <bool kTwoSteps>
__device__ __forceinline__ void decode_pairs(uint32_t word, const PairScale& scale, uint32_t (&pair)[4]) {
  uint32_t placed[4];
  placed_pairs(word, placed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 value = __hmul2_rn(as_bf162(placed[i]), as_bf162(scale.first));
    if (kTwoSteps) value = __hmul2_rn(value, as_bf162(scale.second));
    pair[i] = *reinterpret_cast<const uint32_t*>(&value);
  }
}

}  // namespace crucible::lm::kernels
