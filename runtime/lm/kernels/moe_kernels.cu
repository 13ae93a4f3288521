// The experts of a mixture of experts for a few tokens, read straight from MXFP4: one block per (expert, 32 rows),
// which finds the assignments routed to its expert on the device (no host synchronisation, so a decode step can be
// captured in a CUDA graph) and reads its rows once for all of them. A warp works on 4 rows at once; lane l takes MX
// block l + 32 i of each (16 code bytes, 32 values, one scale), so a warp reads 512 contiguous bytes of a row per
// step and has 64 bytes a lane in flight. Each 8 decoded values of the 4 rows meet each of up to kChunk
// assignments' 8 inputs in registers, so an input is read once for 4 rows.
#include <climits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/mma_device.cuh"
#include "lm/kernels/moe_kernels_launch.h"

namespace crucible::lm::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kMxBlock = 32;

// 8 consecutive values at p (16-byte aligned) as floats: one 16-byte load of 16-bit values, two of float32.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  widen_all<T, 8>(*reinterpret_cast<const uint4*>(p), v);
}
template <>
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  float low[4], high[4];
  widen_all<float, 4>(reinterpret_cast<const uint4*>(p)[0], low);
  widen_all<float, 4>(reinterpret_cast<const uint4*>(p)[1], high);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = low[i], v[4 + i] = high[i];
}

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

// The 8 values of one 32-bit word of codes, the low nibble of each byte first. A code's sign bit goes to bit 31 and
// its exponent and mantissa bits to 24-22, which is a float32 of 2^-126 times the code's value (0, 0.5, 1, 1.5, 2, 3,
// 4, 6; 0.5 a subnormal); the multiplication by 2^126 is exact. Arithmetic, not a table: a table indexed per lane
// would sit in local memory or conflict in shared memory.
__device__ __forceinline__ void decode8(unsigned word, float (&w)[8]) {
#pragma unroll
  for (int byte = 0; byte < 4; ++byte) {
    const unsigned v = word >> (8 * byte);
    w[2 * byte] = __uint_as_float(((v << 28) & 0x80000000u) | ((v << 22) & 0x01C00000u)) * 0x1p126f;
    w[2 * byte + 1] = __uint_as_float(((v << 24) & 0x80000000u) | ((v << 18) & 0x01C00000u)) * 0x1p126f;
  }
}

__device__ __forceinline__ unsigned word_of(const uint4& q, int g) { return g == 0 ? q.x : g == 1 ? q.y : g == 2 ? q.z : q.w; }

// 2^(scale - 127) built from its bits: exact (scale 0 is 2^-127, a subnormal; 255, NaN in the MX format, is refused
// at load).
__device__ __forceinline__ float scale_of(unsigned scale) {
  return scale == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(scale) << 23);
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

template <typename T, int kRows, int kChunk>
__global__ void __launch_bounds__(kWarps * 32) expert_gemv_kernel(ExpertGemvArgs a, bool by_assignment) {
  __shared__ Routed routed;
  int expert = 0;
  const int n = gather_assignments(a, by_assignment, expert, routed);
  const int* mine = routed.mine;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.y * kWarps + warp) * kRows;
  if (n == 0 || row0 >= a.rows) return;  // no barrier follows
  const int rows_here = min(kRows, a.rows - row0);
  const int blocks_per_row = a.cols / kMxBlock;
  const int64_t first_row = static_cast<int64_t>(expert) * a.rows + row0;
  const uint4* codes = reinterpret_cast<const uint4*>(a.blocks) + first_row * blocks_per_row;
  const uint8_t* scales = a.scales + first_row * blocks_per_row;
  const T* x = static_cast<const T*>(a.x);
  for (int first = 0; first < n; first += kChunk) {
    const int chunk = min(kChunk, n - first);
    const T* inputs[kChunk];
#pragma unroll
    for (int c = 0; c < kChunk; ++c)  // past the chunk: its last input again, never read
      inputs[c] = x + static_cast<int64_t>(mine[first + min(c, chunk - 1)] / a.x_divisor) * a.x_row_stride;
    float acc[kRows][kChunk];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kChunk; ++c) acc[r][c] = 0.0f;
    for (int b = lane; b < blocks_per_row; b += 32) {
      uint4 code[kRows];
      float scale[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {  // past the last row: that row again, never written
        const int64_t at = static_cast<int64_t>(min(r, rows_here - 1)) * blocks_per_row + b;
        code[r] = __ldg(codes + at);
        scale[r] = scale_of(__ldg(scales + at));
      }
#pragma unroll 1
      for (int g = 0; g < 4; ++g) {
        const int64_t column = static_cast<int64_t>(b) * kMxBlock + g * 8;
        float in[kChunk][8];
#pragma unroll
        for (int c = 0; c < kChunk; ++c)
          if (c < chunk) load8(inputs[c] + column, in[c]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float w[8];
          decode8(word_of(code[r], g), w);
#pragma unroll
          for (int c = 0; c < kChunk; ++c) {
            if (c >= chunk) continue;
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) sum = fmaf(w[i], in[c][i], sum);
            acc[r][c] = fmaf(scale[r], sum, acc[r][c]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row_index = first_row + r;
      const float bias = a.bias && r < rows_here ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        float v = acc[r][c];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
        if (lane == 0 && r < rows_here && c < chunk)
          a.out[static_cast<int64_t>(mine[first + c]) * a.rows + row0 + r] = v + bias;
      }
    }
  }
}

// Few assignments (a token or two a step): 4 rows a warp for more code bytes in flight, one input at a time. Many:
// 2 rows and 4 inputs, each decoded value used 4 times (the work is then bound by arithmetic, not memory).
template <typename T>
void launch_for(const ExpertGemvArgs& args, cudaStream_t stream) {
  const bool by_assignment = args.assignments <= args.experts_count;
  const int rows_per_warp = by_assignment ? 4 : 2;
  const int rows_per_block = kWarps * rows_per_warp;
  const dim3 grid(by_assignment ? args.assignments : args.experts_count, (args.rows + rows_per_block - 1) / rows_per_block);
  if (by_assignment)
    expert_gemv_kernel<T, 4, 1><<<grid, kWarps * 32, 0, stream>>>(args, true);
  else
    expert_gemv_kernel<T, 2, 4><<<grid, kWarps * 32, 0, stream>>>(args, false);
}

// Many assignments on tensor cores, the model in bfloat16: each warp multiplies 16 rows of its expert by 8 * kTiles
// inputs at a time with mma.m16n8k16 (bfloat16 operands, float32 sums), so each decoded weight serves every input of
// the tile for one instruction's share. The products sum over the columns in any order, so the warp takes its k order
// from whole loads: over a span of 4 kLaneBlocks MX blocks lane (g, t) holds MX blocks t, t + 4, ... of rows g and
// g + 8 (16 code bytes each, decoded times the block's scale, exact in bfloat16) and reads the same columns of input
// g of each tile; step s of a block's 8 gives its columns 4s .. 4s + 3 the fragments' k positions 2t, 2t + 1, 2t + 8,
// 2t + 9, in A and B alike. Blocks past a row's end hold zeros in both. The block stages each span's inputs in shared memory as
// bfloat16 once for its warps, the next span's loads in flight while the warps multiply the current one.
// MX blocks of each of its two rows a lane holds in a span: 2 (more bytes in flight, more registers) measured 7-14%
// slower at batch 64 on an H200.
constexpr int kLaneBlocks = 1;
constexpr int kSpanBlocks = 4 * kLaneBlocks;
constexpr int kSpanPieces = kSpanBlocks * kMxBlock / 8;  // 16-byte pieces of 8 bfloat16 inputs in a span's row
constexpr int kMmaRows = 16;

// Where piece p of token slot `slot` lies in its staged row: the 8 lanes of a quarter warp read pieces 16i + 4t + u
// (t = 0..3) of two slots, which this places in 8 different groups of 4 banks.
__device__ __forceinline__ int staged_position(int slot, int piece) {
  return piece ^ (((piece >> 3) & 1) << 1) ^ (slot & 1);
}

__device__ __forceinline__ uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// The 8 codes of a word as 4 bfloat16 pairs (codes 2i and 2i + 1, the low nibble of byte i first, in pair i), exact:
// each magnitude's high and low byte looked up in two 8-byte tables (0, 0.5, 1, 1.5, 2, 3, 4, 6 are 0x0000, 0x3F00,
// 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0), interleaved, the sign bits moved to bits 15 and 31; then times
// the block's scale (a power of two: exact).
__device__ __forceinline__ void decode_pairs(uint32_t word, uint32_t scale_pair, uint32_t (&pair)[4]) {
  const uint32_t magnitude = word & 0x77777777u;
  const uint32_t high_first = byte_permute(0x3F3F3F00u, 0x40404040u, magnitude);
  const uint32_t low_first = byte_permute(0xC0800000u, 0xC0804000u, magnitude);
  const uint32_t high_last = byte_permute(0x3F3F3F00u, 0x40404040u, magnitude >> 16);
  const uint32_t low_last = byte_permute(0xC0800000u, 0xC0804000u, magnitude >> 16);
  const uint32_t even_signs = (word << 4) & 0x80808080u, odd_signs = word & 0x80808080u;  // bit 7 of byte i
  const uint32_t magnitudes[4] = {byte_permute(low_first, high_first, 0x5140), byte_permute(low_first, high_first, 0x7362),
                                  byte_permute(low_last, high_last, 0x5140), byte_permute(low_last, high_last, 0x7362)};
  const __nv_bfloat162 scale = *reinterpret_cast<const __nv_bfloat162*>(&scale_pair);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t signs = byte_permute(even_signs, odd_signs, 0x4000u + 0x1010u * i) & 0x80008000u;
    const uint32_t value = magnitudes[i] | signs;
    const __nv_bfloat162 scaled = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&value), scale);
    pair[i] = *reinterpret_cast<const uint32_t*>(&scaled);
  }
}

// 2^(scale - 127) in both halves of a bfloat16 pair (scale 0 is 2^-127, a subnormal).
__device__ __forceinline__ uint32_t scale_pair_of(unsigned scale) {
  const uint32_t bits = scale == 0 ? 0x0040u : scale << 7;
  return bits | bits << 16;
}

struct SpanCodes {
  uint4 low[kLaneBlocks], high[kLaneBlocks];  // rows g and g + 8
  uint32_t low_scale[kLaneBlocks], high_scale[kLaneBlocks];  // as bfloat16 pairs
};

template <int kTiles>
struct StagedInputs {
  uint4 piece[2][8 * kTiles][kSpanPieces];  // two spans' buffers
};

// One 16-byte piece (8 inputs as bfloat16) of a span, zeros where there is no input or no block.
template <typename T>
__device__ __forceinline__ uint4 load_piece(const T* at, bool present);

template <>
__device__ __forceinline__ uint4 load_piece(const __nv_bfloat16* at, bool present) {
  return present ? __ldg(reinterpret_cast<const uint4*>(at)) : make_uint4(0, 0, 0, 0);
}

template <>
__device__ __forceinline__ uint4 load_piece(const float* at, bool present) {
  if (!present) return make_uint4(0, 0, 0, 0);
  const float4 v = __ldg(reinterpret_cast<const float4*>(at)), w = __ldg(reinterpret_cast<const float4*>(at) + 1);
  return make_uint4(pack<__nv_bfloat16>(v.x, v.y), pack<__nv_bfloat16>(v.z, v.w), pack<__nv_bfloat16>(w.x, w.y),
                    pack<__nv_bfloat16>(w.z, w.w));
}

// Steps 2u and 2u + 1 of the lane's block i: code word u of rows g and g + 8 as A fragments, times each tile's staged
// inputs (piece u of span block 4i + t).
template <int kTiles>
__device__ __forceinline__ void mma_word(const SpanCodes& codes, int i, int u,
                                         const uint4 (&staged)[8 * kTiles][kSpanPieces], int g, int t,
                                         float (&acc)[kTiles][4]) {
  uint32_t low[4], high[4];
  decode_pairs(word_of(codes.low[i], u), codes.low_scale[i], low);
  decode_pairs(word_of(codes.high[i], u), codes.high_scale[i], high);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int slot = 8 * j + g;
    const uint4 in = staged[slot][staged_position(slot, 4 * (4 * i + t) + u)];
    const uint32_t first[4] = {low[0], high[0], low[1], high[1]}, second[4] = {low[2], high[2], low[3], high[3]};
    mma<__nv_bfloat16>(acc[j], first, in.x, in.y);
    mma<__nv_bfloat16>(acc[j], second, in.z, in.w);
  }
}

template <typename T, int kTiles, bool kOrdered>
__global__ void __launch_bounds__(kWarps * 32) expert_mma_kernel(ExpertGemvArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  __shared__ Routed routed;
  __shared__ StagedInputs<kTiles> staged;
  int expert = 0;
  const int n = kOrdered ? ordered_assignments(a, 8 * kTiles, expert, routed) : gather_assignments(a, false, expert, routed);
  const int* mine = routed.mine;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int row0 = (blockIdx.y * kWarps + warp) * kMmaRows;
  const bool has_rows = row0 < a.rows;  // a warp without rows still stages inputs and meets the barriers
  const int blocks_per_row = a.cols / kMxBlock;
  const int spans = (blocks_per_row + kSpanBlocks - 1) / kSpanBlocks;
  // Rows past the end read the last row again and are never written.
  const int64_t low_row = static_cast<int64_t>(expert) * a.rows + min(row0 + g, a.rows - 1);
  const int64_t high_row = static_cast<int64_t>(expert) * a.rows + min(row0 + g + 8, a.rows - 1);
  const uint4* low_codes = reinterpret_cast<const uint4*>(a.blocks) + low_row * blocks_per_row;
  const uint4* high_codes = reinterpret_cast<const uint4*>(a.blocks) + high_row * blocks_per_row;
  const uint8_t* low_scales = a.scales + low_row * blocks_per_row;
  const uint8_t* high_scales = a.scales + high_row * blocks_per_row;
  const T* x = static_cast<const T*>(a.x);
  const auto load_codes = [&](int span) {
    SpanCodes c;
#pragma unroll
    for (int i = 0; i < kLaneBlocks; ++i) {
      const int b = span * kSpanBlocks + 4 * i + t;
      const bool present = has_rows && b < blocks_per_row;
      c.low[i] = present ? __ldg(low_codes + b) : make_uint4(0, 0, 0, 0);
      c.high[i] = present ? __ldg(high_codes + b) : make_uint4(0, 0, 0, 0);
      c.low_scale[i] = present ? scale_pair_of(__ldg(low_scales + b)) : 0u;
      c.high_scale[i] = present ? scale_pair_of(__ldg(high_scales + b)) : 0u;
    }
    return c;
  };
  // Thread i stages pieces i, i + 128, ... of a span: slot id / kSpanPieces, piece id % kSpanPieces.
  constexpr int kPieces = 8 * kTiles * kSpanPieces / (kWarps * 32);
  for (int first = 0; first < n; first += 8 * kTiles) {
    const auto load_inputs = [&](int span, uint4(&pieces)[kPieces]) {
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        const int id = threadIdx.x + i * kWarps * 32, slot = id / kSpanPieces, piece = id % kSpanPieces;
        const int column = span * kSpanBlocks * kMxBlock + piece * 8;
        const bool present = first + slot < n && column < a.cols;
        const int64_t row = present ? mine[first + slot] / a.x_divisor : 0;
        pieces[i] = load_piece(x + row * a.x_row_stride + column, present);
      }
    };
    const auto store_inputs = [&](int buffer, const uint4(&pieces)[kPieces]) {
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        const int id = threadIdx.x + i * kWarps * 32, slot = id / kSpanPieces, piece = id % kSpanPieces;
        staged.piece[buffer][slot][staged_position(slot, piece)] = pieces[i];
      }
    };
    uint4 pieces[kPieces];
    load_inputs(0, pieces);
    SpanCodes next = load_codes(0);
    __syncthreads();  // the previous pass has read its last buffer
    store_inputs(0, pieces);
    float acc[kTiles][4] = {};
    for (int span = 0; span < spans; ++span) {
      __syncthreads();  // this span's inputs are staged, and the other buffer read
      const SpanCodes codes = next;
      const bool more = span + 1 < spans;
      if (more) load_inputs(span + 1, pieces), next = load_codes(span + 1);
      if (has_rows)
#pragma unroll
        for (int i = 0; i < kLaneBlocks; ++i)
#pragma unroll
          for (int u = 0; u < 4; ++u) mma_word<kTiles>(codes, i, u, staged.piece[span % 2], g, t, acc);
      if (more) store_inputs((span + 1) % 2, pieces);
    }
    if (!has_rows) continue;
    // Lane (g, t) holds rows g and g + 8 of inputs 2t and 2t + 1 of each tile.
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + g + (i >= 2 ? 8 : 0), slot = first + 8 * j + 2 * t + i % 2;
        if (row >= a.rows || slot >= n) continue;
        const int64_t row_index = static_cast<int64_t>(expert) * a.rows + row;
        const float bias = a.bias ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
        a.out[static_cast<int64_t>(mine[slot]) * a.rows + row] = acc[j][i] + bias;
      }
  }
#endif
}

// On tensor cores, by expert: 8 inputs a warp's pass when experts have a few each, 16 or 32 when more tokens share an
// expert, so that most experts' rows are read once.
// Ordered assignments (a prefill's many): a block per tile of args.ordered_tile of an expert's, at most
// assignments / tile + experts tiles.
template <typename T>
void launch_mma_for(const ExpertGemvArgs& args, cudaStream_t stream) {
  const int rows = (args.rows + kWarps * kMmaRows - 1) / (kWarps * kMmaRows);
  if (args.order) {
    const int tile = args.ordered_tile;
    const dim3 grid((args.assignments + tile - 1) / tile + args.experts_count, rows);
    if (tile == kWideOrderedTile)
      expert_mma_kernel<T, kWideOrderedTile / 8, true><<<grid, kWarps * 32, 0, stream>>>(args);
    else
      expert_mma_kernel<T, kOrderedTile / 8, true><<<grid, kWarps * 32, 0, stream>>>(args);
    return;
  }
  const int per_expert = (args.assignments + args.experts_count - 1) / args.experts_count;
  const dim3 grid(args.experts_count, rows);
  if (per_expert <= 4)
    expert_mma_kernel<T, 1, false><<<grid, kWarps * 32, 0, stream>>>(args);
  else if (per_expert <= 12)
    expert_mma_kernel<T, 2, false><<<grid, kWarps * 32, 0, stream>>>(args);
  else
    expert_mma_kernel<T, 4, false><<<grid, kWarps * 32, 0, stream>>>(args);
}

// One MXFP4 block decoded whole into 32 values: bfloat16 through the byte-permute decoder, float32 through decode8
// (both exact).
__device__ __forceinline__ void decode_block_into(const uint4& code, unsigned scale, __nv_bfloat16* out) {
  uint4* to = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t pairs[4];
    decode_pairs(word_of(code, u), scale_pair_of(scale), pairs);
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

__global__ void clamped_swiglu_kernel(const float* gate_up, float* out, int64_t count, int width, float limit,
                                      float alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, column = i % width;
    const float2 pair = reinterpret_cast<const float2*>(gate_up)[row * width + column];  // gate, linear
    // LibTorch's clamp keeps a NaN, where fminf and fmaxf would drop it.
    const float gate = isnan(pair.x) ? pair.x : fminf(pair.x, limit);
    const float linear = isnan(pair.y) ? pair.y : fminf(fmaxf(pair.y, -limit), limit);
    const float activated = gate * (1.0f / (1.0f + expf(-(gate * alpha))));
    out[i] = (linear + 1.0f) * activated;
  }
}

__device__ __forceinline__ void store_as(void* p, int64_t i, float v, Element e) {
  switch (e) {
    case Element::bf16: static_cast<__nv_bfloat16*>(p)[i] = narrow<__nv_bfloat16>(v); break;
    case Element::f16: static_cast<__half*>(p)[i] = narrow<__half>(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

__global__ void weighted_expert_sum_kernel(const float* experts_out, const void* weights, Element weights_element,
                                           void* out, Element out_element, int64_t count, int k, int width) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / width, column = i % width;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j)
      sum += experts_out[(token * k + j) * width + column] * to_float(weights, token * k + j, weights_element);
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
      (args.ordered_tile != kOrderedTile && args.ordered_tile != kWideOrderedTile))
    return false;
  // A step of a token or two (fewer assignments than experts) is bound by reading the chosen experts' rows, which the
  // CUDA-core kernel keeps more of in flight; its float32 products are within the bfloat16 ones' rounding.
  if (ordered || (args.bf16_products && args.assignments > args.experts_count)) {
    if (args.x_element == Element::bf16)
      launch_mma_for<__nv_bfloat16>(args, stream);
    else if (args.x_element == Element::f32)
      launch_mma_for<float>(args, stream);
    else
      return false;
    return cudaGetLastError() == cudaSuccess;
  }
  switch (args.x_element) {
    case Element::bf16: launch_for<__nv_bfloat16>(args, stream); break;
    case Element::f16: launch_for<__half>(args, stream); break;
    default: launch_for<float>(args, stream); break;
  }
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
  route_top_k_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(logits, element, tokens,
                                                                                        experts, k, chosen, weights);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_clamped_swiglu(const float* gate_up, float* out, int64_t rows, int width, float limit, float alpha,
                           cudaStream_t stream) {
  const int64_t count = rows * width;
  if (count <= 0) return count == 0;
  clamped_swiglu_kernel<<<elementwise_blocks(count), 256, 0, stream>>>(gate_up, out, count, width, limit, alpha);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_weighted_expert_sum(const float* experts_out, const void* weights, Element weights_element, void* out,
                                Element out_element, int64_t tokens, int k, int width, cudaStream_t stream) {
  const int64_t count = tokens * width;
  if (count <= 0 || k <= 0) return count == 0;
  weighted_expert_sum_kernel<<<elementwise_blocks(count), 256, 0, stream>>>(experts_out, weights, weights_element, out,
                                                                           out_element, count, k, width);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
