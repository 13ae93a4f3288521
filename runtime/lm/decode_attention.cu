// Split attention for one query token per row. Kernel 1: block (b * H + h, split) walks its chunk of cache slots,
// one warp per slot at a time, each lane holding head_dim / 32 of the query, and keeps a running maximum, sum and
// weighted value (float32); its four warps are merged through shared memory and written to the workspace. Kernel 2
// merges the splits of each (b, h). Chunks past the step's slot end at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "lm/decode_attention_kernels.h"

namespace crucible::lm::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

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
  const int bh = blockIdx.x, split = blockIdx.y;
  const int b = bh / a.heads, h = bh % a.heads;
  const int kvh = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int D = a.head_dim, per_lane = (D + 31) / 32;
  const int64_t slot = *a.slot;
  const int begin = split * a.chunk;
  const int end = min(static_cast<int64_t>(begin + a.chunk), min(slot + 1, static_cast<int64_t>(a.capacity)));

  const T* q = static_cast<const T*>(a.q) + b * a.q_row_stride + h * a.q_head_stride;
  float qv[kMaxPerLane], acc[kMaxPerLane];
  for (int i = 0; i < per_lane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? to_float(q[d]) * a.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t base = (static_cast<int64_t>(b) * a.kv_heads + kvh) * a.capacity;
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  for (int s = begin + warp; s < end; s += kWarps) {
    if (s != slot && !a.key_valid[static_cast<int64_t>(b) * a.capacity + s]) continue;
    const T* ks = k + (base + s) * D;
    float dot = 0.0f;
    for (int i = 0; i < per_lane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) dot += qv[i] * to_float(ks[d]);
    }
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float m_new = fmaxf(m, dot);
    const float old = expf(m - m_new), p = expf(dot - m_new);
    const T* vs = v + (base + s) * D;
    for (int i = 0; i < per_lane; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * old + (d < D ? p * to_float(vs[d]) : 0.0f);
    }
    l = l * old + p;
    m = m_new;
  }

  // Merge the warps: each writes its state, warp 0 combines.
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][kMaxPerLane * 32];
  if (lane == 0) sm[warp] = m, sl[warp] = l;
  for (int i = 0; i < per_lane; ++i) sacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f;
  float out[kMaxPerLane];
  for (int i = 0; i < per_lane; ++i) out[i] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    const float f = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
    L += sl[w] * f;
    for (int i = 0; i < per_lane; ++i) out[i] += sacc[w][lane + 32 * i] * f;
  }
  const int splits = gridDim.y;
  float* p = a.partial + (static_cast<int64_t>(bh) * splits + split) * (D + 2);
  for (int i = 0; i < per_lane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) p[d] = out[i];
  }
  if (lane == 0) p[D] = M, p[D + 1] = L;
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
  const dim3 grid(a.batch * a.heads, decode_attention_splits(a));
  split_kernel<T><<<grid, kWarps * 32, 0, stream>>>(a);
  combine_kernel<T><<<a.batch * a.heads, a.head_dim < 128 ? 64 : 128, 0, stream>>>(a, decode_attention_splits(a));
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace

bool launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim > 32 * kMaxPerLane || a.heads % a.kv_heads != 0 || a.chunk <= 0) return false;
  switch (a.element) {
    case Element::f32: return launch<float>(a, stream);
    case Element::bf16: return launch<__nv_bfloat16>(a, stream);
    case Element::f16: return launch<__half>(a, stream);
  }
  return false;
}

}  // namespace crucible::lm::kernels
