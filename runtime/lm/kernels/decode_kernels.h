#pragma once
// Fused kernels for decode steps (one new token per row, no gradients) on CUDA. A decode step is mostly small
// element-wise kernels: rotating queries and keys takes five a layer, writing the cache two more, the MLP's
// activation two, the draw six. These do each job in one kernel. The rotation and the activation round every
// intermediate to the model dtype exactly where LibTorch's separate kernels round it, so a step gives the same values
// either way; the draw sums in another order (pick_by_cdf_fused).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace crucible::lm {

// Whether decode steps on `x`'s device and dtype use the fused kernels: a CUDA LibTorch build, a float32, bfloat16
// or float16 tensor on a GPU, no gradient recorded, and not switched off.
bool decode_kernels_serve(const at::Tensor& x);

// Whether decode steps rotate into the cache with the fused kernel: decode_kernels_serve, and heads it takes (an even
// head_dim up to 1024; a multiple of 32 where each head is normalised first, as Qwen3's are).
bool rotate_into_cache_serves(const at::Tensor& x, int64_t head_dim, bool normalised_heads = false);

// Switches the kernels off and on (benchmarks and tests compare both ways). CRUCIBLE_DECODE_KERNELS=0 starts off.
// A CUDA graph captured before keeps the kernels it captured: a new Generator captures anew.
void set_decode_kernels(bool on);

// Whether the decode attention kernels take these caches and heads: decode_kernels_serve on the cache, contiguous
// [B, Hkv, capacity, D] caches, up to 8 query heads per key head, D = 64 or 128 (any D a power-of-two number of
// 16-byte loads up to a warp's worth).
bool decode_attention_takes(const at::Tensor& k_cache, int64_t heads);

// Whether decode steps attend with them: they take the shapes, and the batch is small (rows x key heads up to 32:
// the split kernels), or the tensor-core kernel takes it (16-bit caches, D = 64 or 128, a GPU of compute capability
// 8.0 or later), or CRUCIBLE_DECODE_ATTENTION=1 asks for every batch. These beat LibTorch's attention there.
bool decode_attention_serves(const at::Tensor& k_cache, int64_t heads);

// Switches the decode attention kernels off and back on (LibTorch's masked attention instead).
// CRUCIBLE_DECODE_ATTENTION=0 starts off. Captured graphs keep what they captured.
void set_decode_attention(bool on);

// Whether decode_attention runs these caches on the tensor-core kernel: switched on, at least 4 rows x key heads
// (CRUCIBLE_DECODE_ATTENTION_TC_FROM; fewer take the split kernels, which spread a row's slots over more of the GPU),
// and heads, caches and a GPU it takes (16-bit, D = 64 or 128, up to 65,536 slots, 208 KiB of shared memory a block:
// Hopper, not an A100).
bool decode_attention_on_tensor_cores(const at::Tensor& k_cache, int64_t heads);

// Switches the tensor-core kernel for batches above 32 rows x key heads off (cuDNN's attention, or the split kernels
// under CRUCIBLE_DECODE_ATTENTION=1) and back on. CRUCIBLE_DECODE_ATTENTION_TC=0 starts off.
void set_decode_attention_tensor_cores(bool on);

// One query token per row: q [B, 1, H, D] (D contiguous), caches [B, Hkv, capacity, D] contiguous, key_valid
// [B, capacity] bool (padding false), slot [1] int64 the step's slot. Row b attends the slots s <= slot with
// key_valid[b, s], and always slot itself, reading nothing past it; `visible` bounds the slot (a captured graph
// serves every step up to it). Sums in float32 and rounds once: within rounding of LibTorch's attention, not its bits.
// Returns [B, 1, H * D].
// `sinks` (gpt-oss; [H] float32 on q's GPU, or undefined): a logit per query head that joins its softmax and adds no
// value. `window` (0: none): slots more than window - 1 before the step's slot are not attended. Both are taken by
// the split kernels and, at large batches, the tensor-core kernel (decode_attention_serves_sinks).
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& key_valid, const at::Tensor& slot, int64_t visible, double scale,
                            const at::Tensor& sinks = {}, int64_t window = 0);

// Whether decode steps of a layer with attention sinks or a sliding window attend with the decode kernels: the split
// kernels take the shapes at any batch size (LibTorch's way is a masked softmax over a sink column, about ten
// kernels), and not switched off.
bool decode_attention_serves_sinks(const at::Tensor& k_cache, int64_t heads);

// What a one-row linear layer folds in (see small_linear): the RMS norm before it (x normalised by `norm_weight` [K]
// with `eps` and rounded as LibTorch's fused rms_norm rounds it), and the MLP's activation after it (`gated`: the
// weight's rows are gate then up, and the result is silu(gate) * up, rounded as LibTorch's linear, silu and mul round).
struct LinearFolds {
  at::Tensor norm_weight;  // undefined: x as it is
  double eps = 0.0;
  bool gated = false;
  // With a norm: where given ([K] in x's dtype, contiguous, not x's storage), the normalised x is written there too,
  // for what reads it beside this projection (a mixture of experts' experts beside its router).
  at::Tensor normed_out;

  static LinearFolds rms_normed(at::Tensor norm_weight, double eps, bool gated = false) {
    return {std::move(norm_weight), eps, gated};
  }
};

// Whether a linear layer of x [..., K] by weight [N, K] (with a bias [N] and a residual of N elements, where given;
// gated: 2N rows, a bias of 2N, no residual) with these folds runs as the one-row kernel: decode_kernels_serve on x,
// one row (a batch-1 decode step, or any one-row pass without gradients), every tensor contiguous in one dtype on one
// GPU, K a whole number of 16-byte slices (under 48 KiB where normalised), and not switched off
// (CRUCIBLE_DECODE_GEMV=0 starts off; set_small_linear switches).
bool small_linear_serves(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {},
                         const at::Tensor& residual = {}, const LinearFolds& folds = {});
void set_small_linear(bool on);
// Whether the one-row kernel copies a block's second round of rows into shared memory before it waits for the kernel
// before it (the same sums either way; CRUCIBLE_DECODE_GEMV_AHEAD=0 starts it off).
void set_small_linear_ahead(bool on);

// folds(x W^T (+ bias)), then + residual (same shape as the result) when given; rounded where LibTorch's linear,
// addmm and add round. Sums in another order than cuBLAS: within rounding of it, not its bits.
at::Tensor small_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        const at::Tensor& residual, const LinearFolds& folds = {});

// Launches the decode kernels with programmatic dependent launch where the GPU has it (Hopper and later: each may
// start while the kernel before it finishes, and load its weights meanwhile), or plainly. On unless
// CRUCIBLE_DECODE_PDL=0. Captured graphs keep how they were launched.
void set_early_launch(bool on);

// qkv [B, 1, (H + 2 Hkv) D] (the fused projection's output, last dimension contiguous); positions [B, 1] int64;
// slots [1] int64; cos and signed_sin [n, D] rotary tables (RotaryTable), covering every position. Rotates the query
// and key heads by their rows' positions, writes keys and values into slot `slots[0]` of k_cache and v_cache
// [B, Hkv, capacity, D], and returns the rotated queries [B, 1, H, D]. With q_norm and k_norm [D] (Qwen3), each query
// and key head is first RMS-normalised with that weight and `eps`, rounded once as LibTorch's fused rms_norm rounds.
at::Tensor rotate_into_cache(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& slots,
                             const at::Tensor& cos, const at::Tensor& signed_sin, at::Tensor& k_cache,
                             at::Tensor& v_cache, int64_t heads, int64_t kv_heads, const at::Tensor& q_norm = {},
                             const at::Tensor& k_norm = {}, double eps = 0.0);

// Whether a decode step's rotation folds into its attention (rotate_and_attend): switched on, heads not normalised
// before their rotation (Qwen3's are), and caches decode_attention runs on the tensor-core kernel.
// CRUCIBLE_DECODE_ROTATION_FOLD=0 starts it off; captured graphs keep what they captured.
bool rotation_folds_into_attention(const at::Tensor& k_cache, int64_t heads, bool normalised_heads);
void set_rotation_fold(bool on);

// rotate_into_cache and decode_attention in one kernel, where rotation_folds_into_attention: the same inputs as those
// two (qkv, positions, the tables, the caches, the slot), the keys and values written into the caches as
// rotate_into_cache writes them, and decode_attention's output, bit for bit. One kernel fewer in a decode step.
at::Tensor rotate_and_attend(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& cos,
                             const at::Tensor& signed_sin, at::Tensor& k_cache, at::Tensor& v_cache,
                             const at::Tensor& key_valid, const at::Tensor& slot, int64_t visible, double scale,
                             int64_t heads, const at::Tensor& sinks = {}, int64_t window = 0);

// gate_up [..., 2 I] (gate then up, contiguous) -> silu(gate) * up [..., I].
at::Tensor silu_times_up(const at::Tensor& gate_up);

// log_probs [B, V] float32, last dimension contiguous; uniform [B, 1] float32 draws in [0, 1). Row by row, the index
// where the draw, scaled by the row's total probability, falls in the cumulative distribution: one kernel where
// exponentiating, a cumulative sum over the vocabulary and a search took six. A zero-probability index is never
// picked. Sums are taken in another order than a cumulative sum's, so a draw within rounding of a boundary may fall
// on the other side of it. Returns [B, 1] int64.
at::Tensor pick_by_cdf_fused(const at::Tensor& log_probs, const at::Tensor& uniform);

// Sampling straight from logits, for rows at a temperature without top-k or top-p, or greedy: two kernels where
// log-softmax, the greedy argmax, the draw, its cumulative distribution and the gathers took a dozen, and one read of
// the logits where they took five.
struct FusedSample {
  at::Tensor tokens;             // [B] int64
  at::Tensor sampling_logprobs;  // [B] float32, under the row's temperature (0 for greedy rows)
  at::Tensor model_logprobs;     // [B] float32, under the model's distribution
  at::Tensor record;             // [3, B] float64: the three above, for one copy to the host
};

// Whether sample_fused takes these logits: decode_kernels_serve, [B, V] with V contiguous, V up to 2,097,152 and B up
// to 65,535, and not switched off (CRUCIBLE_DECODE_SAMPLER=0 starts off; set_fused_sampling switches).
bool sample_fused_serves(const at::Tensor& logits);
void set_fused_sampling(bool on);

// logits [B, V]; inv_temperature [B] float32 (1 for greedy rows); greedy [B] bool; seeds [B] int64 (the rows' seeds'
// bits); steps [B] int64, or undefined for every row at `step`. A greedy row takes its first highest logit. A sampled
// row takes the index where row_uniform(seed, step), scaled by the row's total probability at its temperature, falls
// in the cumulative distribution (never a zero-probability index); the probabilities and log-probs are computed
// relative to the row's highest logit, summed in another order than LibTorch's log_softmax and cumulative sum: within
// rounding of them, and a draw within rounding of a boundary may fall on the other side of it.
FusedSample sample_fused(const at::Tensor& logits, const at::Tensor& inv_temperature, const at::Tensor& greedy,
                         const at::Tensor& seeds, const at::Tensor& steps, int64_t step);

}  // namespace crucible::lm
