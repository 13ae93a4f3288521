#pragma once
// The mixture-of-experts kernel's launch in plain CUDA types: the .cu file does not see LibTorch.
#include <cuda_runtime.h>

#include <cstdint>

#include "lm/kernels/decode_kernels_launch.h"

namespace crucible::lm::kernels {

// Assignments (a token's chosen expert) a kernel launch takes: the block keeps the list of its expert's in shared
// memory. 256 is a batch of 64 tokens with 4 experts each.
constexpr int kMaxExpertAssignments = 256;

// out[a, r] = sum_c x[a / x_divisor, c] * W[experts[a], r, c] + bias[experts[a], r], W decoded from MXFP4 as it is
// read (blocks [E, rows, cols / 32, 16] with codes in the paired order of mxfp4_pairs.h, scales [E, rows, cols / 32],
// uint8), summed in float32.
struct ExpertGemvArgs {
  const void* x = nullptr;  // row i at x + i * x_row_stride elements, `cols` contiguous
  int64_t x_row_stride = 0;
  int x_divisor = 1;               // assignment a reads x's row a / x_divisor (k for the first projection, 1 after)
  Element x_element = Element::f32;
  const int64_t* experts = nullptr;  // [assignments]
  int assignments = 0;
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  const void* bias = nullptr;  // [E, rows], or null
  Element bias_element = Element::f32;
  float* out = nullptr;  // [assignments, rows]
  int experts_count = 0, rows = 0, cols = 0;
  // Inputs in bfloat16 multiplied on tensor cores, as a bfloat16 model's linear layers multiply (sums in float32;
  // compute capability 8.0 or later); otherwise float32 products on CUDA cores.
  bool bf16_products = false;
  // More than kMaxExpertAssignments (bfloat16 products only): the assignments ordered by expert, expert e's at
  // order[offsets[e] .. offsets[e + 1]), found on the device (no host synchronisation).
  const int32_t* order = nullptr;  // [assignments]
  const int32_t* offsets = nullptr;  // [experts_count + 1]
  int ordered_tile = 32;  // assignments an ordered block takes: kOrderedTile or kWideOrderedTile
  // Epilogues in place of `out` (bfloat16 products only; `out` is then null), each giving the values its glue kernel
  // below would give from `out`, without the launch between:
  // gpt-oss's clamped SwiGLU of row pairs (gate, linear): activated [assignments, rows / 2] bfloat16, as
  // launch_clamped_swiglu.
  void* activated = nullptr;
  float swiglu_limit = 0.0f, swiglu_alpha = 0.0f;
  // One token's assignments (block x takes assignment x; k <= kMaxRouteK; compute capability 9.0) weighted and
  // summed: summed [rows] in summed_element, weights [k] in weights_element, plus residual [rows] in summed_element
  // where given, as launch_weighted_expert_sum. The experts must not come from the kernel launched just before (the
  // blocks read them, and start copying their weights, before they wait for it).
  void* summed = nullptr;
  Element summed_element = Element::f32;
  const void* weights = nullptr;
  Element weights_element = Element::f32;
  const void* residual = nullptr;
  // One token's first projection on warps (expert_warps.cu) may bring its codes by bulk copies, where
  // bulk_copies_take allows; off to compare with the warps' rings.
  bool bulk_copies = false;
};

// Whether one token's first projection on warps (not switched off) can bring the experts' codes and scales by bulk
// copies: compute capability 9.0 and a build for it, both 16-byte aligned, whole warps of 16 rows, and 16 rows'
// scales in 8 KB.
bool bulk_copies_take(const uint8_t* blocks, const uint8_t* scales, int rows, int cols);

// False for arguments it does not take: more than kMaxExpertAssignments without an order, or float32 products.
bool launch_expert_gemv(const ExpertGemvArgs& args, cudaStream_t stream);

// Whether this build's summed epilogue has code for clusters (compute capability 9.0; a build for older GPUs only,
// run from its PTX, has none).
bool summed_epilogue_built();

// Assignments an ordered tensor-core block takes: one tile of an expert's. A wide tile decodes each weight once for
// twice as many inputs (fewer reads and decodes of the codes in long passes) at twice the accumulators and staging.
constexpr int kOrderedTile = 32;
constexpr int kWideOrderedTile = 64;

// The tile of a pass whose tile was not set: the wide one where an expert has more than kWideTileFrom assignments
// on average, else the narrow one. Measured (H200, prefill tok/s): at 64 x 512 tokens (1,024 an expert at 120b's
// 128 experts, 4,096 at 20b's 32) the wide tile is 5% faster; at one 512-token prompt (64 an expert at 20b) 7%
// slower (half the blocks, each with twice the registers, on the same work).
constexpr int64_t kWideTileFrom = 256;
constexpr int ordered_tile_for(int64_t assignments, int64_t experts) {
  return assignments > kWideTileFrom * experts ? kWideOrderedTile : kOrderedTile;
}
static_assert(ordered_tile_for(64 * 512 * 4, 128) == kWideOrderedTile, "a batch-64 prefill, 128 experts");
static_assert(ordered_tile_for(512 * 4, 32) == kOrderedTile, "one 512-token prefill, 32 experts: 64 each");
static_assert(ordered_tile_for(512 * 4, 128) == kOrderedTile, "one 512-token prefill, 128 experts: 16 each");
static_assert(ordered_tile_for(256 * 32, 32) == kOrderedTile, "exactly 256 each");

// MXFP4 decoded to bfloat16 or float32 (`element`), exactly: codes [blocks, 16] (paired, 16-byte aligned) and scales
// [blocks] -> out [blocks, 32].
bool launch_mxfp4_decode(const uint8_t* codes, const uint8_t* scales, void* out, Element element, int64_t blocks,
                         cudaStream_t stream);

// A router's top k experts per token and their softmax: logits [tokens, experts] (`element`), up to kMaxRouteExperts
// experts and kMaxRouteK chosen -> experts [tokens, k] int64, largest logit first (equal logits: the lower index
// first), and weights [tokens, k] in `element`, the softmax of the chosen logits computed in float32 and rounded once.
constexpr int kMaxRouteExperts = 256;
constexpr int kMaxRouteK = 8;
bool launch_route_top_k(const void* logits, Element element, int64_t tokens, int experts, int k, int64_t* chosen,
                        void* weights, cudaStream_t stream);

// gpt-oss's clamped SwiGLU on the first projection's float32 output: gate_up [rows, 2 * width] (columns alternate
// gate, linear) -> out [rows, width] in `out_element`, out = (clamp(linear, -limit, limit) + 1) * g * sigmoid(alpha * g)
// with g = min(gate, limit), in the order and precision of LibTorch's float32 operators, rounded once.
bool launch_clamped_swiglu(const float* gate_up, void* out, Element out_element, int64_t rows, int width, float limit,
                           float alpha, cudaStream_t stream);

// The experts' outputs weighted and summed per token: experts_out [tokens * k, width] float32, weights [tokens, k]
// (`weights_element`) -> out [tokens, width] in `out_element`, summed in float32 in the order k = 0, 1, ... and
// rounded once; then, where `residual` ([tokens, width] in `out_element`) is given, residual added and rounded again.
bool launch_weighted_expert_sum(const float* experts_out, const void* weights, Element weights_element,
                                const void* residual, void* out, Element out_element, int64_t tokens, int k, int width,
                                cudaStream_t stream);

}  // namespace crucible::lm::kernels
