#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/decode_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

// Every product and sum is rounded to the element type on its own (no fused multiply-add), as LibTorch's separate
// element-wise kernels round them.
__device__ float widen(float x) { return x; }
__device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float widen(__half x) { return __half2float(x); }
template <typename T> __device__ T narrow(float x);
template <> __device__ float narrow<float>(float x) { return x; }
template <> __device__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <typename T> __device__ T mul(T a, T b) { return narrow<T>(__fmul_rn(widen(a), widen(b))); }
template <typename T> __device__ T add(T a, T b) { return narrow<T>(__fadd_rn(widen(a), widen(b))); }

// One block per (row, head) of the H + 2 Hkv heads, one thread per element of the head.
template <typename T>
__global__ void rotate_into_cache_kernel(RotateArgs a) {
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
  const T x = row[h * D + d];
  const T swapped = row[h * D + (d < half ? d + half : d - half)];
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
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.width) return;
  const int64_t r = i / a.width, j = i % a.width;
  const T* in = static_cast<const T*>(a.gate_up) + r * 2 * a.width;
  const float g = widen(in[j]);
  const T silu = narrow<T>(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));  // as LibTorch's silu: x / (1 + exp(-x))
  static_cast<T*>(a.out)[i] = mul(silu, in[a.width + j]);
}

// One block of 32 warps per row; warp w sums the exponentiated log-probs of its own contiguous segment. Thread 0 finds
// the segment where the scaled draw falls (the first whose running total exceeds it), and that segment's warp scans
// its entries 32 at a time for the first nonzero one whose running total exceeds it. Where rounding leaves the scan
// short of the draw, the segment's last nonzero entry is taken (its sum, and so one of its entries, is above zero).
constexpr int kPickWarps = 32;

__global__ void pick_by_cdf_kernel(PickArgs a) {
  const int row = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* lp = a.log_probs + row * a.row_stride;
  const int64_t per_warp = ((a.vocab + kPickWarps - 1) / kPickWarps + 31) / 32 * 32;
  const int64_t begin = warp * per_warp, end = begin + per_warp < a.vocab ? begin + per_warp : a.vocab;
  float sum = 0.0f;
  for (int64_t j = begin + lane; j < end; j += 32) sum += expf(lp[j]);
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float sums[kPickWarps];
  __shared__ float target, before;
  __shared__ int chosen;
  if (lane == 0) sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kPickWarps; ++w) total += sums[w];
    // Below the total: the highest draw, rounded up to the whole mass, would otherwise fall past every entry.
    const float t = fminf(a.uniform[row] * total, nextafterf(total, 0.0f));
    float running = 0.0f;
    int w = 0, last = 0;
    for (; w < kPickWarps; ++w) {
      if (sums[w] > 0.0f) last = w;
      const float next = running + sums[w];
      if (next > t) break;
      running = next;
    }
    if (w == kPickWarps) {  // a row of NaNs or no mass: its last segment with any
      w = last;
      running = 0.0f;
    }
    target = t;
    before = running;
    chosen = w;
  }
  __syncthreads();
  if (warp != chosen) return;
  float running = before;
  int64_t picked = -1, last_nonzero = -1;
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t j = base + lane;
    const float p = j < end ? expf(lp[j]) : 0.0f;
    float cumulative = p;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const float below = __shfl_up_sync(0xffffffffu, cumulative, offset);
      if (lane >= offset) cumulative += below;
    }
    cumulative += running;
    const unsigned nonzero = __ballot_sync(0xffffffffu, p > 0.0f);
    const unsigned past = __ballot_sync(0xffffffffu, p > 0.0f && cumulative > target);
    if (nonzero) last_nonzero = base + 31 - __clz(nonzero);
    if (past) {
      picked = base + __ffs(past) - 1;
      break;
    }
    running = __shfl_sync(0xffffffffu, cumulative, 31);
  }
  if (lane == 0) a.out[row] = picked >= 0 ? picked : (last_nonzero >= 0 ? last_nonzero : 0);
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
  rotate_into_cache_kernel<T><<<grid, a.head_dim, 0, stream>>>(a);
  return cudaGetLastError() == cudaSuccess;
}

template <typename T>
bool silu_as(const SiluArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t n = a.rows * a.width;
  silu_times_up_kernel<T><<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace

bool launch_rotate_into_cache(const RotateArgs& a, cudaStream_t stream) {
  if (!rotation_takes(a.head_dim) || a.batch <= 0 || a.heads + 2 * a.kv_heads > 65535) return false;
  return by_element(a.element, [&](auto zero) { return rotate_as<decltype(zero)>(a, stream); });
}

bool launch_silu_times_up(const SiluArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.width <= 0) return a.rows == 0 || a.width == 0;
  return by_element(a.element, [&](auto zero) { return silu_as<decltype(zero)>(a, stream); });
}

bool launch_pick_by_cdf(const PickArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.vocab <= 0) return a.batch == 0;
  pick_by_cdf_kernel<<<a.batch, kPickWarps * 32, 0, stream>>>(a);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
