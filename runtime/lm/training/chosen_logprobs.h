#pragma once
// The log-probability of each position's chosen token, and the entropy of its distribution, from the final hidden
// states and the output head, a chunk of positions at a time. Neither pass keeps a [positions, vocabulary] tensor:
// the backward pass computes each chunk's logits again (one more output-head product) instead of keeping them, so a
// micro-batch's memory no longer grows by several float32 copies of its logits.
#include <ATen/core/Tensor.h>

namespace crucible::lm {

struct ChosenLogprobs {
  at::Tensor logprobs;  // [N] float32, differentiable with respect to the hidden states
  at::Tensor entropy;   // [N] float32, a metric: no gradient
};

// hidden [N, H] (the model's dtype), head [V, H] (not trained), chosen [N] token ids. `chunk_rows` positions at a time
// (0: as many as keep one chunk's float32 logits near 1 GiB).
ChosenLogprobs chosen_logprobs(const at::Tensor& hidden, const at::Tensor& head, const at::Tensor& chosen,
                               int64_t chunk_rows = 0);

}  // namespace crucible::lm
