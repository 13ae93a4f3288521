// Split attention for one query token per row. Kernel 1: block (b * Hkv + key head, split) takes its chunk of cache
// slots for the query heads that share the key head: each thread scores a (head, slot) pair, each warp turns a head's
// scores into weights (float32), and each thread sums one (head, dimension) of the weighted values; the block's
// maximum, sum and weighted values go to the workspace. Kernel 2 merges the splits of each (b, h). Chunks past the
// step's slot end at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "lm/decode_attention_kernels.h"

namespace crucible::lm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxChunk = 64;
constexpr int kMaxHeadsTimesDim = 2048;  // as decode_attention_fits() allows
constexpr int kMaxGroup = 16;

template <typename T>
__device__ inline float to_float(T x);
template <>
__device__ inline float to_float<float>(float x) { return x; }
template <>
__device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ inline float to_float<__half>(__half x) { return __half2float(x); }

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half(x); }

template <typename T>
__global__ void split_kernel(DecodeAttentionArgs a) {
  const int group = a.heads / a.kv_heads;
  const int bk = blockIdx.x, split = blockIdx.y;
  const int b = bk / a.kv_heads, kvh = bk % a.kv_heads;
  const int D = a.head_dim;
  const int64_t slot = *a.slot;
  const int begin = split * a.chunk;
  if (begin > slot) return;  // the combine reads only splits up to the slot's
  const int n = static_cast<int>(min(static_cast<int64_t>(a.chunk), min(slot + 1, static_cast<int64_t>(a.capacity)) - begin));

  __shared__ float q[kMaxHeadsTimesDim];
  __shared__ float score[kMaxGroup][kMaxChunk];
  __shared__ float row_max[kMaxGroup], row_sum[kMaxGroup];
  const T* query = static_cast<const T*>(a.q) + b * a.q_row_stride + static_cast<int64_t>(kvh) * group * a.q_head_stride;
  for (int i = threadIdx.x; i < group * D; i += blockDim.x)
    q[i] = to_float(query[(i / D) * a.q_head_stride + i % D]) * a.scale;
  __syncthreads();

  const int64_t base = (static_cast<int64_t>(b) * a.kv_heads + kvh) * a.capacity + begin;
  const T* k = static_cast<const T*>(a.k) + base * D;
  const T* v = static_cast<const T*>(a.v) + base * D;
  const bool* valid = a.key_valid + static_cast<int64_t>(b) * a.capacity + begin;
  for (int i = threadIdx.x; i < group * a.chunk; i += blockDim.x) {
    const int g = i / a.chunk, j = i % a.chunk;
    float dot = -INFINITY;
    if (j < n && (begin + j == slot || valid[j])) {
      dot = 0.0f;
      const T* kj = k + static_cast<int64_t>(j) * D;
      const float* qg = q + g * D;
      for (int d = 0; d < D; ++d) dot += qg[d] * to_float(kj[d]);
    }
    score[g][j] = dot;
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < group; g += kThreads / 32) {
    float m = -INFINITY;
    for (int j = lane; j < a.chunk; j += 32) m = fmaxf(m, score[g][j]);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int j = lane; j < a.chunk; j += 32) {
      const float p = m == -INFINITY ? 0.0f : expf(score[g][j] - m);
      score[g][j] = p;
      l += p;
    }
    for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) row_max[g] = m, row_sum[g] = l;
  }
  __syncthreads();

  const int splits = gridDim.y;
  for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc += score[g][j] * to_float(v[static_cast<int64_t>(j) * D + d]);
    float* p = a.partial + ((static_cast<int64_t>(b) * a.heads + kvh * group + g) * splits + split) * (D + 2);
    p[d] = acc;
    if (d == 0) p[D] = row_max[g], p[D + 1] = row_sum[g];
  }
}

template <typename T>
__global__ void combine_kernel(DecodeAttentionArgs a, int splits) {
  const int bh = blockIdx.x, D = a.head_dim;
  const float* p = a.partial + static_cast<int64_t>(bh) * splits * (D + 2);
  const int64_t slot = *a.slot;
  const int used = static_cast<int>(min(static_cast<int64_t>(splits), slot / a.chunk + 1));
  float M = -INFINITY;
  for (int s = 0; s < used; ++s) M = fmaxf(M, p[s * (D + 2) + D]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < used; ++s) {
      const float* q = p + s * (D + 2);
      const float f = q[D] == -INFINITY ? 0.0f : expf(q[D] - M);
      num += q[d] * f;
      den += q[D + 1] * f;
    }
    static_cast<T*>(a.out)[static_cast<int64_t>(bh) * D + d] = from_float<T>(num / den);
  }
}

template <typename T>
bool launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch * a.kv_heads, decode_attention_splits(a));
  split_kernel<T><<<grid, kThreads, 0, stream>>>(a);
  combine_kernel<T><<<a.batch * a.heads, a.head_dim < 128 ? 64 : 128, 0, stream>>>(a, decode_attention_splits(a));
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace

bool launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (!decode_attention_fits(a.heads, a.kv_heads, a.head_dim) || a.chunk <= 0 || a.chunk > kMaxChunk) return false;
  switch (a.element) {
    case Element::f32: return launch<float>(a, stream);
    case Element::bf16: return launch<__nv_bfloat16>(a, stream);
    case Element::f16: return launch<__half>(a, stream);
  }
  return false;
}

}  // namespace crucible::lm::kernels
