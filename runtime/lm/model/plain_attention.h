#pragma once
// Attention in LibTorch operators: scaled_dot_product_attention where this LibTorch has it (a fused kernel on a GPU),
// plain products and a softmax where it has not; and gpt-oss's learned sinks (one logit per head that joins each
// softmax and is then dropped, so a query may attend to "nothing") and sliding windows (a query sees only the last
// `window` positions, itself included), which the fused causal kernels do not take. The cache keeps every slot, and
// the window is a mask over it.
#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <cstdint>

// LibTorch 2.5 and later: scaled_dot_product_attention takes grouped key heads (enable_gqa) and picks a fused causal
// kernel (flash attention) when given no mask.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define CRUCIBLE_SDPA_GQA 1
#else
#define CRUCIBLE_SDPA_GQA 0
#endif
// LibTorch 2.1 and later: scaled_dot_product_attention, with boolean or additive masks.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define CRUCIBLE_SDPA 1
#else
#define CRUCIBLE_SDPA 0
#endif

namespace crucible::lm {

// mask (bool) as an additive mask in `dtype`: 0 where a query attends, -inf elsewhere. scaled_dot_product_attention
// would make it at every call, two kernels a layer; made once per forward pass instead.
at::Tensor additive_mask(const at::Tensor& mask, c10::ScalarType dtype);

// q [B, H, T, D], k and v [B, H, S, D], mask broadcastable to [B, H, T, S] (bool, or additive in q's dtype):
// softmax(q k^T * scale + mask) v, [B, H, T, D]; the softmax in float32.
at::Tensor scaled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                            double scale);

// mask [B, 1, T, visible] bool (query rows at cache slots query_slots [T]) narrowed to the keys within `window`
// slots of each query: slot s stays visible to query slot q only when q - s < window. Slots and positions advance
// together within a row, so a window over slots is the window over positions.
at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& query_slots, int64_t window);

// queries [B, T, H, D] (rotated) against the first `visible` slots of k_cache and v_cache [B, Hkv, capacity, D], the
// H query heads grouped over Hkv key heads; mask [B, 1, T, visible] bool; sinks [H] or undefined. Returns
// [B, T, H * D] in the queries' dtype. Up to kFewQueryRows query rows (decode steps) the scores are materialised and
// the sinks are one more column of the softmax. Past it the sinks are one more key of scaled_attention: with
// LibTorch 2.5 or later on a GPU the scores are never materialised (a fused kernel, its backward too);
// otherwise query rows go a chunk at a time, each chunk's float32 scores within `chunk_scores` elements (one row at
// least): a 2,000-token sequence of gpt-oss's 64 heads is 1 GiB of scores a row.
constexpr int64_t kPlainAttentionChunkScores = int64_t{1} << 27;
constexpr int64_t kFewQueryRows = 8;
at::Tensor plain_attention(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& mask, const at::Tensor& sinks, double scale, int64_t visible,
                           int64_t chunk_scores = kPlainAttentionChunkScores);

}  // namespace crucible::lm
