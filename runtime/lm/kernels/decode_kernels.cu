#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/async_copy.cuh"
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
  const int64_t position = a.positions[b * a.position_stride];
  if (position < 0 || position >= a.table_rows) __trap();
  const int partner_d = d < half ? d + half : d - half;
  T x = row[h * D + d];
  T swapped = row[h * D + partner_d];
  if (a.q_norm != nullptr)
    normalise_head(x, swapped, static_cast<const T*>(h < a.heads ? a.q_norm : a.k_norm), d, partner_d, D, a.eps);
  const T c = static_cast<const T*>(a.cos)[position * D + d];
  const T s = static_cast<const T*>(a.signed_sin)[position * D + d];
  const T rotated = add(mul(x, c), mul(swapped, s));  // x * cos + rotate_half(x) * sin
  if (h < a.heads) {
    static_cast<T*>(a.q)[(static_cast<int64_t>(b) * a.heads + h) * D + d] = rotated;
  } else {
    const int kh = h - a.heads;
    static_cast<T*>(a.k_cache)[b * a.k_strides[0] + kh * a.k_strides[1] + slot * a.k_strides[2] + d] = rotated;
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

// Linear layers of a one-row decode step: out[n] = sum_k x[k] W[n, k] in float32, plus the bias and then the
// residual, each rounded where LibTorch's linear and add round them. A batch-1 decode step's GEMMs are GEMVs, which
// cuBLAS runs at 0.5-2 TB/s on these shapes, and each is one of a long chain of small kernels whose launches and
// first loads cost more than their bytes. So the kernel folds in its neighbours: the RMS norm before it (each block
// normalises x into shared memory) and the MLP's activation after it (a warp sums a gate row and its up row and
// writes silu(gate) * up). Its first weight loads are in flight before it waits for the kernel before it (weights are
// no earlier kernel's output). W warps share a row, each lane loading 16-byte slices of it, a round of up to
// kInFlight at once; long rows, and small projections, take several warps. Blocks stay (as many as the GPU holds) and
// take row after row, loading the next row while the last one's sums are reduced, so a block normalises its input
// once. With more than one row of x the x loads and conversions made it slower than cuBLAS (docs/benchmarks.md).
constexpr int kLinearWarps = 4;

template <typename T, int N>
__device__ uint4 narrow_all(const float (&in)[N]) {
  static_assert(N * sizeof(T) == 16, "16-byte slices");
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) e[i] = narrow<T>(in[i]);
  return raw;
}

// Where the kernel reads x from: each lane its own slices from L2 (not through the read-only cache, as the kernel
// before this one wrote x while this one was already running); a copy in shared memory, made once per block, where
// blocks take many rounds of outputs (the lm_head: every output would otherwise read x from L2 again); or x
// RMS-normalised into shared memory. Staging costs a block an L2 round trip and a barrier before its first sums, and
// where rows are long and few, as many L2 reads as the weights' own.
enum class Input { from_l2, copied, normed };

// Whether blocks take so many rounds of outputs that a copy of x pays: four rounds or more even with eight blocks on
// every SM.
inline bool copy_input_pays(int64_t outputs, int sms) {
  return sms > 0 && outputs >= static_cast<int64_t>(sms) * 8 * kLinearWarps * 4;
}

template <typename T>
__device__ void stage_copied(const LinearArgs& a, uint4* staged) {
  const int64_t slices = a.in_features * static_cast<int64_t>(sizeof(T)) / 16;
  const uint4* x = static_cast<const uint4*>(a.x);
  for (int64_t i = threadIdx.x; i < slices; i += blockDim.x) staged[i] = __ldcg(x + i);
  __syncthreads();
}

// A thread's first kAtOnce of `slices` 16-byte slices (threadIdx.x, then a block further each) loaded at once: through
// the read-only cache (kReadOnly: weights), or from L2 (what an earlier kernel wrote).
template <bool kReadOnly, int kAtOnce>
__device__ __forceinline__ void load_at_once(const uint4* from, int64_t slices, uint4 (&to)[kAtOnce]) {
#pragma unroll
  for (int u = 0; u < kAtOnce; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    if (i < slices) to[u] = kReadOnly ? __ldg(from + i) : __ldcg(from + i);
  }
}

// x RMS-normalised, in 16-byte slices, into `staged`: y = x * rstd * weight in float32 rounded once, as LibTorch's
// fused rms_norm rounds it. The first pass copies x into `staged` as it sums its squares, a thread's first
// kAtOnce slices loaded at once, and the second reads it back from there: loaded in each pass's loop, one after
// another, x cost a batch-1 step's normalising projections several L2 round trips before their first sums (3 a pass
// at gpt-oss's 2,880 elements and 128 threads). The sums run in the same order either way.
template <typename T, int kAtOnce>
__device__ void stage_normed(const LinearArgs& a, uint4* staged, float* reduced) {
  constexpr int V = 16 / sizeof(T);
  const int64_t slices = a.in_features / V;
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  const uint4* norm = reinterpret_cast<const uint4*>(a.norm_weight);
  const auto slice = [&](int u) { return threadIdx.x + static_cast<int64_t>(u) * blockDim.x; };
  float squares = 0.0f;
  const auto add_squares = [&](int64_t i, const uint4& raw) {
    float xf[V];
    widen_all<T>(raw, xf);
#pragma unroll
    for (int e = 0; e < V; ++e) squares = fmaf(xf[e], xf[e], squares);
    staged[i] = raw;
  };
  {
    uint4 raw[kAtOnce];
    load_at_once<false>(x, slices, raw);
#pragma unroll
    for (int u = 0; u < kAtOnce; ++u)
      if (slice(u) < slices) add_squares(slice(u), raw[u]);
  }
  for (int64_t i = slice(kAtOnce); i < slices; i += blockDim.x) add_squares(i, __ldcg(x + i));
  for (int o = 16; o > 0; o /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, o);
  if (threadIdx.x % 32 == 0) reduced[threadIdx.x / 32] = squares;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kLinearWarps; ++w) total += reduced[w];
  const float rstd = rsqrtf(total / static_cast<float>(a.in_features) + a.eps);
  const auto stage = [&](int64_t i, const uint4& weight) {  // each thread rewrites only the slices it copied
    float xf[V], nf[V];
    widen_all<T>(staged[i], xf);
    widen_all<T>(weight, nf);
#pragma unroll
    for (int e = 0; e < V; ++e) xf[e] = xf[e] * rstd * nf[e];
    staged[i] = narrow_all<T>(xf);
  };
  {
    uint4 weight[kAtOnce];
    load_at_once<true>(norm, slices, weight);
#pragma unroll
    for (int u = 0; u < kAtOnce; ++u)
      if (slice(u) < slices) stage(slice(u), weight[u]);
  }
  for (int64_t i = slice(kAtOnce); i < slices; i += blockDim.x) stage(i, __ldg(norm + i));
  __syncthreads();
}

std::atomic<bool>& rows_ahead_on() {
  static std::atomic<bool> on{on_unless_zero("CRUCIBLE_DECODE_GEMV_AHEAD")};
  return on;
}

// Loads a lane keeps in flight per row of the one-row linear kernel: gated outputs sum two rows, so half as many.
template <bool Gated>
constexpr int kLinearInFlight = Gated ? 4 : 8;

// Each lane's sums of its output's rows, summed over the warp and then over the W warps that share the output (through
// shared memory): every lane of those warps ends with the whole sums. Every warp of the block calls it.
template <int W, int kRows>
__device__ __forceinline__ void sum_row_warps(float (&acc)[kRows], float (&partial)[kLinearWarps][kRows], int warp,
                                              int lane) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int o = 16; o > 0; o /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if constexpr (W > 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
#pragma unroll
      for (int i = 0; i < W; ++i) acc[r] += partial[warp - warp % W + i][r];
    }
    __syncthreads();  // `partial` is written again next round
  }
}

// Output n from its float32 sums, rounded where LibTorch's linear (with its bias), silu, mul and add round.
template <typename T, bool Gated>
__device__ __forceinline__ void store_output(const LinearArgs& a, int64_t n, const float (&acc)[Gated ? 2 : 1]) {
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  if constexpr (Gated) {  // as LibTorch: the projection rounded, then silu rounded, then the product
    const T gate = narrow<T>(bias ? acc[0] + widen(bias[n]) : acc[0]);
    const T up = narrow<T>(bias ? acc[1] + widen(bias[n + a.out_features]) : acc[1]);
    const float g = widen(gate);
    out[n] = mul(narrow<T>(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g)))), up);
  } else {
    const T* residual = static_cast<const T*>(a.residual);
    if (bias && residual)  // LibTorch: linear with its bias, rounded, then the residual added
      out[n] = add(narrow<T>(acc[0] + widen(bias[n])), residual[n]);
    else if (bias)
      out[n] = narrow<T>(acc[0] + widen(bias[n]));
    else if (residual)  // addmm: the residual added before the one rounding
      out[n] = narrow<T>(acc[0] + widen(residual[n]));
    else
      out[n] = narrow<T>(acc[0]);
  }
}

// Shared memory a block of the one-row kernel holds its second round's rows in (kAhead), behind the staged x.
template <bool Gated, int W>
constexpr int64_t ahead_slices() {
  return static_cast<int64_t>(kLinearWarps / W) * kLinearInFlight<Gated> * 32 * W;
}

// kAhead (one-row outputs whose row a round of loads covers, blocks taking two rounds or more): the block's second
// round of rows is copied into shared memory before the wait as well, and the registers take the third round's at the
// end of the first, so that a block's rounds after the wait start with their rows landed or in flight instead of each
// waiting for its own loads (its rounds were the steps of q/k/v's chain after the norm: docs/benchmarks.md).
template <typename T, Input In, bool Gated, int W, bool kAhead>
__global__ void __launch_bounds__(kLinearWarps * 32) small_linear_kernel(LinearArgs a) {
  static_assert(!(kAhead && Gated), "rows ahead for one-row outputs");
  constexpr int V = 16 / sizeof(T);
  constexpr int kRowThreads = 32 * W;
  constexpr int kGroups = kLinearWarps / W;  // outputs a block takes at once
  constexpr int kRows = Gated ? 2 : 1;       // weight rows per output: a gate row and its up row
  constexpr int kInFlight = kLinearInFlight<Gated>;
  extern __shared__ uint4 staged[];
  __shared__ float reduced[kLinearWarps], partial[kLinearWarps][kRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = (warp % W) * 32 + lane;
  const int64_t outputs = a.out_features, slices = a.in_features / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kGroups;
  const uint4* weight = static_cast<const uint4*>(a.weight);
  uint4 raw[kRows][kInFlight];
  const auto load = [&](int64_t n, int64_t first) {
    if (n >= outputs) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (first + u * kRowThreads < slices) raw[r][u] = __ldg(weight + (n + r * outputs) * slices + first + u * kRowThreads);
  };
  // This thread's copies of its second-round row, read back by it alone (no barrier between). The host takes rows
  // ahead only where one round of loads covers a row: the loop below never loads within a row.
  uint4* ahead = staged + (In == Input::from_l2 ? 0 : slices) + (warp / W) * kInFlight * kRowThreads + t;
  int64_t n = static_cast<int64_t>(blockIdx.x) * kGroups + warp / W;
  load(n, t);
  if constexpr (kAhead) {
    if (n + stride < outputs)
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (t + u * kRowThreads < slices)
          copy16_behind(ahead + u * kRowThreads, weight + (n + stride) * slices + t + u * kRowThreads);
    commit_copies();
  }
  wait_for_earlier_kernels();
  if constexpr (In == Input::normed) {
    // Three slices a thread at once where the registers allow: a gated kernel holds twice the weights' loads.
    stage_normed<T, Gated ? 1 : 3>(a, staged, reduced);
    if (a.normed_out && blockIdx.x == 0)
      for (int64_t i = threadIdx.x; i < slices; i += blockDim.x) static_cast<uint4*>(a.normed_out)[i] = staged[i];
  }
  if constexpr (In == Input::copied) stage_copied<T>(a, staged);
  constexpr bool kStaged = In != Input::from_l2;
  const uint4* input = kStaged ? staged : static_cast<const uint4*>(a.x);
  let_later_kernels_start();
  // Every warp of a block runs every round (W warps' sums meet in shared memory).
  int round = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups; base < outputs; base += stride, n += stride, ++round) {
    const bool from_ahead = kAhead && round == 1;
    if (from_ahead) wait_copies<0>();
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int64_t first = t;;) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t c = first + u * kRowThreads;
        if (c >= slices) break;
        float xf[V];
        widen_all<T>(kStaged ? input[c] : __ldcg(input + c), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          uint4 w;  // a value, not a reference to either: `raw` stays in registers
          if (from_ahead)
            w = ahead[u * kRowThreads];
          else
            w = raw[r][u];
          float wf[V];
          widen_all<T>(w, wf);
#pragma unroll
          for (int i = 0; i < V; ++i) acc[r] = fmaf(wf[i], xf[i], acc[r]);
        }
      }
      first += kRowThreads * kInFlight;
      if (first >= slices) break;
      load(n, first);
    }
    // The next round's loads fly while this one's sums are reduced and written; with rows ahead, the first round's
    // end loads the third round's (the second's are in shared memory), and the second's loads nothing.
    if (!kAhead || round >= 2)
      load(n + stride, t);
    else if (round == 0)
      load(n + 2 * stride, t);
    sum_row_warps<W>(acc, partial, warp, lane);
    if (n >= outputs || t != 0) continue;
    store_output<T, Gated>(a, n, acc);
  }
}

// Warps per row: as few as leave each lane at most `per_lane` of a row's slices (the loads a lane has in flight), so
// a block has as many rows in flight as it can hold, and more where the outputs would give the GPU fewer than 16
// warps per SM (a few small projections' blocks were latency-bound: ncu, docs/benchmarks.md).
inline int linear_row_warps(int64_t slices, int64_t outputs, int sms, int per_lane) {
  int w = slices <= 32 * per_lane ? 1 : slices <= 64 * per_lane ? 2 : 4;
  while (w < kLinearWarps && outputs * w < static_cast<int64_t>(sms) * 16) w *= 2;
  return w;
}

// Blocks of the kernel the GPU holds at once with `shared` bytes each (by its registers and shared memory; asked once
// per kernel and size, as the GPUs of one process are alike), or -1 where the question fails.
template <typename T, Input In, bool Gated, int W, bool kAhead>
int64_t resident_blocks(size_t shared) {
  // Racing threads can at worst size one grid for the other's width: a grid of another size, never another result.
  static std::atomic<int64_t> asked_for{-1};  // the shared bytes `per_sm` was asked for
  static std::atomic<int> per_sm_asked{0};
  int per_sm = per_sm_asked.load(std::memory_order_relaxed);
  if (asked_for.load(std::memory_order_relaxed) != static_cast<int64_t>(shared)) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, small_linear_kernel<T, In, Gated, W, kAhead>,
                                                      kLinearWarps * 32, shared) != cudaSuccess)
      return -1;
    per_sm_asked.store(per_sm, std::memory_order_relaxed);
    asked_for.store(static_cast<int64_t>(shared), std::memory_order_relaxed);
  }
  return static_cast<int64_t>(current_gpu().sms) * (per_sm > 0 ? per_sm : 1);
}

template <typename T, Input In, bool Gated, int W, bool kAhead>
size_t linear_shared_bytes(const LinearArgs& a) {
  return (In != Input::from_l2 ? static_cast<size_t>(a.in_features) * sizeof(T) : 0) +
         (kAhead ? ahead_slices<Gated, W>() * sizeof(uint4) : 0);
}

// Whether rows ahead may serve: one-row outputs whose row one round of loads covers (so x is at most 16 KiB, and with
// the rows' 16 KiB a block stays within its default 48 KiB of shared memory), and not switched off.
template <typename T, Input In, bool Gated, int W>
bool rows_ahead_fit(const LinearArgs& a) {
  static_assert(!Gated && 2 * ahead_slices<Gated, W>() * sizeof(uint4) <= kLinearMaxNormedBytes, "48 KiB a block");
  const int64_t slices = a.in_features * static_cast<int64_t>(sizeof(T)) / 16;
  return In != Input::copied && rows_ahead_on().load(std::memory_order_relaxed) &&
         slices <= 32 * W * kLinearInFlight<Gated>;
}

// As many blocks as the outputs need, up to as many as the GPU holds at once. Rows ahead where blocks take two rounds
// or more with either kernel (the ahead kernel holds fewer blocks: it must not turn one round into two).
template <typename T, Input In, bool Gated, int W>
bool small_linear_with(const LinearArgs& a, cudaStream_t stream) {
  constexpr int kGroups = kLinearWarps / W;
  const int64_t wanted = (a.out_features + kGroups - 1) / kGroups;
  const size_t shared = linear_shared_bytes<T, In, Gated, W, false>(a);
  const int64_t resident = resident_blocks<T, In, Gated, W, false>(shared);
  if (resident < 0) return false;
  if constexpr (!Gated && In != Input::copied) {
    if (wanted > resident && rows_ahead_fit<T, In, Gated, W>(a)) {
      const size_t ahead_shared = linear_shared_bytes<T, In, Gated, W, true>(a);
      const int64_t ahead_resident = resident_blocks<T, In, Gated, W, true>(ahead_shared);
      if (ahead_resident > 0 && wanted > ahead_resident)
        return launch(small_linear_kernel<T, In, Gated, W, true>, dim3(static_cast<unsigned>(ahead_resident)),
                      dim3(kLinearWarps * 32), ahead_shared, stream, a);
    }
  }
  const unsigned blocks = static_cast<unsigned>(resident < wanted ? resident : wanted);
  return launch(small_linear_kernel<T, In, Gated, W, false>, dim3(blocks), dim3(kLinearWarps * 32), shared, stream, a);
}

template <typename T, Input In, bool Gated>
bool small_linear_as(const LinearArgs& a, cudaStream_t stream) {
  switch (linear_row_warps(a.in_features * static_cast<int64_t>(sizeof(T)) / 16, a.out_features, current_gpu().sms,
                           kLinearInFlight<Gated>)) {
    case 1: return small_linear_with<T, In, Gated, 1>(a, stream);
    case 2: return small_linear_with<T, In, Gated, 2>(a, stream);
    default: return small_linear_with<T, In, Gated, 4>(a, stream);
  }
}

template <typename T>
bool small_linear_as(const LinearArgs& a, cudaStream_t stream) {
  const bool normed = a.norm_weight != nullptr;
  const bool copied = !normed && small_linear_takes(a.in_features, a.element, /*normed=*/true) &&
                      copy_input_pays(a.out_features, current_gpu().sms);
  if (normed && a.gated) return small_linear_as<T, Input::normed, true>(a, stream);
  if (normed) return small_linear_as<T, Input::normed, false>(a, stream);
  if (a.gated) return small_linear_as<T, Input::from_l2, true>(a, stream);
  if (copied) return small_linear_as<T, Input::copied, false>(a, stream);
  return small_linear_as<T, Input::from_l2, false>(a, stream);
}

// `launch` called with a value of the element type `e` names; false for none.
template <typename Launch>
bool by_element(Element e, Launch launch) {
  switch (e) {
    case Element::f32: return launch(float{});
    case Element::bf16: return launch(__nv_bfloat16{});
    case Element::f16: return launch(__half{});
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

void allow_rows_ahead(bool on) { rows_ahead_on().store(on); }

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

bool launch_small_linear(const LinearArgs& a, cudaStream_t stream) {
  if (!small_linear_takes(a.in_features, a.element, a.norm_weight != nullptr) || a.out_features <= 0 ||
      (a.gated && a.residual))
    return false;
  return by_element(a.element, [&](auto zero) { return small_linear_as<decltype(zero)>(a, stream); });
}

}  // namespace crucible::lm::kernels
