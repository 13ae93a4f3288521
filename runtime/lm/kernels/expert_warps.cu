// One token's first expert projection in bfloat16 on tensor cores: each warp multiplies 16 rows of one assignment's
// expert by the token's row on its own (the products as expert_span.cuh describes, the same MMAs in the same order as
// expert_mma.cu's blocks, so the same bits). Its lanes copy their code blocks and scale words into their own ring of
// stages in shared memory and read the input through L1: no barrier a span, since a lane reads only what it copied.
// On compute capability 9.0, where the warp's 16 rows are whole and the codes and scales 16-byte aligned, bulk copies
// bring each row's codes 4 spans at a time instead (bulk_copy.cuh), and the lanes read theirs from there.
// In a gpt-oss-120b decode step the blocks of expert_mma.cu (4 warps over 64 rows, a barrier a span, 2-3 blocks an
// SM) took 23.5 µs a layer for this projection, the warps' rings 18.7-21 (docs/benchmarks.md, gpt-oss decode). The
// second projection stays on those blocks, whose clusters start while this kernel runs.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "lm/kernels/async_copy.cuh"
#include "lm/kernels/bulk_copy.cuh"
#include "lm/kernels/expert_span.cuh"

namespace crucible::lm::kernels {
namespace {

// Spans in flight a lane: 3 to 5 measured alike in a chain of both projections, 8 slower by 8 µs a layer.
constexpr int kStages = 3;
// A lane's share of a stage: its two code blocks (rows g and g + 8) and the aligned words holding their scales.
constexpr uint32_t kStageBytesPerLane = 2 * 16 + 2 * 4;

// Where lane (g, t) reads its pieces of the token's row: 4 a span, zeros past the row's end (as its codes are).
struct LaneInput {
  const uint4* input;  // the lane's 4 pieces of span 0; a span is kSpanPieces pieces further
  int blocks_per_row, spans;

  __device__ __forceinline__ bool present(int span, int t) const { return kSpanBlocks * span + t < blocks_per_row; }

  __device__ __forceinline__ void load_input(int span, int t, uint4 (&in)[4]) const {
    const bool here = present(span, t);
#pragma unroll
    for (int u = 0; u < 4; ++u) in[u] = here ? __ldg(input + span * kSpanPieces + u) : make_uint4(0, 0, 0, 0);
  }
};

__device__ __forceinline__ LaneInput lane_input(const ExpertGemvArgs& a, int assignment) {
  LaneInput in;
  in.blocks_per_row = a.cols / kMxBlock;
  in.spans = (in.blocks_per_row + kSpanBlocks - 1) / kSpanBlocks;
  const int64_t x_row = assignment / a.x_divisor;
  in.input = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + x_row * a.x_row_stride) +
             4 * (threadIdx.x % 4);
  return in;
}

// Where lane (g, t) of a warp on rows row0.. of `expert` reads its codes and scales, and where its copies go.
struct LaneSpans : LaneInput {
  const uint4* low_codes;  // the lane's block of span 0 in row g; a span is kSpanBlocks blocks further
  const uint4* high_codes;
  const uint8_t* scale_base;  // a.scales rounded down to 4 bytes (the bytes before them are in the same allocation)
  int low_word, high_word;    // the words holding the lane's scales of span 0, in bytes from scale_base
  int scale_shift[2];
  int scales_end;  // bytes from scale_base to the end of the scales: none past it is read
  uint32_t low_to, high_to, words_to, stage_stride;  // shared addresses of stage 0, and a stage's size

  // The lane's copies of `span` into `stage`, zeros past its row's end.
  __device__ __forceinline__ void copy(int span, int stage, int t) const {
    const bool here = present(span, t);
    const uint32_t at = stage * stage_stride;
    copy16_async(low_to + at, here ? low_codes + kSpanBlocks * span : low_codes, here ? 16 : 0);
    copy16_async(high_to + at, here ? high_codes + kSpanBlocks * span : low_codes, here ? 16 : 0);
    const int low = low_word + 4 * span, high = high_word + 4 * span;
    copy4_async(words_to + at, scale_base + (here ? low : 0), here ? min(4, scales_end - low) : 0);
    copy4_async(words_to + 4 + at, scale_base + (here ? high : 0), here ? min(4, scales_end - high) : 0);
  }
};

__device__ __forceinline__ LaneSpans lane_spans(const ExpertGemvArgs& a, int expert, int assignment, int row0,
                                                uint32_t ring_at) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  LaneSpans s;
  static_cast<LaneInput&>(s) = lane_input(a, assignment);
  const int64_t low_row = static_cast<int64_t>(expert) * a.rows + min(row0 + g, a.rows - 1);
  const int64_t high_row = static_cast<int64_t>(expert) * a.rows + min(row0 + g + 8, a.rows - 1);
  s.low_codes = reinterpret_cast<const uint4*>(a.blocks) + low_row * s.blocks_per_row + t;
  s.high_codes = reinterpret_cast<const uint4*>(a.blocks) + high_row * s.blocks_per_row + t;
  const int misaligned = static_cast<int>(reinterpret_cast<uintptr_t>(a.scales) & 3);
  s.scale_base = a.scales - misaligned;
  s.scales_end = misaligned + a.experts_count * a.rows * s.blocks_per_row;
  const int low_at = misaligned + static_cast<int>(low_row * s.blocks_per_row) + t;
  const int high_at = misaligned + static_cast<int>(high_row * s.blocks_per_row) + t;
  s.low_word = low_at & ~3, s.high_word = high_at & ~3;
  s.scale_shift[0] = 8 * (low_at & 3), s.scale_shift[1] = 8 * (high_at & 3);
  // Stage s of the block's ring: every lane's low code blocks, then high ones, then scale words.
  const int lanes = static_cast<int>(blockDim.x);
  s.stage_stride = lanes * kStageBytesPerLane;
  s.low_to = ring_at + threadIdx.x * 16;
  s.high_to = ring_at + (lanes + threadIdx.x) * 16;
  s.words_to = ring_at + lanes * 32 + threadIdx.x * 8;
  return s;
}

// The warp's sums over all spans (no codes copied where its expert is out of range): the ring's first kStages - 1
// spans copied by the caller, committed one group each.
__device__ __forceinline__ void multiply_spans(const LaneSpans& s, bool active, float (&acc)[4][1][4]) {
  const int t = threadIdx.x % 4;
  uint4 next_input[4];
  s.load_input(0, t, next_input);
  int oldest = 0;
  for (int span = 0; span < s.spans; ++span) {
    wait_copies<kStages - 2>();  // this span's copies (the lane's own) have landed
    // The stage read last span (its values already in the MMAs) is refilled, an empty group past the last span.
    if (active) s.copy(span + kStages - 1, oldest == 0 ? kStages - 1 : oldest - 1, t);
    commit_copies();
    const uint32_t at = oldest * s.stage_stride;
    oldest = oldest + 1 == kStages ? 0 : oldest + 1;
    const uint4 low_code = load_shared16(s.low_to + at), high_code = load_shared16(s.high_to + at);
    const uint2 words = load_shared8(s.words_to + at);
    uint4 input[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) input[u] = next_input[u];
    s.load_input(span + 1, t, next_input);
    multiply_code_blocks<1, 4>(low_code, high_code, scale_from(words.x, s.scale_shift[0]),
                               scale_from(words.y, s.scale_shift[1]), [&](int u, int) { return input[u]; }, acc);
  }
  wait_copies<0>();
}

// Rows g and g + 8 of lane (g, 0): its sums with its expert's bias.
__device__ __forceinline__ void row_products(const ExpertGemvArgs& a, int expert, int row0,
                                             const float (&acc)[4][1][4], float (&product)[2]) {
  const int g = threadIdx.x % 32 / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = min(row0 + g + 8 * h, a.rows - 1);
    const float bias = a.bias ? to_float(a.bias, static_cast<int64_t>(expert) * a.rows + row, a.bias_element) : 0.0f;
    product[h] = chains_summed<1, 4>(acc, 0, 2 * h) + bias;
  }
}

// What block x's warp takes: rows 16 (x % tiles) on of assignment x / tiles, and that assignment's expert (0 where
// the expert is out of range: then nothing is read or written).
struct WarpTile {
  int assignment, row0, expert;
  bool active;
};

__device__ __forceinline__ WarpTile warp_tile(const ExpertGemvArgs& a) {
  const int tiles = (a.rows + kMmaRows - 1) / kMmaRows;
  WarpTile w;
  w.assignment = static_cast<int>(blockIdx.x) / tiles;
  w.row0 = static_cast<int>(blockIdx.x) % tiles * kMmaRows;
  const int64_t chosen = a.experts[w.assignment];
  w.active = chosen >= 0 && chosen < a.experts_count;
  w.expert = w.active ? static_cast<int>(chosen) : 0;
  return w;
}

// The warp's rows with their biases, stored by store_product (every lane calls it: it shuffles).
__device__ __forceinline__ void store_rows(const ExpertGemvArgs& a, const WarpTile& w, const float (&acc)[4][1][4]) {
  float product[2];
  row_products(a, w.expert, w.row0, acc, product);
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = w.row0 + g + 8 * h;
    store_product(a, w.assignment, row, g, w.active && t == 0 && row < a.rows, product[h]);
  }
}

// A block per warp (warp_tile).
__global__ void __launch_bounds__(32) expert_warp_kernel(ExpertGemvArgs a) {
  wait_for_earlier_kernels();  // launched early: its experts and input are the kernels' before
  let_later_kernels_start();
  extern __shared__ uint4 ring[];
  const WarpTile w = warp_tile(a);
  const LaneSpans s = lane_spans(a, w.expert, w.assignment, w.row0, shared_address(ring));
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int span = 0; span < kStages - 1; ++span) {
    if (w.active) s.copy(span, span, t);
    commit_copies();
  }
  float acc[4][1][4] = {};
  multiply_spans(s, w.active, acc);
  store_rows(a, w, acc);
}

// Bulk copies: the warp's 16 rows of an expert are consecutive, so a row's codes of kChunkSpans spans are one
// contiguous piece (lane r < 16 copies row r's), and the 16 rows' scales one block, copied once. Two chunks in flight
// (8 spans, where a lane's ring holds 3). A bytes-only probe of 120b's grid read its 33 MB in 10.8 µs so, against the
// rings' 17.7, as fast as a plain stream; in a 120b decode step, where the kernel is bound by its instructions, it
// took 21.0 µs a layer against the rings' 21.3 (364 tok/s against 362; docs/benchmarks.md, gpt-oss decode).
constexpr int kBulkStages = 2;
constexpr int kChunkSpans = 4;
constexpr int kChunkBytes = kChunkSpans * kSpanBlocks * 16;
constexpr int kChunkPitch = kChunkBytes + 64;  // rows g and g + 1 of a quarter warp's loads in different banks
constexpr int kBarrierBytes = 64;              // the stages' barriers, then the scales'
constexpr int kMostScaleBytes = 8192;          // 16 rows of up to 512 MX blocks: 16,384 columns

__host__ __device__ constexpr int scale_bytes_of(int blocks_per_row) {
  return (kMmaRows * blocks_per_row + 15) / 16 * 16;
}
__host__ __device__ constexpr int bulk_shared_bytes(int blocks_per_row) {
  return kBarrierBytes + scale_bytes_of(blocks_per_row) + kBulkStages * kMmaRows * kChunkPitch;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The warp's sums over all spans of rows row0.. of `expert`, their codes and scales brought by bulk copies.
__device__ __forceinline__ void multiply_bulk(const ExpertGemvArgs& a, int expert, int assignment, int row0,
                                              unsigned char* shared, float (&acc)[4][1][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const LaneInput in = lane_input(a, assignment);
  const int row_bytes = in.blocks_per_row * 16, chunks = (row_bytes + kChunkBytes - 1) / kChunkBytes;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(shared);  // a stage's each, then the scales'
  unsigned char* scales = shared + kBarrierBytes;
  unsigned char* stages = scales + scale_bytes_of(in.blocks_per_row);
  const int64_t first_row = static_cast<int64_t>(expert) * a.rows + row0;
  const uint8_t* codes = a.blocks + first_row * row_bytes;
  if (lane <= kBulkStages) init_barrier(barriers + lane);
  barriers_initialised();
  __syncwarp();
  if (lane == 0) {
    arrive_expecting(barriers + kBulkStages, kMmaRows * in.blocks_per_row);
    bulk_copy(scales, a.scales + first_row * in.blocks_per_row, kMmaRows * in.blocks_per_row, barriers + kBulkStages);
  }
  const auto stage_of = [&](int chunk) { return stages + chunk % kBulkStages * kMmaRows * kChunkPitch; };
  const auto issue = [&](int chunk) {
    if (chunk >= chunks) return;
    uint64_t* barrier = barriers + chunk % kBulkStages;
    const int bytes = min(kChunkBytes, row_bytes - chunk * kChunkBytes);
    if (lane == 0) arrive_expecting(barrier, kMmaRows * bytes);
    if (lane < kMmaRows)
      bulk_copy(stage_of(chunk) + lane * kChunkPitch, codes + lane * row_bytes + chunk * kChunkBytes, bytes, barrier);
  };
#pragma unroll
  for (int chunk = 0; chunk < kBulkStages; ++chunk) issue(chunk);
  uint4 next_input[4];
  in.load_input(0, t, next_input);
  wait_barrier(barriers + kBulkStages, 0);
  const unsigned char* low_scales = scales + g * in.blocks_per_row + t;
  const unsigned char* high_scales = low_scales + 8 * in.blocks_per_row;
  for (int span = 0; span < in.spans; ++span) {
    const int chunk = span / kChunkSpans, within = span % kChunkSpans;
    if (within == 0) wait_barrier(barriers + chunk % kBulkStages, chunk / kBulkStages % 2);
    const unsigned char* at = stage_of(chunk) + g * kChunkPitch + within * kSpanBlocks * 16 + t * 16;
    const bool here = in.present(span, t);  // else zeros, as the rings' copies of nothing are
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint4 low_code = here ? *reinterpret_cast<const uint4*>(at) : zero;
    const uint4 high_code = here ? *reinterpret_cast<const uint4*>(at + 8 * kChunkPitch) : zero;
    const unsigned low_bits = here ? low_scales[kSpanBlocks * span] : 0u;
    const unsigned high_bits = here ? high_scales[kSpanBlocks * span] : 0u;
    uint4 input[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) input[u] = next_input[u];
    in.load_input(span + 1, t, next_input);
    multiply_code_blocks<1, 4>(low_code, high_code, low_bits, high_bits, [&](int u, int) { return input[u]; }, acc);
    if (within == kChunkSpans - 1 || span == in.spans - 1) {  // every lane has read the chunk's stage: refill it
      __syncwarp();
      reads_before_bulk_copies();
      issue(chunk + kBulkStages);
    }
  }
}
#endif

// As expert_warp_kernel, its codes and scales brought by bulk copies (a.rows a multiple of 16).
__global__ void __launch_bounds__(32) expert_warp_bulk_kernel(ExpertGemvArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  wait_for_earlier_kernels();  // launched early: its experts and input are the kernels' before
  let_later_kernels_start();
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const WarpTile w = warp_tile(a);
  float acc[4][1][4] = {};
  if (w.active) multiply_bulk(a, w.expert, w.assignment, w.row0, shared_bytes, acc);
  store_rows(a, w, acc);
#else
  __trap();  // bulk_copies_take refuses GPUs and builds without compute capability 9.0
#endif
}

// The kernel's blocks ask for a little shared memory, so the GPU would split an SM's memory between L1 and shared
// memory in L1's favour, and the experts' second kernel (launched early, 40 KB of shared memory a block) could not
// start beside them until they ended: 321 tok/s at 120b batch 1 where asking for the largest shared part gives 357.
template <void (*kKernel)(ExpertGemvArgs)>
void prefer_shared_memory() {
  constexpr int kGpus = 64;
  static std::atomic<bool> done[kGpus] = {};  // a kernel's own, per GPU
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kGpus || done[device].load()) return;
  cudaFuncSetAttribute(reinterpret_cast<const void*>(kKernel), cudaFuncAttributePreferredSharedMemoryCarveout,
                       cudaSharedmemCarveoutMaxShared);
  done[device].store(true);
}

// CRUCIBLE_MOE_WARPS=0 keeps one token's first projection on expert_mma.cu's blocks.
bool warps_switched_on() {
  static const bool on = on_unless_zero("CRUCIBLE_MOE_WARPS");
  return on;
}

}  // namespace

bool expert_warps_take(const ExpertGemvArgs& args) {
  return warps_switched_on() && !args.order && !args.summed && args.bf16_products && args.assignments <= kMaxRouteK &&
         args.x_divisor == args.assignments;  // every assignment reads row 0: one token
}

bool bulk_copies_take(const uint8_t* blocks, const uint8_t* scales, int rows, int cols) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return warps_switched_on() && current_gpu().major >= 9 &&
         has_early_launch_code(reinterpret_cast<const void*>(expert_warp_bulk_kernel)) && aligned(blocks) &&
         aligned(scales) && rows > 0 && rows % kMmaRows == 0 && cols > 0 && cols % kMxBlock == 0 &&
         scale_bytes_of(cols / kMxBlock) <= kMostScaleBytes;
}

void launch_expert_warps(const ExpertGemvArgs& args, cudaStream_t stream) {
  const int tiles = (args.rows + kMmaRows - 1) / kMmaRows;
  if (args.bulk_copies && bulk_copies_take(args.blocks, args.scales, args.rows, args.cols)) {
    prefer_shared_memory<expert_warp_bulk_kernel>();
    launch(expert_warp_bulk_kernel, dim3(args.assignments * tiles), dim3(32), bulk_shared_bytes(args.cols / kMxBlock),
           stream, args);
    return;
  }
  prefer_shared_memory<expert_warp_kernel>();
  launch(expert_warp_kernel, dim3(args.assignments * tiles), dim3(32), kStages * 32 * kStageBytesPerLane, stream, args);
}

}  // namespace crucible::lm::kernels
