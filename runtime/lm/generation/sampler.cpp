#include "lm/generation/sampler.h"

#include <ATen/ATen.h>

#include "lm/kernels/decode_kernels.h"

#include <algorithm>
#include <limits>

namespace crucible::lm {

BatchSampler::BatchSampler(const std::vector<SamplingParams>& rows, int64_t vocab_size, c10::Device device)
    : device_(device) {
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<float> inv_t(B), top_p(B);
  std::vector<int64_t> top_k(B);
  std::vector<uint8_t> greedy(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& r = rows[b];
    seeds_.push_back(r.seed);
    greedy[b] = r.temperature <= 0.0;
    // Finite however small the temperature: an infinite scale would make 0 * inf = NaN at the highest logit.
    inv_t[b] = greedy[b] ? 1.0f : static_cast<float>(std::min(1.0 / r.temperature, 1e30));
    top_p[b] = static_cast<float>(r.top_p);
    top_k[b] = r.top_k > 0 && r.top_k < vocab_size ? r.top_k : vocab_size;
    any_filter_ |= !greedy[b] && (r.top_p < 1.0 || top_k[b] < vocab_size);
    any_sampled_ |= !greedy[b];
    unit_temperature_ &= inv_t[b] == 1.0f;
  }
  const auto on = [&](at::Tensor t) { return t.to(device); };
  inv_temperature_ = on(at::tensor(inv_t).view({B, 1}));
  top_p_ = on(at::tensor(top_p).view({B, 1}));
  top_k_ = on(at::tensor(top_k).view({B, 1}));
  greedy_ = on(at::tensor(greedy).to(at::kBool));
  std::vector<int64_t> seed_bits(B);
  for (int64_t b = 0; b < B; ++b) seed_bits[b] = static_cast<int64_t>(seeds_[b]);
  seeds_on_device_ = on(at::tensor(seed_bits));
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, int64_t step) const {
  return sample_with(logits, std::vector<int64_t>(seeds_.size(), step));
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, const std::vector<int64_t>& steps) const {
  return sample_with(logits, steps);
}

namespace {

// Row by row, the index whose cumulative probability first exceeds the row's draw (scaled by the row's total, which
// rounding leaves a little off 1); zero-probability entries are never picked. The target stays below the total:
// rounding could otherwise put the highest draw at the total itself, past every entry, and the last entry (of no
// probability, perhaps) would be taken.
at::Tensor pick_by_cdf(const at::Tensor& log_probs, const at::Tensor& uniform) {
  if (log_probs.scalar_type() == at::kFloat && decode_kernels_serve(log_probs))
    return pick_by_cdf_fused(log_probs, uniform);
  const auto probs = log_probs.exp();
  const auto cdf = probs.cumsum(-1);
  const auto total = cdf.narrow(1, cdf.size(1) - 1, 1);
  const auto target = at::minimum(uniform * total, at::nextafter(total, at::zeros_like(total)));
  return at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).clamp_max(probs.size(1) - 1);
}

}  // namespace

SampledTokens BatchSampler::sample_with(const at::Tensor& given, const std::vector<int64_t>& steps) const {
  // Without top-k or top-p, two kernels sample every row (the same draws, within rounding of the path below).
  if (!any_filter_ && sample_fused_serves(given)) {
    bool one_step = true;
    for (const int64_t s : steps) one_step &= s == steps.front();
    const auto row_steps = one_step ? at::Tensor() : at::tensor(steps).to(device_);
    auto f = sample_fused(given, inv_temperature_.view({-1}), greedy_, seeds_on_device_, row_steps,
                          steps.empty() ? 0 : steps.front());
    return {f.tokens, f.sampling_logprobs, f.model_logprobs, f.record};
  }
  const auto logits = given.to(at::kFloat);
  const auto model_lp = at::log_softmax(logits, -1);
  const auto greedy_tokens = logits.argmax(-1);
  if (!any_sampled_) {
    return {greedy_tokens, at::zeros({logits.size(0)}, logits.options()),
            model_lp.gather(1, greedy_tokens.unsqueeze(1)).squeeze(1)};
  }
  std::vector<float> draws(seeds_.size());
  for (std::size_t b = 0; b < draws.size(); ++b) draws[b] = row_uniform(seeds_[b], steps[b]);
  const auto uniform = at::tensor(draws).view({-1, 1}).to(device_);
  const auto scaled = unit_temperature_ ? logits : logits * inv_temperature_;
  at::Tensor tokens, sampling_lp;
  if (any_filter_) {
    // Filter in sorted order, as transformers does: top-k first, then top-p over what remains.
    auto [sorted, order] = scaled.sort(-1, /*descending=*/true);
    const auto rank = at::arange(logits.size(1), top_k_.options()).view({1, -1});
    auto keep = rank < top_k_;
    auto probs = at::softmax(sorted.masked_fill(at::logical_not(keep), -std::numeric_limits<float>::infinity()), -1);
    keep = keep & ((probs.cumsum(-1) - probs) < top_p_);
    keep.select(1, 0).fill_(true);
    const auto filtered = at::log_softmax(sorted.masked_fill(at::logical_not(keep), -std::numeric_limits<float>::infinity()), -1);
    const auto pick = pick_by_cdf(filtered, uniform).view({-1, 1});
    tokens = order.gather(1, pick).squeeze(1);
    sampling_lp = filtered.gather(1, pick).squeeze(1);
  } else {
    const auto lp = unit_temperature_ ? model_lp : at::log_softmax(scaled, -1);
    tokens = pick_by_cdf(lp, uniform).squeeze(1);
    sampling_lp = lp.gather(1, tokens.unsqueeze(1)).squeeze(1);
  }
  tokens = at::where(greedy_, greedy_tokens, tokens);
  sampling_lp = at::where(greedy_, at::zeros_like(sampling_lp), sampling_lp);
  return {tokens, sampling_lp, model_lp.gather(1, tokens.unsqueeze(1)).squeeze(1)};
}

}  // namespace crucible::lm
