// A decode step's small kernels: the rotation into the caches (Qwen3's q/k norms folded in), silu(gate) * up, and the
// split attention with its combine (launches and shapes in decode_kernels_launch.h; the one-row linear kernel is in
// one_row_linear.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

// x * rstd * weight over one head, one element a thread, in float32 rounded once (LibTorch's fused rms_norm rounds so);
// `partner` is the element rotate_half pairs with this one, normalised alike. Every thread of the block takes part.
template <typename T>
__device__ void normalise_head(T& x, T& partner, const T* weight, int d, int partner_d, int D, float eps) {
  __shared__ float warp_squares[32];
  const float xf = widen(x), pf = widen(partner);
  float squares = xf * xf;
  for (int o = 16; o > 0; o /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, o);
  if (d % 32 == 0) warp_squares[d / 32] = squares;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < D / 32; ++w) total += warp_squares[w];
  const float rstd = rsqrtf(total / static_cast<float>(D) + eps);
  x = narrow<T>(xf * rstd * widen(weight[d]));
  partner = narrow<T>(pf * rstd * widen(weight[partner_d]));
}

// One block per (row, head) of the H + 2 Hkv heads, one thread per element of the head.
template <typename T>
__global__ void rotate_into_cache_kernel(RotateArgs a) {
  wait_for_earlier_kernels();
  let_later_kernels_start();
  const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x, D = a.head_dim, half = D / 2;
  const T* row = static_cast<const T*>(a.qkv) + b * a.qkv_row_stride;
  const int64_t slot = *a.slot;
  if (slot < 0 || slot >= a.capacity) __trap();
  if (h >= a.heads + a.kv_heads) {  // a value head: copied into the cache as it is
    const int vh = h - a.heads - a.kv_heads;
    static_cast<T*>(a.v_cache)[b * a.v_strides[0] + vh * a.v_strides[1] + slot * a.v_strides[2] + d] = row[h * D + d];
    return;
  }
  const T *cos, *sin;
  rotary_rows_of(a.rotary, b, D, cos, sin);
  const int partner_d = d < half ? d + half : d - half;
  T x = row[h * D + d];
  T swapped = row[h * D + partner_d];
  if (a.q_norm != nullptr)
    normalise_head(x, swapped, static_cast<const T*>(h < a.heads ? a.q_norm : a.k_norm), d, partner_d, D, a.eps);
  const T value = rotated(x, swapped, cos[d], sin[d]);
  if (h < a.heads) {
    static_cast<T*>(a.q)[(static_cast<int64_t>(b) * a.heads + h) * D + d] = value;
  } else {
    const int kh = h - a.heads;
    static_cast<T*>(a.k_cache)[b * a.k_strides[0] + kh * a.k_strides[1] + slot * a.k_strides[2] + d] = value;
  }
}

template <typename T>
__global__ void silu_times_up_kernel(SiluArgs a) {
  wait_for_earlier_kernels();
  let_later_kernels_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.width) return;
  const int64_t r = i / a.width, j = i % a.width;
  const T* in = static_cast<const T*>(a.gate_up) + r * 2 * a.width;
  const float g = widen(in[j]);
  const T silu = narrow<T>(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));  // as LibTorch's silu: x / (1 + exp(-x))
  static_cast<T*>(a.out)[i] = mul(silu, in[a.width + j]);
}

// Decode attention, split over cache slots ("flash decoding"): one query token per row, its G = H / Hkv query heads
// sharing a key head. Block (row and key head, split) takes attention_chunk() slots (R rounds) up to the step's own.
// Each lane first issues all its cache loads (L lanes share a slot, each holding 16 bytes of the head, so a warp reads
// 32 / L whole cache rows at once; they need neither the query nor which slots are valid; the earlier slots' before
// the wait for the kernel before), then come three phases: scores, the split's maximum and weights per query head,
// and weighted values.
// It writes one partial (weighted sum, maximum, sum of weights) per (row, query head, split); the combine kernel merges
// the splits. Splits past the step's slot, or wholly before its window, write nothing; the combine reads none of them.
constexpr int kAttendWarps = kAttentionThreads / 32;
constexpr int kAttendMaxGroup = 8;

// The first slot a step at `slot` attends: past the window's start, or 0. Splits wholly before it hold no slot the
// softmax weighs, so the split kernel skips them and the combine reads from the first one that does.
__device__ __forceinline__ int64_t first_windowed(const AttendArgs& a, int64_t slot) {
  return a.window > 0 && slot >= a.window ? slot - a.window + 1 : 0;
}

template <typename T, int L, int R>
__global__ void attend_split_kernel(AttendArgs a) {
  constexpr int V = 16 / sizeof(T);  // head elements per lane
  constexpr int kPerWarp = 32 / L;   // slots a warp reads at once
  constexpr int kGroups = kAttentionThreads / L;
  const int b = blockIdx.x / a.kv_heads, kvh = blockIdx.x % a.kv_heads, split = blockIdx.y;
  constexpr int C = kGroups * R;
  const int G = a.heads / a.kv_heads, D = a.head_dim;
  const int64_t slot = *a.slot;
  if (slot < 0 || slot >= a.visible || a.visible > a.capacity || a.visible > static_cast<int64_t>(a.splits) * C) __trap();
  const int64_t begin = static_cast<int64_t>(split) * C;
  if (begin > slot || begin + C <= first_windowed(a, slot)) return;
  const int n = static_cast<int>(min(static_cast<int64_t>(C), slot + 1 - begin));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, part = lane % L;
  const int group = warp * kPerWarp + lane / L;

  const int64_t head = (static_cast<int64_t>(b) * a.kv_heads + kvh) * a.capacity + begin;
  const T* keys = static_cast<const T*>(a.k_cache) + head * D + part * V;
  const T* values = static_cast<const T*>(a.v_cache) + head * D + part * V;
  // Earlier steps wrote every slot but the step's own, whose key and value the kernel just before this one writes:
  // those loads are in flight before waiting for it, the own slot's after.
  uint4 raw_k[R], raw_v[R];
  const auto load = [&](bool own) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = r * kGroups + group;
      if (j < n && (begin + j == slot) == own) {
        raw_k[r] = *reinterpret_cast<const uint4*>(keys + static_cast<int64_t>(j) * D);
        raw_v[r] = *reinterpret_cast<const uint4*>(values + static_cast<int64_t>(j) * D);
      }
    }
  };
  load(false);
  wait_for_earlier_kernels();
  let_later_kernels_start();
  load(true);

  extern __shared__ float shared[];
  float* q = shared;                   // [G][D], scaled
  float* weight = q + G * D;           // [G][C]: scores, then weights
  float* sums = weight + G * C;        // [kAttendWarps][G][D]: each warp's weighted values
  float* top = sums + kAttendWarps * G * D;  // [G]
  float* total = top + G;                    // [G]
  bool* live = reinterpret_cast<bool*>(total + G);  // [C]
  const T* query = static_cast<const T*>(a.q) + b * a.q_row_stride + static_cast<int64_t>(kvh) * G * a.q_head_stride;
  for (int i = threadIdx.x; i < G * D; i += kAttentionThreads) q[i] = widen(query[(i / D) * a.q_head_stride + i % D]) * a.scale;
  const bool* valid = a.key_valid + static_cast<int64_t>(b) * a.capacity + begin;
  for (int j = threadIdx.x; j < n; j += kAttentionThreads)
    live[j] = (begin + j == slot || valid[j]) && (a.window == 0 || begin + j > slot - a.window);
  __syncthreads();

  // Scores. Every lane of a warp runs the same rounds, so the shuffles always see the whole warp.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int j = r * kGroups + group;
    const bool use = j < n && live[j];
    float k[V];
    if (use) {
      widen_all<T>(raw_k[r], k);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) k[i] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < kAttendMaxGroup; ++g) {
      if (g >= G) break;  // the same for the whole warp
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) dot = fmaf(q[g * D + part * V + i], k[i], dot);
#pragma unroll
      for (int o = L / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (part == 0 && j < n) weight[g * C + j] = use ? dot : -INFINITY;
    }
  }
  __syncthreads();

  // Each query head's maximum over the split, its weights and their sum: one warp per head.
  for (int g = warp; g < G; g += kAttendWarps) {
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, weight[g * C + j]);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = live[j] ? expf(weight[g * C + j] - m) : 0.0f;
      weight[g * C + j] = p;
      sum += p;
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) top[g] = m, total[g] = sum;
  }
  __syncthreads();

  // Weighted values: each lane sums its slice of the head over its slots, then the warp's groups add up.
  float acc[kAttendMaxGroup][V];
#pragma unroll
  for (int g = 0; g < kAttendMaxGroup; ++g)
#pragma unroll
    for (int i = 0; i < V; ++i) acc[g][i] = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int j = r * kGroups + group;
    if (j >= n || !live[j]) continue;  // an invalid slot's values are never used (they may be anything)
    float v[V];
    widen_all<T>(raw_v[r], v);
#pragma unroll
    for (int g = 0; g < kAttendMaxGroup; ++g) {
      if (g >= G) break;
      const float p = weight[g * C + j];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[g][i] = fmaf(p, v[i], acc[g][i]);
    }
  }
#pragma unroll
  for (int g = 0; g < kAttendMaxGroup; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int i = 0; i < V; ++i) {
#pragma unroll
      for (int o = L; o < 32; o *= 2) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
      if (lane < L) sums[(warp * G + g) * D + part * V + i] = acc[g][i];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kAttentionThreads) {
    const int g = i / D, d = i % D;
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttendWarps; ++w) num += sums[(w * G + g) * D + d];
    float* out = a.partial + ((static_cast<int64_t>(b) * a.heads + kvh * G + g) * a.splits + split) * (D + 2);
    out[d] = num;
    if (d == 0) out[D] = top[g], out[D + 1] = total[g];
  }
}

// Block (row, query head): each split's weight exp(max - overall max) once, in parallel, then each thread one
// element of the head over the splits up to the step's slot. A split with no valid slot (padding) weighs nothing.
// The step's slot and the sink (written before the step, and a weight) are read before the wait; after it, the
// head's partials are copied into shared memory in a few rounds of independent loads where they fit (a step's
// usual few dozen splits), so the sums below read nothing from global memory in a chain. Same operations in the
// same order either way.
constexpr int kCombineThreads = 64;
constexpr int kCombineStagedFloats = 8 * 1024;  // 32 KB of staged partials, at most

inline bool combine_stages(const AttendArgs& a) {
  return static_cast<int64_t>(a.splits) * (a.head_dim + 2) <= kCombineStagedFloats;
}

template <typename T>
__global__ void attend_combine_kernel(AttendArgs a, bool staged) {
  const int D = a.head_dim;
  const int64_t slot = *a.slot;
  const int first = static_cast<int>(first_windowed(a, slot) / a.chunk);
  const int used = static_cast<int>(min(static_cast<int64_t>(a.splits), slot / a.chunk + 1)) - first;
  const float sink = a.sinks ? a.sinks[blockIdx.x % a.heads] : -INFINITY;  // block (row, query head)
  wait_for_earlier_kernels();
  let_later_kernels_start();
  extern __shared__ float shared[];  // scale [splits], then the staged partials [used, D + 2]
  float* scale = shared;
  __shared__ float reduced[32];
  const float* p = a.partial + (static_cast<int64_t>(blockIdx.x) * a.splits + first) * (D + 2);
  if (staged) {
    constexpr int kInFlight = 16;
    float* copy = shared + a.splits;
    const int n = used * (D + 2);
    for (int base = threadIdx.x; base < n; base += kInFlight * kCombineThreads) {
      float v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int i = base + u * kCombineThreads;
        v[u] = i < n ? __ldcg(p + i) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (base + u * kCombineThreads < n) copy[base + u * kCombineThreads] = v[u];
    }
    __syncthreads();
    p = copy;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float m = -INFINITY;
  for (int s = threadIdx.x; s < used; s += blockDim.x) m = fmaxf(m, p[s * (D + 2) + D]);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) reduced[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, reduced[w]);
  m = fmaxf(m, sink);
  float den = a.sinks && threadIdx.x == 0 ? expf(sink - m) : 0.0f;  // the sink's share of the softmax: no value
  for (int s = threadIdx.x; s < used; s += blockDim.x) {
    const float ms = p[s * (D + 2) + D];
    const float f = ms == -INFINITY ? 0.0f : expf(ms - m);
    scale[s] = f;
    den += f * p[s * (D + 2) + D + 1];
  }
  for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xffffffffu, den, o);
  __syncthreads();  // every warp has read `reduced`
  if (lane == 0) reduced[warp] = den;
  __syncthreads();
  den = 0.0f;
  for (int w = 0; w < warps; ++w) den += reduced[w];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.0f;
#pragma unroll 8
    for (int s = 0; s < used; ++s) num = fmaf(p[s * (D + 2) + d], scale[s], num);
    static_cast<T*>(a.out)[static_cast<int64_t>(blockIdx.x) * D + d] = narrow<T>(num / den);
  }
}

template <typename T, int L>
bool attend_as(const AttendArgs& a, cudaStream_t stream) {
  const int G = a.heads / a.kv_heads, D = a.head_dim;
  const dim3 grid(a.batch * a.kv_heads, a.splits);
  const int C = attention_chunk(a.head_dim, a.element, a.rounds);
  const size_t floats = G * D + G * C + kAttendWarps * G * D + 2 * G;
  const size_t shared = sizeof(float) * floats + C;
  const auto split = a.rounds == kAttentionFewRounds ? attend_split_kernel<T, L, kAttentionFewRounds>
                                                     : attend_split_kernel<T, L, kAttentionRounds>;
  const bool staged = combine_stages(a);
  const size_t combine_shared = sizeof(float) * a.splits * (staged ? 1 + a.head_dim + 2 : 1);
  return launch(split, grid, dim3(kAttentionThreads), shared, stream, a) &&
         launch(attend_combine_kernel<T>, dim3(a.batch * a.heads), dim3(kCombineThreads), combine_shared, stream, a,
                staged);
}

template <typename T>
bool attend_with_lanes(const AttendArgs& a, cudaStream_t stream) {
  switch (attend_lanes(a.head_dim, a.element)) {
    case 1: return attend_as<T, 1>(a, stream);
    case 2: return attend_as<T, 2>(a, stream);
    case 4: return attend_as<T, 4>(a, stream);
    case 8: return attend_as<T, 8>(a, stream);
    case 16: return attend_as<T, 16>(a, stream);
    case 32: return attend_as<T, 32>(a, stream);
  }
  return false;
}

template <typename T>
bool rotate_as(const RotateArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch, a.heads + 2 * a.kv_heads);
  return launch(rotate_into_cache_kernel<T>, grid, dim3(a.head_dim), 0, stream, a);
}

template <typename T>
bool silu_as(const SiluArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t n = a.rows * a.width;
  return launch(silu_times_up_kernel<T>, dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                stream, a);
}

}  // namespace

void allow_early_launch(bool on) { early_launch_on().store(on); }

bool attention_takes(int heads, int kv_heads, int head_dim, Element element) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || heads / kv_heads > kAttendMaxGroup) return false;
  const int lanes = attend_lanes(head_dim, element);
  return lanes > 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
}

bool launch_rotate_into_cache(const RotateArgs& a, cudaStream_t stream) {
  if (!rotation_takes(a.head_dim, a.q_norm != nullptr) || (a.q_norm == nullptr) != (a.k_norm == nullptr) ||
      a.batch <= 0 || a.heads + 2 * a.kv_heads > 65535)
    return false;
  return by_element(a.element, [&](auto zero) { return rotate_as<decltype(zero)>(a, stream); });
}

bool launch_silu_times_up(const SiluArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.width <= 0) return a.rows == 0 || a.width == 0;
  return by_element(a.element, [&](auto zero) { return silu_as<decltype(zero)>(a, stream); });
}

bool launch_attend(const AttendArgs& a, cudaStream_t stream) {
  if (!attention_takes(a.heads, a.kv_heads, a.head_dim, a.element) || a.batch <= 0 ||
      (a.rounds != kAttentionRounds && a.rounds != kAttentionFewRounds) ||
      a.chunk != attention_chunk(a.head_dim, a.element, a.rounds) || a.splits <= 0 || a.splits > kAttentionMaxSplits)
    return false;
  return by_element(a.element, [&](auto zero) { return attend_with_lanes<decltype(zero)>(a, stream); });
}

}  // namespace crucible::lm::kernels
