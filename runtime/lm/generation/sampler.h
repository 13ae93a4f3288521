#pragma once
// Token sampling for a batch whose rows each carry their own temperature, top-k, top-p and seed.
// Each row draws one uniform number per step from a counter-based hash of (row seed, step) and takes the token where
// it falls in the cumulative distribution, so a request's samples depend only on its seed and its logits: not on the
// batch it shares, the device, or other requests. One draw per row, not one per vocabulary entry: at batch 64 the
// per-token noise over 152k ids cost a fifth of a decode step.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "lm/generation/sampling_params.h"

namespace crucible::lm {

struct SampledTokens {
  at::Tensor tokens;             // [B] int64
  at::Tensor sampling_logprobs;  // [B] float32: under the distribution sampled from (after temperature/top-k/top-p)
  at::Tensor model_logprobs;     // [B] float32: under the model's raw distribution (temperature 1, no filtering)
  at::Tensor record;             // [3, B] float64 (the three above), where the sampler made it in one piece; else undefined
};


class BatchSampler {
 public:
  BatchSampler(const std::vector<SamplingParams>& rows, int64_t vocab_size, c10::Device device);
  // logits [B, V] (float32, or the model's dtype) -> one token per row; `step` is the row's position in its completion.
  SampledTokens sample(const at::Tensor& logits, int64_t step) const;
  // The same with each row at its own position in its completion (rows that joined a running batch later).
  SampledTokens sample(const at::Tensor& logits, const std::vector<int64_t>& steps) const;

 private:
  SampledTokens sample_with(const at::Tensor& logits, const std::vector<int64_t>& steps) const;

  std::vector<uint64_t> seeds_;
  c10::Device device_;
  at::Tensor inv_temperature_;  // [B, 1]
  at::Tensor top_p_;            // [B, 1]
  at::Tensor top_k_;            // [B, 1] int64, V where off
  at::Tensor greedy_;           // [B] bool
  at::Tensor seeds_on_device_;  // [B] int64: the seeds' bits, for the fused sampler's draws
  bool any_filter_ = false;
  bool any_sampled_ = false;
  bool unit_temperature_ = true;  // every row samples at temperature 1 (or is greedy): the scaled logits are the logits
};

}  // namespace crucible::lm
