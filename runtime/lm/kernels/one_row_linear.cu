// The one-row linear kernel of a batch-1 decode step (launch_small_linear, decode_kernels_launch.h): a GEMV with the
// RMS norm before it or the MLP's activation after it folded in.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "lm/kernels/async_copy.cuh"
#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

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

// The 16-byte slices of shared memory a block of the one-row kernel holds its second round's rows in (kAhead), behind
// the staged x: each lane's loads of one round, whatever the warps a row.
constexpr int64_t kAheadSlices = kLinearWarps * 32 * kLinearInFlight<false>;

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
         (kAhead ? kAheadSlices * sizeof(uint4) : 0);
}

// Whether rows ahead may serve a one-row output kernel of W warps a row: one round of loads covers a row (so x is at
// most 16 KiB, and with the rows' 16 KiB a block stays within its default 48 KiB of shared memory), and not switched
// off.
template <typename T, int W>
bool rows_ahead_fit(const LinearArgs& a) {
  static_assert(2 * kAheadSlices * sizeof(uint4) <= kLinearMaxNormedBytes, "48 KiB a block");
  const int64_t slices = a.in_features * static_cast<int64_t>(sizeof(T)) / 16;
  return rows_ahead_on().load(std::memory_order_relaxed) && slices <= 32 * W * kLinearInFlight<false>;
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
    if (wanted > resident && rows_ahead_fit<T, W>(a)) {
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

}  // namespace

void allow_rows_ahead(bool on) { rows_ahead_on().store(on); }

bool launch_small_linear(const LinearArgs& a, cudaStream_t stream) {
  if (!small_linear_takes(a.in_features, a.element, a.norm_weight != nullptr) || a.out_features <= 0 ||
      (a.gated && a.residual))
    return false;
  return by_element(a.element, [&](auto zero) { return small_linear_as<decltype(zero)>(a, stream); });
}

}  // namespace crucible::lm::kernels
