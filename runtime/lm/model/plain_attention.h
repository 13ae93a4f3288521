#pragma once
// Attention in plain LibTorch ops for what the fused kernels and scaled_dot_product_attention do not take: gpt-oss's
// learned sinks (one logit per head that joins each softmax and is then dropped, so a query may attend to "nothing")
// and sliding windows (a query sees only the last `window` positions, itself included). Scores and the softmax are
// float32; the cache keeps every slot, and the window is a mask over it.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace crucible::lm {

// mask [B, 1, T, visible] bool (query rows at cache slots query_slots [T]) narrowed to the keys within `window`
// slots of each query: slot s stays visible to query slot q only when q - s < window. Slots and positions advance
// together within a row, so a window over slots is the window over positions.
at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& query_slots, int64_t window);

// queries [B, T, H, D] (rotated) against the first `visible` slots of k_cache and v_cache [B, Hkv, capacity, D], the
// H query heads grouped over Hkv key heads; mask [B, 1, T, visible] bool; sinks [H] or undefined. Returns
// [B, T, H * D] in the queries' dtype. Query rows go a chunk at a time, each chunk's float32 scores within
// `chunk_scores` elements (one row at least): a 2,000-token sequence of gpt-oss's 64 heads is 1 GiB of scores a row.
constexpr int64_t kPlainAttentionChunkScores = int64_t{1} << 27;
at::Tensor plain_attention(const at::Tensor& queries, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& mask, const at::Tensor& sinks, double scale, int64_t visible,
                           int64_t chunk_scores = kPlainAttentionChunkScores);

}  // namespace crucible::lm
