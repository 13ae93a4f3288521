// The experts' products in bfloat16 on tensor cores: the kernel and its launch.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "lm/kernels/async_copy.cuh"
#include "lm/kernels/expert_span.cuh"

namespace crucible::lm::kernels {
namespace {

// Many assignments on tensor cores, the model in bfloat16 (the products as expert_span.cuh describes): each warp
// multiplies 16 rows of its expert by 8 * kTiles inputs at a time, lane (g, t) reading input g of each tile, so each
// decoded weight serves every input of the tile for one instruction's share.
// A block keeps several spans in flight: asynchronous copies (cp.async) fill a ring of stages in shared memory, each
// with a span's inputs (bfloat16, shared by the block's warps) and each lane's codes and scales, while the warps
// multiply the oldest. One span in flight (registers, a barrier a span) left the memory idle between spans at 8
// tokens an expert; at about 2 an expert the decoding's integer instructions, not the memory, bound the kernel
// (docs/benchmarks.md, gpt-oss decode).

// Where piece p of token slot `slot` lies in its staged row: the 8 lanes of a quarter warp read pieces 16i + 4t + u
// (t = 0..3) of two slots, which this places in 8 different groups of 4 banks.
__device__ __forceinline__ int staged_position(int slot, int piece) {
  return piece ^ (((piece >> 3) & 1) << 1) ^ (slot & 1);
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

  // The next span's copies: its inputs, its weights, or both. The weights may go ahead on a second object starting
  // alike: no earlier kernel writes them, where the inputs wait for the kernel before to finish them.
  template <bool kInputs = true, bool kWeights = true>
  __device__ __forceinline__ void copy_next(uint32_t stage) {
    if (copied < whole_spans) {
      if (kInputs) copy_inputs<true>(stage);
      if (kWeights) copy_weights<true>(stage);
    } else {
      if (kInputs) copy_inputs<false>(stage);
      if (kWeights) copy_weights<false>(stage);
    }
    advance();
  }

  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) input[i] += kSpanBlocks * kMxBlock;
    codes[0] += kSpanBlocks, codes[1] += kSpanBlocks;
    scale_word += 4;  // a span's 4 scales of a row: the next word
    ++copied;
  }

  template <bool kWhole>
  __device__ __forceinline__ void copy_inputs(uint32_t stage) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      if (!has_input[i]) continue;
      if (kWhole) {
        copy16_async(stage + input_to[i], input[i]);
      } else {
        const bool present = input_columns[i] - copied * kSpanBlocks * kMxBlock > 0;
        copy16_async(stage + input_to[i], present ? input[i] : static_cast<const void*>(readable), present ? 16 : 0);
      }
    }
  }

  template <bool kWhole>
  __device__ __forceinline__ void copy_weights(uint32_t stage) {
    if (kWhole) {
      copy16_async(stage + codes_to, codes[0]);
      copy16_async(stage + codes_to + StageOffsets<kTiles>::high_codes, codes[1]);
      copy4_async(stage + scale_to, scale_word);
      return;
    }
    const bool codes_present = copied < code_spans;
    copy16_async(stage + codes_to, codes_present ? codes[0] : readable, codes_present ? 16 : 0);
    copy16_async(stage + codes_to + StageOffsets<kTiles>::high_codes, codes_present ? codes[1] : readable,
                 codes_present ? 16 : 0);
    const int scale_bytes_left = scale_bytes - 4 * copied;
    const bool scales_present = scale_bytes_left > 0;  // a second word past the last scale is not needed
    copy4_async(stage + scale_to, scales_present ? static_cast<const void*>(scale_word) : readable,
                scales_present ? min(scale_bytes_left, 4) : 0);
  }
};

// One span of the lane's rows from a stage: its scales, then its 4 words of codes a row against each tile's inputs.
template <int kTiles, int kChains>
__device__ __forceinline__ void multiply_span(uint32_t stage, const LaneReads& reads,
                                              float (&acc)[kChains][kTiles][4]) {
  const uint4 low_code = load_shared16(stage + reads.low_codes);
  const uint4 high_code = load_shared16(stage + reads.low_codes + StageOffsets<kTiles>::high_codes);
  // A block past the row's end: zero codes (and zero inputs) whatever its scale.
  const unsigned low_bits = scale_from(load_shared4(stage + reads.scale_word[0]), reads.scale_shift[0]);
  const unsigned high_bits = scale_from(load_shared4(stage + reads.scale_word[1]), reads.scale_shift[1]);
  multiply_code_blocks<kTiles, kChains>(
      low_code, high_code, low_bits, high_bits,
      [&](int u, int j) { return load_shared16(stage + reads.input[u] + j * StageOffsets<kTiles>::tile); }, acc);
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
  copies.scale_word = rows.scale_base + rows.copied_word;
  copies.scale_bytes = rows.has_rows ? rows.scales_end - rows.copied_word : 0;
  copies.scale_to = kept(Offsets::scale_word(warp, lane));
  copies.start();
  return copies;
}

// Sum i of a lane's tile j (row g + 8 (i >= 2), input 2t + i % 2), with its expert's bias.
template <int kTiles, int kChains>
__device__ __forceinline__ float product_of(const ExpertGemvArgs& a, int expert, int row, int j, int i,
                                            const float (&acc)[kChains][kTiles][4]) {
  const int64_t row_index = static_cast<int64_t>(expert) * a.rows + row;
  const float bias = a.bias ? to_float(a.bias, row_index, a.bias_element) : 0.0f;
  return chains_summed<kTiles, kChains>(acc, j, i) + bias;
}

// Lane (g, t) holds rows g and g + 8 of inputs 2t and 2t + 1 of each tile: each with its expert's bias, stored by
// store_product.
template <int kTiles, int kChains>
__device__ __forceinline__ void store_products(const ExpertGemvArgs& a, int expert, const LaneRows& rows,
                                               const int* mine, int first, int n, int g, int t,
                                               const float (&acc)[kChains][kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = rows.row0 + g + (i >= 2 ? 8 : 0), slot = first + 8 * j + 2 * t + i % 2;
      const bool stored = row < a.rows && slot < n;
      const float product = stored ? product_of<kTiles, kChains>(a, expert, row, j, i, acc) : 0.0f;
      store_product(a, stored ? mine[slot] : 0, row, g, stored, product);
    }
}

// A summed block's assignment: its own (x), even where another block's chose the same expert (each sums its own).
// None where the expert is out of range.
__device__ __forceinline__ int own_assignment(const ExpertGemvArgs& a, int& expert, Routed& routed) {
  expert = static_cast<int>(a.experts[blockIdx.x]);
  if (threadIdx.x == 0) routed.mine[0] = static_cast<int>(blockIdx.x);
  __syncthreads();
  return expert >= 0 && expert < a.experts_count ? 1 : 0;
}

// The summed epilogue (kSummed: one token, a block per assignment, the token's k blocks of a row block in one
// cluster): each block's 64 sums in its shared memory, read by the cluster's first block.
__device__ __forceinline__ float* summed_part() {
  __shared__ float part[kWarps * kMmaRows];
  return part;
}

// Column 0 (the block's one assignment) of lane (g, 0)'s rows into the block's part; NaN where the block has no
// assignment (its expert out of range).
template <int kChains>
__device__ __forceinline__ void store_part(const ExpertGemvArgs& a, int expert, const LaneRows& rows, int warp, int n,
                                           int g, int t, const float (&acc)[kChains][1][4]) {
  if (t != 0 || !rows.has_rows) return;
#pragma unroll
  for (int i = 0; i < 4; i += 2) {
    const int row = rows.row0 + g + (i >= 2 ? 8 : 0);
    if (row < a.rows)
      summed_part()[warp * kMmaRows + g + (i >= 2 ? 8 : 0)] =
          n > 0 ? product_of<1, kChains>(a, expert, row, 0, i, acc) : __int_as_float(0x7FC00000);
  }
}

// The cluster's first block weights and sums the k blocks' parts of each row in the order of the assignments, adds
// the residual and stores the row, as launch_weighted_expert_sum does.
__device__ __forceinline__ void sum_parts_in_cluster(const ExpertGemvArgs& a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int row = blockIdx.y * kWarps * kMmaRows + threadIdx.x, k = static_cast<int>(gridDim.x);
  const bool sums = cluster.block_rank() == 0 && threadIdx.x < kWarps * kMmaRows && row < a.rows;
  // The weights and the residual (earlier kernels' too) loaded while the cluster's blocks finish.
  float product[kMaxRouteK], weight[kMaxRouteK], residual = 0.0f;
  if (sums) {
#pragma unroll
    for (int j = 0; j < kMaxRouteK; ++j)
      if (j < k) weight[j] = to_float(a.weights, j, a.weights_element);
    if (a.residual) residual = to_float(a.residual, row, a.summed_element);
  }
  cluster.sync();  // every block's part is written
  if (sums) {
#pragma unroll
    for (int j = 0; j < kMaxRouteK; ++j)
      if (j < k) product[j] = *cluster.map_shared_rank(summed_part() + threadIdx.x, j);
    float sum = weighted_sum_of(product, weight, k);
    if (a.residual) sum = plus_residual(sum, residual, a.summed_element);
    store_as(a.summed, row, sum, a.summed_element);
  }
  cluster.sync();  // the first block has read every part: their blocks may end
#endif
}

// One tile's blocks fit 5 to an SM by shared memory; registers are held to that too.
template <int kTiles, bool kOrdered, int kChains = 1, bool kSummed = false>
__global__ void __launch_bounds__(kWarps * 32, kTiles == 1 ? 5 : 1) expert_mma_kernel(ExpertGemvArgs a,
                                                                                     bool by_assignment) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // Launched early (decode_kernels_device.cuh): every input is an earlier kernel's. A summed block first finds its
  // expert and copies its first spans' weights, then waits for the kernel before to finish its inputs (its experts
  // were chosen before that kernel started: expert_gemv_summed).
  if constexpr (!kSummed) {
    wait_for_earlier_kernels();
    let_later_kernels_start();
  }
  using Offsets = StageOffsets<kTiles>;
  constexpr int stages = kStages<kTiles>;
  __shared__ Routed routed;
  __shared__ MmaStage<kTiles> ring[stages];
  int expert = 0;
  const int n = kSummed  ? own_assignment(a, expert, routed)
                : kOrdered ? ordered_assignments(a, 8 * kTiles, expert, routed)
                           : gather_assignments(a, by_assignment, expert, routed);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const LaneRows rows = lane_rows(a, expert, warp, g, t);
  const LaneReads reads = lane_reads<kTiles>(a, rows, warp, lane, g, t);
  const int spans = (a.cols / kMxBlock + kSpanBlocks - 1) / kSpanBlocks;
  const uint32_t ring_at = kept(shared_address(ring));
  for (int first = 0; first < n; first += 8 * kTiles) {
    SpanCopies<kTiles> copies = span_copies<kTiles>(a, rows, reads, routed.mine, first, n, warp, lane, t);
    __syncthreads();  // the previous pass has read its last stage
    if constexpr (kSummed) {
      SpanCopies<kTiles> weights = copies;
#pragma unroll
      for (int span = 0; span < stages - 1; ++span)
        if (span < spans) weights.template copy_next<false, true>(ring_at + span * Offsets::size);
      commit_copies();  // a group before the first span's: waited for with it
      wait_for_earlier_kernels();
      let_later_kernels_start();
    }
#pragma unroll
    for (int span = 0; span < stages - 1; ++span) {
      if (span < spans) {
        if constexpr (kSummed)
          copies.template copy_next<true, false>(ring_at + span * Offsets::size);
        else
          copies.copy_next(ring_at + span * Offsets::size);
      }
      commit_copies();
    }
    float acc[kChains][kTiles][4] = {};
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
      if (rows.has_rows) multiply_span<kTiles, kChains>(stage, reads, acc);
    }
    wait_copies<0>();
    if constexpr (kSummed)
      store_part<kChains>(a, expert, rows, warp, n, g, t, acc);
    else if (rows.has_rows)
      store_products<kTiles, kChains>(a, expert, rows, routed.mine, first, n, g, t, acc);
  }
  if constexpr (kSummed) {
    wait_for_earlier_kernels();  // where no pass waited: the output is written only after it
    if (n == 0) store_part<kChains>(a, expert, rows, warp, n, g, t, {});
    sum_parts_in_cluster(a);
  }
#endif
}

}  // namespace

bool summed_epilogue_built() {
  return has_early_launch_code(reinterpret_cast<const void*>(expert_mma_kernel<1, false, 4, true>));
}

// On tensor cores. One token's first projection (every assignment reading x's row 0): a warp per 16 rows of an
// assignment (expert_warps.cu). Ordered assignments (a prefill's many): a block per tile of args.ordered_tile of an
// expert's, at most assignments / tile + experts tiles. A step of a token or two (no more assignments than experts):
// a block per assignment, the first of each expert standing for it, so only the chosen experts' rows are read.
// Otherwise by expert: 8 inputs a warp's pass when experts have a few each, 16 or 32 when more tokens share an
// expert, so that most experts' rows are read once.
void launch_expert_mma(const ExpertGemvArgs& args, cudaStream_t stream) {
  if (expert_warps_take(args)) {
    launch_expert_warps(args, stream);
    return;
  }
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
  // A one-tile pass has a single chain of 8 MMAs a span into one tile's sums: at a token an expert its few warps
  // wait on each MMA's result (Nsight Compute's "wait" stall, the largest), so it sums into 4 chains (2% more tok/s
  // at batch 1; the same at batch 64). CRUCIBLE_MOE_CHAINS=1 keeps one.
  static const bool one_chain = [] {
    const char* value = std::getenv("CRUCIBLE_MOE_CHAINS");
    return value && std::atoi(value) == 1;
  }();
  const auto one_tile = one_chain ? expert_mma_kernel<1, false, 1> : expert_mma_kernel<1, false, 4>;
  if (args.summed) {  // one token: launch_expert_gemv checked that a cluster takes its assignments
    const auto summed = one_chain ? expert_mma_kernel<1, false, 1, true> : expert_mma_kernel<1, false, 4, true>;
    launch_clustered(summed, dim3(args.assignments, rows), dim3(kWarps * 32), args.assignments, 0, stream, args, true);
    return;
  }
  if (args.assignments <= args.experts_count) {
    launch(one_tile, dim3(args.assignments, rows), dim3(kWarps * 32), 0, stream, args, true);
    return;
  }
  const int per_expert = (args.assignments + args.experts_count - 1) / args.experts_count;
  const dim3 grid(args.experts_count, rows);
  if (per_expert <= 4)
    launch(one_tile, grid, dim3(kWarps * 32), 0, stream, args, false);
  else if (per_expert <= 12)
    launch(expert_mma_kernel<2, false>, grid, dim3(kWarps * 32), 0, stream, args, false);
  else
    launch(expert_mma_kernel<4, false>, grid, dim3(kWarps * 32), 0, stream, args, false);
}

}  // namespace crucible::lm::kernels
