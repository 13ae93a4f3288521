#include "lm/sampler.h"

#include <ATen/ATen.h>

#include <limits>

namespace crucible::lm {

float row_uniform(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ (static_cast<uint64_t>(step + 1) * 0x9E3779B97F4A7C15ull));
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);  // 24 bits: exact in a float
}

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
    inv_t[b] = greedy[b] ? 1.0f : static_cast<float>(1.0 / r.temperature);
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
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, int64_t step) const {
  return sample_with(logits, std::vector<int64_t>(seeds_.size(), step));
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, const std::vector<int64_t>& steps) const {
  return sample_with(logits, steps);
}

namespace {

constexpr double kBelowOne = 1.0 - 1.0 / 16777216.0;
constexpr int64_t kTwoLevelFrom = 8192;  // vocabularies from this size draw in two levels (see pick_by_cdf)

// Row by row ([B, n] weights, [B, 1] draws in [0, 1)), the first index whose cumulative weight exceeds the draw times
// the row's total (which rounding leaves a little off 1). A draw that rounding puts at the total goes to the last
// positive entry: zero-weight entries are never picked.
at::Tensor first_above(const at::Tensor& weights, const at::Tensor& uniform) {
  const int64_t n = weights.size(1);
  const auto cdf = weights.cumsum(-1);
  const auto found = at::searchsorted(cdf, uniform * cdf.narrow(1, n - 1, 1), /*out_int32=*/false, /*right=*/true);
  const auto last_positive = ((weights > 0).to(at::kLong) * at::arange(n, found.options())).amax(1, /*keepdim=*/true);
  return at::where(found < n, found, last_positive);
}

// A block length for the two-level draw: a divisor of V near 1024 where there is one (no padded copy), else 1024.
int64_t block_length(int64_t V) {
  for (int64_t d = 1024; d <= 4096; ++d)
    if (V % d == 0) return d;
  for (int64_t d = 1023; d >= 256; --d)
    if (V % d == 0) return d;
  return 1024;
}

// The token where the draw falls in the cumulative distribution. Over a large vocabulary a cumulative sum of every
// row is the sampler's slowest kernel (a quarter of a millisecond per step at 64 x 152k on an H100), so the draw
// picks a block of tokens by the blocks' masses, then a token inside that block by its share of the block's mass: the
// same distribution, with one reduction over the vocabulary and short cumulative sums.
at::Tensor pick_by_cdf(const at::Tensor& probs, const at::Tensor& uniform) {
  const int64_t B = probs.size(0), V = probs.size(1);
  if (V < kTwoLevelFrom) return first_above(probs, uniform);
  const int64_t L = block_length(V), N = (V + L - 1) / L;
  const auto blocks = (N * L == V ? probs : at::constant_pad_nd(probs, {0, N * L - V})).view({B, N, L});
  const auto mass = blocks.sum(-1);  // [B, N]
  const auto chosen = first_above(mass, uniform);
  const auto cdf = mass.cumsum(-1);
  const auto before = at::where(chosen > 0, cdf.gather(1, (chosen - 1).clamp_min(0)), at::zeros_like(uniform));
  const auto inner = ((uniform * cdf.narrow(1, N - 1, 1) - before) / mass.gather(1, chosen)).clamp(0.0, kBelowOne);
  const auto members = blocks.gather(1, chosen.unsqueeze(2).expand({B, 1, L})).squeeze(1);  // [B, L]
  return chosen * L + first_above(members, inner);
}

}  // namespace

SampledTokens BatchSampler::sample_with(const at::Tensor& logits, const std::vector<int64_t>& steps) const {
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
    const auto pick = pick_by_cdf(filtered.exp(), uniform).view({-1, 1});
    tokens = order.gather(1, pick).squeeze(1);
    sampling_lp = filtered.gather(1, pick).squeeze(1);
  } else {
    const auto lp = unit_temperature_ ? model_lp : at::log_softmax(scaled, -1);
    tokens = pick_by_cdf(lp.exp(), uniform).squeeze(1);
    sampling_lp = lp.gather(1, tokens.unsqueeze(1)).squeeze(1);
  }
  tokens = at::where(greedy_, greedy_tokens, tokens);
  sampling_lp = at::where(greedy_, at::zeros_like(sampling_lp), sampling_lp);
  return {tokens, sampling_lp, model_lp.gather(1, tokens.unsqueeze(1)).squeeze(1)};
}

}  // namespace crucible::lm
