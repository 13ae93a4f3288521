// Decode attention for large batches on tensor cores. At batch 64 the split kernels (decode_kernels.cu) are issue-bound
// on per-lane multiply-adds, and cuDNN's attention reads the captured graph's whole span through a mask; this kernel
// reads each row's cache once, up to the step's slot, and does both products with MMA instructions.
//
// One block per (row, key head). Its G query heads, padded to the MMA's 16 rows, share each loaded key and value.
// Each warp takes every warps-th tile of 16 cache slots and keeps its own running maximum, sum of weights and weighted
// values (online softmax); the block merges its warps' at the end, so no second kernel is needed. A block has one
// wave of its own (one row and key head per SM at batch 64), so it runs many warps, each with kStages tiles of keys
// and values in flight through asynchronous copies: a warp's chain of dependent MMAs and shuffles is hidden by the
// others. Copies start before the row's valid slots are known (a bit mask in shared memory, built while they fly);
// scores of slots a row may not attend (padding, retired requests, slots before a sliding window) are masked to -inf,
// and their values zeroed in shared memory before the weighted sum, so whatever they hold (NaN, too) never reaches the
// output. Slots past the step's, and tiles wholly before a window, are never read. A sink (gpt-oss) joins the final
// merge's softmax. Given the step's unrotated q/k/v row (AttendArgs::rotary), each block rotates its key head's
// queries and key as the rotation kernel does and writes the step's key and value into the caches itself.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "lm/kernels/async_copy.cuh"
#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/decode_kernels_launch.h"
#include "lm/kernels/mma_device.cuh"

namespace crucible::lm::kernels {
namespace {

constexpr int kSlotsPerTile = 16;  // the MMA's k for the weighted values, two n-tiles of 8 for the scores
constexpr int kStages = 3;
constexpr int kRows = 16;  // the MMA's m: query heads of a key head, padded
constexpr int kMaxGroup = 8;  // query heads of a key head: rows 0-7, the accumulators' first row per lane

// Warps per block: 192 KiB of tiles in flight per block either way.
template <int D>
__host__ __device__ constexpr int warps_for() {
  return D == 64 ? 16 : 8;
}

// 16 bytes from global to shared memory, or 16 zero bytes where `load` is false (nothing is read then).
__device__ __forceinline__ void copy16_async(void* to, const void* from, bool load) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(to)), "l"(from),
               "r"(load ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// Where element (row, 16-byte piece) of a [rows][D] tile lies in shared memory: the pieces of each row rotated by
// row % 8, so the eight rows an ldmatrix reads at once fall in different banks.
template <int D>
__device__ __forceinline__ int swizzled(int row, int piece) {
  return row * D + ((piece ^ (row & 7)) * 8);
}

// Shared memory: each warp's stages, the query tile, and one bit per slot of the span.
template <int D>
constexpr size_t tile_bytes() {
  return sizeof(uint16_t) * (warps_for<D>() * kStages * 2 * kSlotsPerTile * D + kRows * D);
}

constexpr size_t mask_bytes(int64_t capacity) { return static_cast<size_t>((capacity + 31) / 32) * sizeof(uint32_t); }

// What a block may use at most: the kernel's shared memory limit is set to it once for every capacity, so that graphs
// captured at different capacities all stay launchable. Hopper's 227 KiB a block holds it; an A100's 163 KiB does not.
template <int D>
constexpr size_t most_shared_bytes() {
  return tile_bytes<D>() + mask_bytes(kAttentionTensorCoresMaxSlots);
}

template <typename T, int D>
__global__ void __launch_bounds__(warps_for<D>() * 32) attend_tensor_cores_kernel(AttendArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(sizeof(T) == 2 && D % 16 == 0, "16-bit elements, whole MMA steps");
  constexpr int kWarps = warps_for<D>();
  constexpr int kPieces = D / 8;  // 16-byte pieces of a head
  constexpr int kTile = kSlotsPerTile * D;
  extern __shared__ __align__(16) unsigned char shared[];
  T* stages_all = reinterpret_cast<T*>(shared);  // [kWarps][kStages][keys, values][16][D]
  T* q_tile = stages_all + kWarps * kStages * 2 * kTile;  // [kRows][D]
  uint32_t* mask = reinterpret_cast<uint32_t*>(q_tile + kRows * D);  // bit s % 32 of word s / 32: slot s is attended
  const int b = blockIdx.x / a.kv_heads, kvh = blockIdx.x % a.kv_heads;
  const int G = a.heads / a.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t slot = *a.slot;  // written before the step: readable before the wait
  if (slot < 0 || slot >= a.visible || a.visible > a.capacity) __trap();
  const int64_t n = slot + 1;
  const int tiles = static_cast<int>((n + kSlotsPerTile - 1) / kSlotsPerTile);
  // A sliding window's first slot's tile: the warps take tiles from there (the slots before it are masked).
  const int first_tile =
      a.window > 0 ? static_cast<int>(max(int64_t{0}, slot - a.window + 1) / kSlotsPerTile) : 0;
  const int64_t head = (static_cast<int64_t>(b) * a.kv_heads + kvh) * a.capacity;
  const T* keys = static_cast<const T*>(a.k_cache) + head * D;
  const T* values = static_cast<const T*>(a.v_cache) + head * D;
  const bool* valid = a.key_valid + static_cast<int64_t>(b) * a.capacity;
  T* stages = stages_all + warp * kStages * 2 * kTile;  // this warp's
  const T* row_heads = static_cast<const T*>(a.q) + b * a.q_row_stride;  // the row's query heads (or q/k/v heads)
  const bool rotates = a.rotary.cos != nullptr;
  const T *cos = nullptr, *sin = nullptr;
  if (rotates) rotary_rows_of(a.rotary, b, D, cos, sin);  // the positions are written before the step
  // Element d of a head as attended: rotated here where the kernel rotates.
  const auto element = [&](const T* head, int d) {
    return rotates ? rotated(head[d], head[d < D / 2 ? d + D / 2 : d - D / 2], cos[d], sin[d]) : head[d];
  };

  // The warp's i-th tile (slots 16 (first_tile + warp + i kWarps) on) into stage i % kStages, zeros past the step's slot; one copy
  // group per call, empty past the last tile, so that waiting for all but the newest kStages - 1 groups always means
  // tile i has landed. Earlier steps wrote every slot but the step's own, whose key and value the kernel just before
  // this one writes: the first tiles are fetched before waiting for it, all but that slot (`early`), which is loaded
  // after the wait.
  const auto fetch = [&](int i, bool early) {
    const int t = first_tile + warp + i * kWarps;
    if (t < tiles) {
      T* k_tile = stages + (i % kStages) * 2 * kTile;
      T* v_tile = k_tile + kTile;
#pragma unroll
      for (int c = lane; c < kSlotsPerTile * kPieces; c += 32) {
        const int row = c / kPieces, piece = c % kPieces;
        const int64_t s = static_cast<int64_t>(t) * kSlotsPerTile + row;
        if (early && s == slot) continue;
        const bool load = s < n;
        const int64_t from = (load ? s : 0) * D + piece * 8;
        copy16_async(k_tile + swizzled<D>(row, piece), keys + from, load);
        copy16_async(v_tile + swizzled<D>(row, piece), values + from, load);
      }
    }
    commit_copies();
  };
#pragma unroll
  for (int i = 0; i < kStages; ++i) fetch(i, true);
  wait_for_earlier_kernels();  // the step's own key, value and query, and key_valid, come from kernels before
  let_later_kernels_start();
  const int own_tile = static_cast<int>(slot / kSlotsPerTile) - first_tile;  // counted from the first tile
  if (own_tile % kWarps == warp) {
    const int row = static_cast<int>(slot % kSlotsPerTile), i = own_tile / kWarps;
    T* k_tile = i < kStages ? stages + i * 2 * kTile : nullptr;  // else its tile is fetched later, from the caches
    if (rotates) {
      // The step's key rotated and its value, into the caches (this block's key head alone reads them) and the tile.
      const T* key = row_heads + (a.heads + kvh) * a.q_head_stride;
      const T* value = row_heads + (a.heads + a.kv_heads + kvh) * a.q_head_stride;
      for (int d = lane; d < D; d += 32) {
        const T k = element(key, d), v = value[d];
        static_cast<T*>(a.k_cache)[(head + slot) * D + d] = k;
        static_cast<T*>(a.v_cache)[(head + slot) * D + d] = v;
        if (k_tile) k_tile[swizzled<D>(row, d / 8) + d % 8] = k, k_tile[kTile + swizzled<D>(row, d / 8) + d % 8] = v;
      }
      // A later tile's copies (i >= kStages) read them back from the caches: the block and warp barriers before the
      // tiles order these stores before those copies (cp.async is an ordinary load here, not the bulk proxy's).
    } else if (k_tile && lane < kPieces) {
      const int to = swizzled<D>(row, lane);
      *reinterpret_cast<uint4*>(k_tile + to) = *reinterpret_cast<const uint4*>(keys + slot * D + lane * 8);
      *reinterpret_cast<uint4*>(k_tile + kTile + to) = *reinterpret_cast<const uint4*>(values + slot * D + lane * 8);
    }
  }

  for (int word = first_tile / 2 + warp; word < (n + 31) / 32; word += kWarps) {
    const int64_t s = static_cast<int64_t>(word) * 32 + lane;
    const bool in_window = a.window == 0 || s > slot - a.window;
    const unsigned bits = __ballot_sync(0xffffffffu, s < n && (s == slot || valid[s]) && in_window);
    if (lane == 0) mask[word] = bits;
  }
  const T* query = row_heads + static_cast<int64_t>(kvh) * G * a.q_head_stride;
  for (int e = threadIdx.x; e < kRows * D; e += kWarps * 32) {
    const int row = e / D, d = e % D;
    q_tile[swizzled<D>(row, d / 8) + d % 8] = row < G ? element(query + row * a.q_head_stride, d) : narrow<T>(0.0f);
  }
  __syncthreads();
  // The query heads as the MMA's A operand, one 16 x 16 fragment per 16 elements of the head.
  uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
    load_matrices(q_frag[k], q_tile + swizzled<D>(lane % 8 + (lane / 8) % 2 * 8, 2 * k + lane / 16));

  // This lane's accumulator rows: query heads lane / 4 and lane / 4 + 8; its columns 2 (lane % 4) and the next.
  float out[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.0f;
  float top = -INFINITY, sum = 0.0f;
  const float scale = a.scale * 1.4426950408889634f;  // scores in base 2
  const int mine = tiles - first_tile > warp ? (tiles - first_tile - warp + kWarps - 1) / kWarps : 0;
  for (int i = 0; i < mine; ++i) {
    wait_copies<kStages - 1>();
    __syncwarp();
    const T* k_tile = stages + (i % kStages) * 2 * kTile;
    T* v_tile = stages + (i % kStages) * 2 * kTile + kTile;
    const int t = first_tile + warp + i * kWarps;
    const unsigned live = (mask[t / 2] >> (16 * (t % 2))) & 0xffffu;  // bit r: slot 16 t + r
    if (live != 0xffffu) {  // padding or retired slots: their values may be anything
#pragma unroll
      for (int c = lane; c < kSlotsPerTile * kPieces; c += 32) {
        const int row = c / kPieces, piece = c % kPieces;
        if (!((live >> row) & 1u)) *reinterpret_cast<uint4*>(v_tile + swizzled<D>(row, piece)) = make_uint4(0, 0, 0, 0);
      }
      __syncwarp();
    }

    // Scores: 16 query rows x 16 slots, as two 8-slot n-tiles.
    float score[2][4] = {};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kf[4];
      load_matrices(kf, k_tile + swizzled<D>(lane % 8 + lane / 16 * 8, 2 * k + (lane / 8) % 2));
      mma<T>(score[0], q_frag[k], kf[0], kf[1]);
      mma<T>(score[1], q_frag[k], kf[2], kf[3]);
    }
    // Online softmax over the lane's first row (query head lane / 4); the second (8 on) is padding and weighs nothing.
    // The tile's maximum over the lane's quad, the running values rescaled to it.
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool use = (live >> (8 * j + 2 * (lane % 4) + e)) & 1u;
        score[j][e] = use ? score[j][e] * scale : -INFINITY;  // a select: a NaN score of a masked slot is dropped
        m = fmaxf(m, score[j][e]);
      }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const float now = fmaxf(top, m);
    const float base = now == -INFINITY ? 0.0f : now;  // no slot seen yet: every weight 0, not NaN
    const float keep = exp2f(top - base);
    top = now;
    const float p00 = exp2f(score[0][0] - base), p01 = exp2f(score[0][1] - base);
    const float p10 = exp2f(score[1][0] - base), p11 = exp2f(score[1][1] - base);
    sum = sum * keep + (p00 + p01) + (p10 + p11);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) out[j][0] *= keep, out[j][1] *= keep;
    // The weights as the A operand of the next product: the score tile's accumulators are its fragment (registers 1
    // and 3 hold the padding rows).
    const uint32_t weights[4] = {pack<T>(p00, p01), 0u, pack<T>(p10, p11), 0u};

    // Weighted values: 16 rows x D, the tile's 16 slots as k.
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t vf[4];
      load_matrices_transposed(vf, v_tile + swizzled<D>(lane % 8 + (lane / 8) % 2 * 8, 2 * j + lane / 16));
      mma<T>(out[2 * j], weights, vf[0], vf[1]);
      mma<T>(out[2 * j + 1], weights, vf[2], vf[3]);
    }
    __syncwarp();  // every lane has read the stage before it is refilled
    fetch(i + kStages, false);
  }
  wait_copies<0>();

  // Merge the warps: each writes its rows' maximum, sum and weighted values; then one thread per output element.
  __syncthreads();  // the stages are free for the merge
  float* merged_top = reinterpret_cast<float*>(shared);  // [kWarps][kMaxGroup]
  float* merged_sum = merged_top + kWarps * kMaxGroup;   // [kWarps][kMaxGroup]
  float* merged_out = merged_sum + kWarps * kMaxGroup;   // [kWarps][kMaxGroup][D]
  const int row = lane / 4;  // below kMaxGroup; rows 8-15 are padding
  float total = sum;
  total += __shfl_xor_sync(0xffffffffu, total, 1);
  total += __shfl_xor_sync(0xffffffffu, total, 2);
  if (row < G) {
    if (lane % 4 == 0) merged_top[warp * kMaxGroup + row] = top, merged_sum[warp * kMaxGroup + row] = total;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float* to = merged_out + (warp * kMaxGroup + row) * D + 8 * j + 2 * (lane % 4);
      to[0] = out[j][0];
      to[1] = out[j][1];
    }
  }
  __syncthreads();
  T* result = static_cast<T*>(a.out) + (static_cast<int64_t>(b) * a.heads + static_cast<int64_t>(kvh) * G) * D;
  for (int e = threadIdx.x; e < G * D; e += kWarps * 32) {
    const int g = e / D, d = e % D;
    // gpt-oss's sink joins the softmax with no value, in the scores' base-2 units.
    const float sink = a.sinks ? a.sinks[kvh * G + g] * 1.4426950408889634f : -INFINITY;
    float m = sink;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, merged_top[w * kMaxGroup + g]);
    float num = 0.0f, den = a.sinks ? exp2f(sink - m) : 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float t = merged_top[w * kMaxGroup + g];
      const float f = t == -INFINITY ? 0.0f : exp2f(t - m);
      num = fmaf(f, merged_out[(w * kMaxGroup + g) * D + d], num);
      den = fmaf(f, merged_sum[w * kMaxGroup + g], den);
    }
    result[e] = narrow<T>(num / den);
  }
#else
  __trap();  // launch_attend_tensor_cores refuses GPUs before compute capability 8.0
#endif
}

template <typename T, int D>
bool attend_tensor_cores_as(const AttendArgs& a, cudaStream_t stream) {
  const auto kernel = attend_tensor_cores_kernel<T, D>;
  static_assert(sizeof(float) * warps_for<D>() * kMaxGroup * (D + 2) <= tile_bytes<D>(),
                "the merge fits in the stages' memory");
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(most_shared_bytes<D>())) != cudaSuccess)
    return false;
  return launch(kernel, dim3(a.batch * a.kv_heads), dim3(warps_for<D>() * 32), tile_bytes<D>() + mask_bytes(a.capacity),
                stream, a);
}

template <typename T>
bool attend_tensor_cores_with(const AttendArgs& a, cudaStream_t stream) {
  return a.head_dim == 64 ? attend_tensor_cores_as<T, 64>(a, stream) : attend_tensor_cores_as<T, 128>(a, stream);
}

}  // namespace

bool attention_tensor_cores_take(int heads, int kv_heads, int head_dim, Element element, int64_t capacity) {
  return heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= kMaxGroup &&
         (head_dim == 64 || head_dim == 128) && element != Element::f32 && capacity > 0 &&
         capacity <= kAttentionTensorCoresMaxSlots && current_gpu().major >= 8 &&
         static_cast<size_t>(current_gpu().shared_optin) >=
             (head_dim == 64 ? most_shared_bytes<64>() : most_shared_bytes<128>());
}

bool launch_attend_tensor_cores(const AttendArgs& a, cudaStream_t stream) {
  if (!attention_tensor_cores_take(a.heads, a.kv_heads, a.head_dim, a.element, a.capacity) || a.batch <= 0 ||
      static_cast<int64_t>(a.batch) * a.kv_heads > 0x7fffffff)
    return false;
  return a.element == Element::bf16 ? attend_tensor_cores_with<__nv_bfloat16>(a, stream)
                                    : attend_tensor_cores_with<__half>(a, stream);
}

}  // namespace crucible::lm::kernels
