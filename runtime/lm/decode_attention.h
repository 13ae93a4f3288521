#pragma once
// Attention of one new token per row over a static key/value cache, in two small kernels (a split over the cache,
// then a combine). LibTorch's fused kernels take a boolean mask over the whole cache in a decode step, and read all
// of it; this reads only slots up to the step's own, which it takes from device memory, so a CUDA graph captured
// once serves every step.
#include <ATen/core/Tensor.h>

namespace crucible::lm {

// Whether this build has the kernels (a CUDA LibTorch) and they serve tensors of `options` with heads of `head_dim`.
bool decode_attention_serves(const at::TensorOptions& options, int64_t head_dim);

// q [B, 1, H, D] (any strides, D contiguous); k_cache, v_cache [B, Hkv, capacity, D] contiguous; key_valid
// [B, capacity] bool; slot [1] int64, the step's cache slot. Row b's query attends to cache slot s when s == slot, or
// s < slot and key_valid[b, s]: as causal_mask() says. Returns [B, 1, H * D] in q's dtype.
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& key_valid, const at::Tensor& slot, double scale);

}  // namespace crucible::lm
