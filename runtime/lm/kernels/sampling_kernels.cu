#include <climits>
#include <cmath>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/decode_kernels_launch.h"
#include "lm/generation/sampling_params.h"

namespace crucible::lm::kernels {
namespace {

// The warp's inclusive running sum of x, lane by lane in a fixed order (the same bits every call).
__device__ __forceinline__ float warp_inclusive_sum(float x) {
  const int lane = threadIdx.x % 32;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float below = __shfl_up_sync(0xffffffffu, x, offset);
    if (lane >= offset) x += below;
  }
  return x;
}

// One block of 32 warps per row; warp w sums the exponentiated log-probs of its own contiguous segment. Thread 0 finds
// the segment where the scaled draw falls (the first whose running total exceeds it), and that segment's warp scans
// its entries 32 at a time for the first nonzero one whose running total exceeds it. Where rounding leaves the scan
// short of the draw, the segment's last nonzero entry is taken (its sum, and so one of its entries, is above zero).
constexpr int kPickWarps = 32;

__global__ void pick_by_cdf_kernel(PickArgs a) {
  wait_for_earlier_kernels();
  let_later_kernels_start();
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
    const float cumulative = warp_inclusive_sum(p) + running;
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


// Block-wide reductions of kSampleThreads threads: every thread gets the result. Fixed trees, so a row's sums come out
// the same in every run. `scratch` holds a float and an int per warp; each call ends with the block synchronised.
constexpr int kSampleWarps = kSampleThreads / 32;

struct Scratch {
  float value[kSampleWarps];
  int index[kSampleWarps];
};

__device__ float block_sum(float v, Scratch& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // an earlier call's readers are done with `s`
  if (threadIdx.x % 32 == 0) s.value[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kSampleWarps; ++w) total += s.value[w];
  return total;
}

// Whether (a, at) comes before (b, bt) as torch.argmax orders: NaN above every number, then the higher value, then
// the lower index.
__device__ bool ranks_first(float a, int at, float b, int bt) {
  if (isnan(a) != isnan(b)) return isnan(a);
  return a > b || ((a == b || isnan(a)) && at < bt);
}

// The highest value and the first index holding it, in ranks_first's order.
__device__ void block_top(float& v, int& index, Scratch& s) {
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (ranks_first(ov, oi, v, index)) v = ov, index = oi;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.value[threadIdx.x / 32] = v, s.index[threadIdx.x / 32] = index;
  __syncthreads();
  v = s.value[0], index = s.index[0];
#pragma unroll
  for (int w = 1; w < kSampleWarps; ++w)
    if (ranks_first(s.value[w], s.index[w], v, index)) v = s.value[w], index = s.index[w];
}

__device__ int block_min(int v, Scratch& s) {
  for (int o = 16; o > 0; o /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.index[threadIdx.x / 32] = v;
  __syncthreads();
  int m = s.index[0];
#pragma unroll
  for (int w = 1; w < kSampleWarps; ++w) m = min(m, s.index[w]);
  return m;
}

// Each thread's kSamplePerThread consecutive entries from `begin` (-inf past the vocabulary), 16 bytes at a time
// where rows are 16-byte aligned.
template <typename T>
__device__ void load_entries(const SampleArgs& a, const T* row, int64_t begin, float (&l)[kSamplePerThread]) {
  constexpr int kPer16 = 16 / sizeof(T);
  if (a.aligned16 && begin + kSamplePerThread <= a.vocab) {
#pragma unroll
    for (int h = 0; h < kSamplePerThread / kPer16; ++h) {
      float part[kPer16];
      widen_all<T>(*reinterpret_cast<const uint4*>(row + begin + h * kPer16), part);
#pragma unroll
      for (int e = 0; e < kPer16; ++e) l[h * kPer16 + e] = part[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < kSamplePerThread; ++e) l[e] = begin + e < a.vocab ? widen(row[begin + e]) : -INFINITY;
  }
}

// Block (chunk, row): the chunk's top, first index of it, and sums of exponentials relative to its top.
template <typename T>
__global__ void __launch_bounds__(kSampleThreads) sample_chunks_kernel(SampleArgs a) {
  wait_for_earlier_kernels();
  let_later_kernels_start();
  __shared__ Scratch scratch;
  const int row = blockIdx.y;
  const T* logits = static_cast<const T*>(a.logits) + row * a.row_stride;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSampleChunk + threadIdx.x * kSamplePerThread;
  float l[kSamplePerThread];
  load_entries<T>(a, logits, begin, l);
  float top = -INFINITY;
  int first = INT_MAX;
#pragma unroll
  for (int e = 0; e < kSamplePerThread; ++e)
    if (ranks_first(l[e], static_cast<int>(begin + e), top, first)) top = l[e], first = static_cast<int>(begin + e);
  block_top(top, first, scratch);
  const float inv_t = a.inv_temperature[row];
  float model = 0.0f, sample = 0.0f;
  if (top > -INFINITY) {
#pragma unroll
    for (int e = 0; e < kSamplePerThread; ++e) {
      const float d = l[e] - top;
      model += expf(d);
      sample += expf(d * inv_t);
    }
  }
  model = block_sum(model, scratch);
  sample = block_sum(sample, scratch);
  if (threadIdx.x == 0) {
    SampleChunk& out = a.chunks[static_cast<int64_t>(row) * gridDim.x + blockIdx.x];
    out.top = top;
    out.model_sum = model;
    out.sample_sum = sample;
    out.first_top = first;
  }
}

// Warp 0's inclusive running sum of weights[0, n) in rounds of 32: the same additions in the same order every time
// it is called, so a second pass meets the first pass's total exactly. Calls `visit(index, cumulative)` for each.
template <typename Visit>
__device__ float warp_running_sum(const float* weights, int n, Visit visit) {
  const int lane = threadIdx.x % 32;
  float running = 0.0f;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const float cumulative = warp_inclusive_sum(i < n ? weights[i] : 0.0f) + running;
    if (!visit(base, i < n, cumulative)) break;
    running = __shfl_sync(0xffffffffu, cumulative, 31);
  }
  return running;
}

// Block per row: merges the chunks, then for a sampled row finds the chunk where the scaled draw falls (the first whose
// running total exceeds it) and the entry within it (the first nonzero one whose running total exceeds it). Where
// rounding leaves the scan short of the draw, the last nonzero entry of the chunk is taken. With no mass to draw from
// (every logit -inf, or a NaN or +inf among them: the sums are NaN, as LibTorch's log-softmax is), the row takes what
// torch.argmax takes, with NaN log-probs where LibTorch's are NaN. A zero-probability entry is never picked otherwise.
template <typename T>
__global__ void __launch_bounds__(kSampleThreads) sample_pick_kernel(SampleArgs a) {
  wait_for_earlier_kernels();
  let_later_kernels_start();
  extern __shared__ float weights[];  // [chunks]: each chunk's mass at the row's temperature, relative to the row's top
  __shared__ Scratch scratch;
  __shared__ float target_shared, before_shared, total_shared;
  __shared__ int chunk_shared;
  const int row = blockIdx.x, lane = threadIdx.x % 32;
  const int chunks = static_cast<int>((a.vocab + kSampleChunk - 1) / kSampleChunk);  // sample_chunks(), on the device
  const SampleChunk* stats = a.chunks + static_cast<int64_t>(row) * chunks;
  float top = -INFINITY;
  int first = INT_MAX;
  for (int c = threadIdx.x; c < chunks; c += kSampleThreads)
    if (ranks_first(stats[c].top, stats[c].first_top, top, first)) top = stats[c].top, first = stats[c].first_top;
  block_top(top, first, scratch);
  const float inv_t = a.inv_temperature[row];
  float model = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += kSampleThreads) {
    const bool any = stats[c].top > -INFINITY && top > -INFINITY;
    model += any ? stats[c].model_sum * expf(stats[c].top - top) : 0.0f;
    weights[c] = any ? stats[c].sample_sum * expf((stats[c].top - top) * inv_t) : 0.0f;
  }
  model = block_sum(model, scratch);  // also makes `weights` visible to every thread
  const T* logits = static_cast<const T*>(a.logits) + row * a.row_stride;
  const bool greedy = a.greedy[row];
  int token = first;
  if (!greedy) {
    if (threadIdx.x < 32) {
      const float total = warp_running_sum(weights, chunks, [](int, bool, float) { return true; });
      const uint64_t seed = a.seeds[row];
      const float u = row_uniform(seed, a.steps ? a.steps[row] : a.step);
      // Below the total: the highest draw, rounded up to the whole mass, would otherwise fall past every entry.
      const float target = fminf(u * total, nextafterf(total, 0.0f));
      int chosen = -1, last = -1;
      float before = 0.0f, before_last = 0.0f;
      warp_running_sum(weights, chunks, [&](int base, bool in, float cumulative) {
        const float w = in ? weights[base + lane] : 0.0f;
        const unsigned nonzero = __ballot_sync(0xffffffffu, w > 0.0f);
        const unsigned past = __ballot_sync(0xffffffffu, w > 0.0f && cumulative > target);
        const float exclusive = cumulative - w;  // the running total before this chunk
        if (nonzero) {
          const int src = 31 - __clz(nonzero);
          last = base + src;
          before_last = __shfl_sync(0xffffffffu, exclusive, src);
        }
        if (past) {
          const int src = __ffs(past) - 1;
          chosen = base + src;
          before = __shfl_sync(0xffffffffu, exclusive, src);
          return false;
        }
        return true;
      });
      if (lane == 0) {
        chunk_shared = chosen >= 0 ? chosen : last;
        before_shared = chosen >= 0 ? before : before_last;
        target_shared = target;
        total_shared = total;
      }
    }
    __syncthreads();
    const int chunk = chunk_shared;
    if (chunk >= 0) {
      const float scale = expf((stats[chunk].top - top) * inv_t), target = target_shared;
      const int64_t begin = static_cast<int64_t>(chunk) * kSampleChunk + threadIdx.x * kSamplePerThread;
      float l[kSamplePerThread], p[kSamplePerThread], mine = 0.0f;
      load_entries<T>(a, logits, begin, l);
#pragma unroll
      for (int e = 0; e < kSamplePerThread; ++e) {
        p[e] = l[e] > -INFINITY ? expf((l[e] - stats[chunk].top) * inv_t) * scale : 0.0f;
        mine += p[e];
      }
      // This thread's running total before its entries: warps' totals in order, then lanes' in order.
      const float below = warp_inclusive_sum(mine);
      if (lane == 31) scratch.value[threadIdx.x / 32] = below;
      __syncthreads();
      float running = before_shared + below - mine;
      for (int w = 0; w < static_cast<int>(threadIdx.x / 32); ++w) running += scratch.value[w];
      int picked = INT_MAX, last = -1;
#pragma unroll
      for (int e = 0; e < kSamplePerThread; ++e) {
        running += p[e];
        if (p[e] > 0.0f) {
          last = static_cast<int>(begin + e);
          if (running > target && picked == INT_MAX) picked = static_cast<int>(begin + e);
        }
      }
      picked = block_min(picked, scratch);
      if (picked == INT_MAX) picked = -block_min(-last, scratch);  // the chunk's last nonzero entry
      if (picked >= 0) token = picked;
    }
  }
  if (threadIdx.x != 0) return;
  if (token == INT_MAX) token = 0;  // no entry above -inf
  const float chosen = widen(logits[token]) - top;
  const float model_lp = chosen - logf(model);
  const float sampling_lp = greedy ? 0.0f : chosen * inv_t - logf(total_shared);
  a.tokens[row] = token;
  a.model_logprobs[row] = model_lp;
  a.sampling_logprobs[row] = sampling_lp;
  a.record[row] = token;
  a.record[a.batch + row] = sampling_lp;
  a.record[2 * a.batch + row] = model_lp;
}

template <typename T>
bool sample_as(const SampleArgs& a, cudaStream_t stream) {
  const int64_t chunks = sample_chunks(a.vocab);
  return launch(sample_chunks_kernel<T>, dim3(static_cast<unsigned>(chunks), a.batch), dim3(kSampleThreads), 0, stream,
                a) &&
         launch(sample_pick_kernel<T>, dim3(a.batch), dim3(kSampleThreads), sizeof(float) * chunks, stream, a);
}

}  // namespace

bool launch_pick_by_cdf(const PickArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.vocab <= 0) return a.batch == 0;
  return launch(pick_by_cdf_kernel, dim3(a.batch), dim3(kPickWarps * 32), 0, stream, a);
}

bool launch_sample(const SampleArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.batch > 65535 || a.vocab <= 0 || sample_chunks(a.vocab) > kSampleMaxChunks) return false;
  switch (a.element) {
    case Element::f32: return sample_as<float>(a, stream);
    case Element::bf16: return sample_as<__nv_bfloat16>(a, stream);
    case Element::f16: return sample_as<__half>(a, stream);
  }
  return false;
}

}  // namespace crucible::lm::kernels
