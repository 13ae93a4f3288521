// The experts of a mixture of experts read straight from MXFP4, each block finding the assignments routed to its
// expert on the device (no host synchronisation, so a decode step can be captured in a CUDA graph) and reading its
// rows once for all of them. Two kernels: float32 products on CUDA cores (float32 models, GPUs without bfloat16 tensor
// cores; up to 256 assignments) and bfloat16 products on tensor cores (any number), further down.
// CUDA cores: one block per (expert, 32 rows). A warp works on 4 rows at once; lane l takes MX block l + 32 i of each
// (16 code bytes, 32 values, one scale), so a warp reads 512 contiguous bytes of a row per step and has 64 bytes a
// lane in flight. Each 8 decoded values of the 4 rows meet each of up to kChunk assignments' 8 inputs in registers, so
// an input is read once for 4 rows.
#include <climits>
#include <cstddef>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lm/kernels/decode_kernels_device.cuh"
#include "lm/kernels/mma_device.cuh"
#include "lm/kernels/moe_kernels_launch.h"
#include "lm/kernels/mxfp4_pairs.h"

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
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
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
    launch(expert_gemv_kernel<T, 4, 1>, grid, dim3(kWarps * 32), 0, stream, args, true);
  else
    launch(expert_gemv_kernel<T, 2, 4>, grid, dim3(kWarps * 32), 0, stream, args, false);
}

// Many assignments on tensor cores, the model in bfloat16: each warp multiplies 16 rows of its expert by 8 * kTiles
// inputs at a time with mma.m16n8k16 (bfloat16 operands, float32 sums), so each decoded weight serves every input of
// the tile for one instruction's share. The products sum over the columns in any order, so the warp takes its k order
// from whole loads: over a span of 4 MX blocks lane (g, t) holds MX block t of rows g and g + 8 (16 code bytes each,
// decoded times the block's scale, exact in bfloat16) and reads the same columns of input g of each tile; step s of a
// block's 8 gives its columns 4s .. 4s + 3 the fragments' k positions 2t, 2t + 1, 2t + 8, 2t + 9, in A and B alike.
// Blocks past a row's end hold zeros in both.
// A block keeps several spans in flight: asynchronous copies (cp.async) fill a ring of stages in shared memory, each
// with a span's inputs (bfloat16, shared by the block's warps) and each lane's codes and scales, while the warps
// multiply the oldest. One span in flight (registers, a barrier a span) left the memory idle between spans at 8
// tokens an expert; at about 2 an expert the decoding's integer instructions, not the memory, bound the kernel
// (docs/benchmarks.md, gpt-oss decode).
constexpr int kSpanBlocks = 4;
constexpr int kSpanPieces = kSpanBlocks * kMxBlock / 8;  // 16-byte pieces of 8 bfloat16 inputs in a span's row
constexpr int kMmaRows = 16;

// Where piece p of token slot `slot` lies in its staged row: the 8 lanes of a quarter warp read pieces 16i + 4t + u
// (t = 0..3) of two slots, which this places in 8 different groups of 4 banks.
__device__ __forceinline__ int staged_position(int slot, int piece) {
  return piece ^ (((piece >> 3) & 1) << 1) ^ (slot & 1);
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

// The 8 codes of a word as 4 bfloat16 pairs (codes 2i and 2i + 1, the low nibble of byte i first, in pair i), exact:
// placed (mxfp4_pairs.h), then scaled. kTwoSteps where any lane of the warp has a scale above 128.
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

// Asynchronous copies into shared memory (at a 32-bit shared address): `bytes` of `size` read from global memory,
// the rest zeros.
__device__ __forceinline__ void copy16_async(uint32_t to, const void* from, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(bytes));
}
__device__ __forceinline__ void copy4_async(uint32_t to, const void* from, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(from), "r"(bytes));
}
__device__ __forceinline__ void copy16_async(uint32_t to, const void* from) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}
__device__ __forceinline__ void copy4_async(uint32_t to, const void* from) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(to), "l"(from));
}
__device__ __forceinline__ uint4 load_shared16(uint32_t at) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
  return v;
}
__device__ __forceinline__ uint32_t load_shared4(uint32_t at) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(at));
  return v;
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's groups of copies are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// One span in shared memory: its inputs, and each warp's lanes' code blocks and scales. A row's scales are 1 byte a
// block at any alignment, so a span's 4 lie in one or two aligned words: scale_words[warp][4 g + j] holds word j % 2
// of row g (j < 2) or row g + 8, copied by lane (g, j).
template <int kTiles>
struct MmaStage {
  uint4 inputs[8 * kTiles][kSpanPieces];
  uint4 codes[kWarps][2][32];  // [warp][rows g, g + 8][lane]
  uint32_t scale_words[kWarps][32];
};

// Spans in flight, as many as fit 48 KB of shared memory with the block's Routed list: a wider tile multiplies more a
// span, so it needs fewer spans ahead.
template <int kTiles>
constexpr int kStages = kTiles == 1 ? 6 : kTiles == 2 ? 5 : kTiles == 4 ? 3 : 2;
template <int kTiles>
constexpr bool fits_static_shared = kStages<kTiles> * sizeof(MmaStage<kTiles>) + sizeof(Routed) <= 48 * 1024;
static_assert(fits_static_shared<1> && fits_static_shared<2> && fits_static_shared<4> && fits_static_shared<8>,
              "a block's static shared memory");

// Where a stage's parts lie, in bytes from its start: a ring of stages is addressed through 32-bit shared addresses,
// each thread's offsets worked out once a pass (recomputing them took about a third of a span's instructions).
template <int kTiles>
struct StageOffsets {
  static constexpr uint32_t size = sizeof(MmaStage<kTiles>);
  static constexpr uint32_t inputs = offsetof(MmaStage<kTiles>, inputs);
  static constexpr uint32_t codes = offsetof(MmaStage<kTiles>, codes);
  static constexpr uint32_t scale_words = offsetof(MmaStage<kTiles>, scale_words);
  static constexpr uint32_t tile = 8 * kSpanPieces * sizeof(uint4);  // one tile's 8 slots of inputs
  static constexpr uint32_t high_codes = 32 * sizeof(uint4);         // rows g + 8 after rows g

  static __device__ __forceinline__ uint32_t input(int slot, int piece) {
    return inputs + static_cast<uint32_t>(slot * kSpanPieces + staged_position(slot, piece)) * sizeof(uint4);
  }
  static __device__ __forceinline__ uint32_t low_codes(int warp, int lane) {
    return codes + static_cast<uint32_t>(2 * warp * 32 + lane) * sizeof(uint4);
  }
  static __device__ __forceinline__ uint32_t scale_word(int warp, int slot) {
    return scale_words + static_cast<uint32_t>(warp * 32 + slot) * sizeof(uint32_t);
  }
};

// The value itself, opaque to the compiler: offsets derived from the thread's index stay in registers instead of
// being worked out again from it at each use.
__device__ __forceinline__ uint32_t kept(uint32_t v) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(v));
  return v;
}

// What a lane reads of a stage: its code blocks, its two scales' words and where its scales lie in them, and input
// piece u of span block t of its slot g in each tile (the same place in every tile, a tile further each).
struct LaneReads {
  uint32_t low_codes, scale_word[2], input[4];
  int scale_shift[2];
};

// One thread's copies of successive spans (taken in order, one a call), its sources a span further each time: the
// thread's input pieces (each tile's), and its lane's two code blocks and scale word. A slot without an input is not
// copied: its columns of the products are never written, and a column of an MMA's product reads only its own column
// of inputs. What lies past a row's end, or past the last scale, is copied as zeros. The spans before any of that
// (all but a row's last, mostly) are copied whole without checks, which took half of the copies' instructions.
template <int kTiles>
struct SpanCopies {
  const __nv_bfloat16* input[kTiles];
  bool has_input[kTiles];              // false: no input in the slot
  int input_columns[kTiles];           // columns of the row from the piece on, at the first span
  uint32_t input_to[kTiles];
  const uint4* codes[2];  // rows g and g + 8
  const uint4* readable;  // an address for the copies of nothing (they read no byte)
  int code_spans;         // spans in which the lane's code blocks are present (none in a warp without rows)
  uint32_t codes_to;
  const uint8_t* scale_word;
  const uint8_t* scale_base;
  int scale_bytes;  // from the lane's first word to the last scale (none in a warp without rows)
  uint32_t scale_to;
  int copied = 0, whole_spans = 0;  // spans copied so far; spans copied whole from the first

  __device__ __forceinline__ void start() {
    whole_spans = min(code_spans, scale_bytes / 4);
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
      if (has_input[i])
        whole_spans = min(whole_spans, (input_columns[i] + kSpanBlocks * kMxBlock - 1) / (kSpanBlocks * kMxBlock));
    whole_spans = static_cast<int>(kept(static_cast<uint32_t>(whole_spans)));
  }

  __device__ __forceinline__ void copy_next(uint32_t stage) {
    if (copied < whole_spans)
      copy_whole(stage);
    else
      copy_checked(stage);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) input[i] += kSpanBlocks * kMxBlock;
    codes[0] += kSpanBlocks, codes[1] += kSpanBlocks;
    scale_word += 4;  // a span's 4 scales of a row: the next word
    ++copied;
  }

  __device__ __forceinline__ void copy_whole(uint32_t stage) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
      if (has_input[i]) copy16_async(stage + input_to[i], input[i]);
    copy16_async(stage + codes_to, codes[0]);
    copy16_async(stage + codes_to + StageOffsets<kTiles>::high_codes, codes[1]);
    copy4_async(stage + scale_to, scale_word);
  }

  __device__ __forceinline__ void copy_checked(uint32_t stage) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      if (!has_input[i]) continue;
      const bool present = input_columns[i] - copied * kSpanBlocks * kMxBlock > 0;
      copy16_async(stage + input_to[i], present ? input[i] : static_cast<const void*>(readable), present ? 16 : 0);
    }
    const bool codes_present = copied < code_spans;
    copy16_async(stage + codes_to, codes_present ? codes[0] : readable, codes_present ? 16 : 0);
    copy16_async(stage + codes_to + StageOffsets<kTiles>::high_codes, codes_present ? codes[1] : readable,
                 codes_present ? 16 : 0);
    const int scale_bytes_left = scale_bytes - 4 * copied;
    const bool scales_present = scale_bytes_left > 0;  // a second word past the last scale is not needed
    copy4_async(stage + scale_to, scales_present ? scale_word : scale_base,
                scales_present ? min(scale_bytes_left, 4) : 0);
  }
};

// Steps 2u and 2u + 1 of the lane's span block: code word u of rows g and g + 8 as A fragments, times each tile's
// staged inputs (piece u of span block t).
template <int kTiles, bool kTwoSteps>
__device__ __forceinline__ void mma_word(const uint4& low_code, const uint4& high_code, const PairScale& low_scale,
                                         const PairScale& high_scale, int u, uint32_t stage, const LaneReads& reads,
                                         float (&acc)[kTiles][4]) {
  uint32_t low[4], high[4];
  decode_pairs<kTwoSteps>(word_of(low_code, u), low_scale, low);
  decode_pairs<kTwoSteps>(word_of(high_code, u), high_scale, high);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const uint4 in = load_shared16(stage + reads.input[u] + j * StageOffsets<kTiles>::tile);
    const uint32_t first[4] = {low[0], high[0], low[1], high[1]}, second[4] = {low[2], high[2], low[3], high[3]};
    mma<__nv_bfloat16>(acc[j], first, in.x, in.y);
    mma<__nv_bfloat16>(acc[j], second, in.z, in.w);
  }
}

// A lane's scale, `shift` bits into its copied word.
__device__ __forceinline__ unsigned scale_from(uint32_t word, int shift) { return (word >> shift) & 0xFFu; }

// One span of the lane's rows from a stage: its scales, then its 4 words of codes a row against each tile's inputs.
template <int kTiles>
__device__ __forceinline__ void multiply_span(uint32_t stage, const LaneReads& reads, float (&acc)[kTiles][4]) {
  const uint4 low_code = load_shared16(stage + reads.low_codes);
  const uint4 high_code = load_shared16(stage + reads.low_codes + StageOffsets<kTiles>::high_codes);
  // A block past the row's end: zero codes (and zero inputs) whatever its scale.
  const unsigned low_bits = scale_from(load_shared4(stage + reads.scale_word[0]), reads.scale_shift[0]);
  const unsigned high_bits = scale_from(load_shared4(stage + reads.scale_word[1]), reads.scale_shift[1]);
  // The scales are made inside each branch: the common one (no scale of the warp's above 128) needs only the first
  // factor of each.
  with_two_steps(__any_sync(0xFFFFFFFFu, takes_two_steps(max(low_bits, high_bits))), [&](auto two_steps) {
    constexpr bool kTwoSteps = decltype(two_steps)::value;
    const PairScale low_scale = kTwoSteps ? pair_scale_of(low_bits) : one_step_scale(low_bits);
    const PairScale high_scale = kTwoSteps ? pair_scale_of(high_bits) : one_step_scale(high_bits);
#pragma unroll
    for (int u = 0; u < 4; ++u)
      mma_word<kTiles, kTwoSteps>(low_code, high_code, low_scale, high_scale, u, stage, reads, acc);
  });
}

// The 16 rows of its expert a warp multiplies (from row0) and where lane (g, t)'s part of them lies: rows g and g + 8
// (rows past the end read the last row again and are never written), their code blocks, and their scales. A row's 4
// scales of span s lie in the one or two aligned words from scale_base + (its first scale & ~3) + 4 s: lane (g, t)
// copies word t % 2 of row g (t < 2) or g + 8 (copied_word + 4 s). scale_base is a.scales rounded down to 4 bytes (a
// view's scales may start anywhere; the bytes before them are in the same allocation). No byte past the scales is
// read (launch takes fewer than 2^31 - 64 of them).
struct LaneRows {
  int row0;
  bool has_rows;  // a warp without rows still copies inputs and meets the barriers
  int64_t low_row, high_row;  // rows g and g + 8 among all experts' rows
  const uint4* low_codes;
  const uint4* high_codes;
  int misaligned;  // a.scales' bytes past an aligned word
  const uint8_t* scale_base;
  int scales_end;   // bytes from scale_base to the end of the scales
  int copied_word;  // the lane's word of the first span, in bytes from scale_base
};

__device__ __forceinline__ LaneRows lane_rows(const ExpertGemvArgs& a, int expert, int warp, int g, int t) {
  LaneRows r;
  r.row0 = static_cast<int>(kept((blockIdx.y * kWarps + warp) * kMmaRows));
  r.has_rows = r.row0 < a.rows;
  const int blocks_per_row = a.cols / kMxBlock;
  r.low_row = static_cast<int64_t>(expert) * a.rows + min(r.row0 + g, a.rows - 1);
  r.high_row = static_cast<int64_t>(expert) * a.rows + min(r.row0 + g + 8, a.rows - 1);
  r.low_codes = reinterpret_cast<const uint4*>(a.blocks) + r.low_row * blocks_per_row;
  r.high_codes = reinterpret_cast<const uint4*>(a.blocks) + r.high_row * blocks_per_row;
  r.misaligned = static_cast<int>(reinterpret_cast<uintptr_t>(a.scales) & 3);
  r.scale_base = a.scales - r.misaligned;
  r.scales_end = r.misaligned + a.experts_count * a.rows * blocks_per_row;
  r.copied_word =
      ((r.misaligned + static_cast<int>((t < 2 ? r.low_row : r.high_row) * blocks_per_row)) & ~3) + 4 * (t & 1);
  return r;
}

// Where lane (g, t) of `warp` reads a stage: its own copied code blocks, its scale of row g (r = 0) and g + 8 in word
// scale_word[r] of its warp's, scale_shift[r] bits in, and its input pieces.
template <int kTiles>
__device__ __forceinline__ LaneReads lane_reads(const ExpertGemvArgs& a, const LaneRows& rows, int warp, int lane, int g,
                                                int t) {
  using Offsets = StageOffsets<kTiles>;
  const int blocks_per_row = a.cols / kMxBlock;
  LaneReads reads;
  reads.low_codes = kept(Offsets::low_codes(warp, lane));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row_at = rows.misaligned + static_cast<int>((r == 0 ? rows.low_row : rows.high_row) * blocks_per_row);
    reads.scale_word[r] = kept(Offsets::scale_word(warp, 4 * g + 2 * r + (((row_at & 3) + t) >> 2)));
    reads.scale_shift[r] = static_cast<int>(kept(8 * ((row_at + t) & 3)));
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) reads.input[u] = kept(Offsets::input(g, 4 * t + u));
  return reads;
}

// A thread's copies for the pass over assignments first .. first + 8 kTiles of the block's n: thread i copies pieces
// i, i + 128, ... of each span's inputs (slot id / kSpanPieces, piece id % kSpanPieces), and its lane's code blocks
// and scale word.
template <int kTiles>
__device__ __forceinline__ SpanCopies<kTiles> span_copies(const ExpertGemvArgs& a, const LaneRows& rows,
                                                          const LaneReads& reads, const int* mine, int first, int n,
                                                          int warp, int lane, int t) {
  using Offsets = StageOffsets<kTiles>;
  const auto* x = static_cast<const __nv_bfloat16*>(a.x);
  const int blocks_per_row = a.cols / kMxBlock;
  SpanCopies<kTiles> copies;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int id = threadIdx.x + i * kWarps * 32, slot = id / kSpanPieces, piece = id % kSpanPieces;
    copies.has_input[i] = first + slot < n;
    const int64_t row = copies.has_input[i] ? mine[first + slot] / a.x_divisor : 0;
    copies.input[i] = x + row * a.x_row_stride + piece * 8;
    copies.input_columns[i] = a.cols - piece * 8;
    copies.input_to[i] = kept(Offsets::input(slot, piece));
  }
  copies.codes[0] = rows.low_codes + t, copies.codes[1] = rows.high_codes + t, copies.readable = rows.low_codes;
  copies.code_spans = rows.has_rows ? (blocks_per_row - t + kSpanBlocks - 1) / kSpanBlocks : 0;
  copies.codes_to = reads.low_codes;
  copies.scale_word = rows.scale_base + rows.copied_word, copies.scale_base = rows.scale_base;
  copies.scale_bytes = rows.has_rows ? rows.scales_end - rows.copied_word : 0;
  copies.scale_to = kept(Offsets::scale_word(warp, lane));
  copies.start();
  return copies;
}

// Lane (g, t) holds rows g and g + 8 of inputs 2t and 2t + 1 of each tile: each with its expert's bias, to the
// assignment's row of the output.
template <int kTiles>
__device__ __forceinline__ void store_products(const ExpertGemvArgs& a, int expert, const LaneRows& rows,
                                               const int* mine, int first, int n, int g, int t,
                                               const float (&acc)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = rows.row0 + g + (i >= 2 ? 8 : 0), slot = first + 8 * j + 2 * t + i % 2;
      if (row >= a.rows || slot >= n) continue;
      const int64_t row_index = static_cast<int64_t>(expert) * a.rows + row;
      const float bias = a.bias ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
      a.out[static_cast<int64_t>(mine[slot]) * a.rows + row] = acc[j][i] + bias;
    }
}

// One tile's blocks fit 5 to an SM by shared memory; registers are held to that too.
template <int kTiles, bool kOrdered>
__global__ void __launch_bounds__(kWarps * 32, kTiles == 1 ? 5 : 1) expert_mma_kernel(ExpertGemvArgs a,
                                                                                     bool by_assignment) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  using Offsets = StageOffsets<kTiles>;
  constexpr int stages = kStages<kTiles>;
  __shared__ Routed routed;
  __shared__ MmaStage<kTiles> ring[stages];
  int expert = 0;
  const int n = kOrdered ? ordered_assignments(a, 8 * kTiles, expert, routed)
                         : gather_assignments(a, by_assignment, expert, routed);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const LaneRows rows = lane_rows(a, expert, warp, g, t);
  const LaneReads reads = lane_reads<kTiles>(a, rows, warp, lane, g, t);
  const int spans = (a.cols / kMxBlock + kSpanBlocks - 1) / kSpanBlocks;
  const uint32_t ring_at = kept(static_cast<uint32_t>(__cvta_generic_to_shared(ring)));
  for (int first = 0; first < n; first += 8 * kTiles) {
    SpanCopies<kTiles> copies = span_copies<kTiles>(a, rows, reads, routed.mine, first, n, warp, lane, t);
    __syncthreads();  // the previous pass has read its last stage
#pragma unroll
    for (int span = 0; span < stages - 1; ++span) {
      if (span < spans) copies.copy_next(ring_at + span * Offsets::size);
      commit_copies();
    }
    float acc[kTiles][4] = {};
    // The ring's stage multiplied now and the one refilled, in bytes from its start.
    uint32_t oldest = 0, next = (stages - 1) * Offsets::size;
    for (int span = 0; span < spans; ++span) {
      wait_copies<stages - 2>();  // this span's copies (this thread's) have landed
      __syncthreads();            // and every thread's; the stage refilled next was read by all
      if (span + stages - 1 < spans) copies.copy_next(ring_at + next);
      commit_copies();            // an empty group past the last span keeps the count
      const uint32_t stage = ring_at + oldest;
      oldest = oldest + Offsets::size == stages * Offsets::size ? 0 : oldest + Offsets::size;
      next = next + Offsets::size == stages * Offsets::size ? 0 : next + Offsets::size;
      if (rows.has_rows) multiply_span<kTiles>(stage, reads, acc);
    }
    wait_copies<0>();
    if (rows.has_rows) store_products<kTiles>(a, expert, rows, routed.mine, first, n, g, t, acc);
  }
#endif
}

// On tensor cores. Ordered assignments (a prefill's many): a block per tile of args.ordered_tile of an expert's, at
// most assignments / tile + experts tiles. A step of a token or two (no more assignments than experts): a block per
// assignment, the first of each expert standing for it, so only the chosen experts' rows are read. Otherwise by
// expert: 8 inputs a warp's pass when experts have a few each, 16 or 32 when more tokens share an expert, so that
// most experts' rows are read once.
void launch_mma(const ExpertGemvArgs& args, cudaStream_t stream) {
  const int rows = (args.rows + kWarps * kMmaRows - 1) / (kWarps * kMmaRows);
  if (args.order) {
    const int tile = args.ordered_tile;
    const dim3 grid((args.assignments + tile - 1) / tile + args.experts_count, rows);
    if (tile == kWideOrderedTile)
      launch(expert_mma_kernel<kWideOrderedTile / 8, true>, grid, dim3(kWarps * 32), 0, stream, args, false);
    else
      launch(expert_mma_kernel<kOrderedTile / 8, true>, grid, dim3(kWarps * 32), 0, stream, args, false);
    return;
  }
  if (args.assignments <= args.experts_count) {
    launch(expert_mma_kernel<1, false>, dim3(args.assignments, rows), dim3(kWarps * 32), 0, stream, args, true);
    return;
  }
  const int per_expert = (args.assignments + args.experts_count - 1) / args.experts_count;
  const dim3 grid(args.experts_count, rows);
  if (per_expert <= 4)
    launch(expert_mma_kernel<1, false>, grid, dim3(kWarps * 32), 0, stream, args, false);
  else if (per_expert <= 12)
    launch(expert_mma_kernel<2, false>, grid, dim3(kWarps * 32), 0, stream, args, false);
  else
    launch(expert_mma_kernel<4, false>, grid, dim3(kWarps * 32), 0, stream, args, false);
}

// One MXFP4 block decoded whole into 32 values: bfloat16 through the byte-permute decoder, float32 through decode8
// (both exact).
__device__ __forceinline__ void decode_block_into(const uint4& code, unsigned scale, __nv_bfloat16* out) {
  uint4* to = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t pairs[4];
    with_two_steps(takes_two_steps(scale), [&](auto two_steps) {
      decode_pairs<decltype(two_steps)::value>(word_of(code, u), pair_scale_of(scale), pairs);
    });
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

__device__ __forceinline__ void store_as(void* p, int64_t i, float v, Element e) {
  switch (e) {
    case Element::bf16: static_cast<__nv_bfloat16*>(p)[i] = narrow<__nv_bfloat16>(v); break;
    case Element::f16: static_cast<__half*>(p)[i] = narrow<__half>(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

__global__ void clamped_swiglu_kernel(const float* gate_up, void* out, Element out_element, int64_t count, int width,
                                      float limit, float alpha) {
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, column = i % width;
    const float2 pair = reinterpret_cast<const float2*>(gate_up)[row * width + column];  // gate, linear
    // LibTorch's clamp keeps a NaN, where fminf and fmaxf would drop it.
    const float gate = isnan(pair.x) ? pair.x : fminf(pair.x, limit);
    const float linear = isnan(pair.y) ? pair.y : fminf(fmaxf(pair.y, -limit), limit);
    const float activated = gate * (1.0f / (1.0f + expf(-(gate * alpha))));
    store_as(out, i, (linear + 1.0f) * activated, out_element);
  }
}

// v as the element type e holds it (rounded to nearest even), as a float.
__device__ __forceinline__ float rounded_as(float v, Element e) {
  switch (e) {
    case Element::bf16: return widen(narrow<__nv_bfloat16>(v));
    case Element::f16: return widen(narrow<__half>(v));
    default: return v;
  }
}

__global__ void weighted_expert_sum_kernel(const float* experts_out, const void* weights, Element weights_element,
                                           const void* residual, void* out, Element out_element, int64_t count, int k,
                                           int width) {
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / width, column = i % width;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j)
      sum += experts_out[(token * k + j) * width + column] * to_float(weights, token * k + j, weights_element);
    // LibTorch's residual + sum: the sum rounded to the element type, the addition in float32, rounded again.
    if (residual) sum = rounded_as(sum, out_element) + to_float(residual, i, out_element);
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
  wait_for_earlier_kernels();  // launched early (decode_kernels_device.cuh): every input is an earlier kernel's
  let_later_kernels_start();
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
      (args.ordered_tile != kOrderedTile && args.ordered_tile != kWideOrderedTile) ||
      static_cast<int64_t>(args.experts_count) * args.rows * (args.cols / 32) > INT_MAX - 64)
    return false;
  if (args.bf16_products) {  // an order comes only with bfloat16 products
    if (args.x_element != Element::bf16) return false;
    launch_mma(args, stream);
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
  launch(route_top_k_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * 32), 0, stream, logits, element,
         tokens, experts, k, chosen, weights);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_clamped_swiglu(const float* gate_up, void* out, Element out_element, int64_t rows, int width, float limit,
                           float alpha, cudaStream_t stream) {
  const int64_t count = rows * width;
  if (count <= 0) return count == 0;
  launch(clamped_swiglu_kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, gate_up, out, out_element, count,
         width, limit, alpha);
  return cudaGetLastError() == cudaSuccess;
}

bool launch_weighted_expert_sum(const float* experts_out, const void* weights, Element weights_element,
                                const void* residual, void* out, Element out_element, int64_t tokens, int k, int width,
                                cudaStream_t stream) {
  const int64_t count = tokens * width;
  if (count <= 0 || k <= 0) return count == 0;
  launch(weighted_expert_sum_kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, experts_out, weights,
         weights_element, residual, out, out_element, count, k, width);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace crucible::lm::kernels
