#include "lm/sampler.h"

#include <ATen/ATen.h>

#include <limits>

namespace crucible::lm {
namespace {

int32_t as_int32(uint32_t x) { return static_cast<int32_t>(x); }

// x ^ (x >>> s) on int32 tensors (>> on signed tensors is arithmetic, so mask the sign bits back out).
at::Tensor xorshift(const at::Tensor& x, int s) {
  return at::bitwise_xor(x, at::bitwise_and(x.__rshift__(s), as_int32((1u << (32 - s)) - 1)));
}

int32_t mix_of_step(int64_t step) { return as_int32(static_cast<uint32_t>(step + 1) * 0x85EBCA77u); }

}  // namespace

BatchSampler::BatchSampler(const std::vector<SamplingParams>& rows, int64_t vocab_size, c10::Device device) {
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<float> inv_t(B), top_p(B);
  std::vector<int64_t> top_k(B);
  std::vector<int32_t> keys(B);
  std::vector<uint8_t> greedy(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& r = rows[b];
    greedy[b] = r.temperature <= 0.0;
    inv_t[b] = greedy[b] ? 1.0f : static_cast<float>(1.0 / r.temperature);
    top_p[b] = static_cast<float>(r.top_p);
    top_k[b] = r.top_k > 0 && r.top_k < vocab_size ? r.top_k : vocab_size;
    keys[b] = as_int32(static_cast<uint32_t>(splitmix64(r.seed)));
    any_filter_ |= !greedy[b] && (r.top_p < 1.0 || top_k[b] < vocab_size);
    any_sampled_ |= !greedy[b];
  }
  const auto on = [&](at::Tensor t) { return t.to(device); };
  inv_temperature_ = on(at::tensor(inv_t).view({B, 1}));
  top_p_ = on(at::tensor(top_p).view({B, 1}));
  top_k_ = on(at::tensor(top_k).view({B, 1}));
  row_keys_ = on(at::tensor(keys).view({B, 1}));
  greedy_ = on(at::tensor(greedy).to(at::kBool));
  token_mix_ = on(at::arange(vocab_size, at::kInt).mul(as_int32(0x9E3779B1u)).view({1, vocab_size}));
}

// A 32-bit integer hash (xorshift-multiply rounds) of row key, step and token, mapped into (0, 1).
at::Tensor BatchSampler::uniform_noise(const at::Tensor& token_mix, const at::Tensor& step_mix) const {
  auto x = at::bitwise_xor(token_mix + row_keys_, step_mix);
  x = xorshift(x, 16).mul(as_int32(0x7FEB352Du));
  x = xorshift(x, 15).mul(as_int32(0x846CA68Bu));
  x = xorshift(x, 16);
  auto bits = at::bitwise_and(x.__rshift__(8), 0xFFFFFF).to(at::kFloat);
  return (bits + 0.5) * (1.0 / 16777216.0);
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, int64_t step) const {
  return sample_with(logits, at::full({1, 1}, mix_of_step(step), row_keys_.options()));
}

SampledTokens BatchSampler::sample(const at::Tensor& logits, const std::vector<int64_t>& steps) const {
  std::vector<int32_t> mix;
  for (auto s : steps) mix.push_back(mix_of_step(s));
  return sample_with(logits, at::tensor(mix).view({-1, 1}).to(row_keys_.device()));
}

SampledTokens BatchSampler::sample_with(const at::Tensor& logits, const at::Tensor& step_mix) const {
  const auto model_lp = at::log_softmax(logits, -1);
  const auto greedy_tokens = logits.argmax(-1);
  if (!any_sampled_) {
    return {greedy_tokens, at::zeros({logits.size(0)}, logits.options()),
            model_lp.gather(1, greedy_tokens.unsqueeze(1)).squeeze(1)};
  }
  const auto scaled = logits * inv_temperature_;
  at::Tensor tokens, sampling_lp;
  if (any_filter_) {
    // Filter in sorted order, as transformers does: top-k first, then top-p over what remains.
    auto [sorted, order] = scaled.sort(-1, /*descending=*/true);
    const auto rank = at::arange(logits.size(1), top_k_.options()).view({1, -1});
    auto keep = rank < top_k_;
    auto probs = at::softmax(sorted.masked_fill(at::logical_not(keep), -std::numeric_limits<float>::infinity()), -1);
    keep = keep & ((probs.cumsum(-1) - probs) < top_p_);
    keep.select(1, 0).fill_(true);
    const auto filtered = sorted.masked_fill(at::logical_not(keep), -std::numeric_limits<float>::infinity());
    const auto token_mix = token_mix_.expand({logits.size(0), -1}).gather(1, order);
    const auto gumbel = -at::log(-at::log(uniform_noise(token_mix, step_mix)));
    const auto pick = (filtered + gumbel).argmax(-1, /*keepdim=*/true);
    tokens = order.gather(1, pick).squeeze(1);
    sampling_lp = at::log_softmax(filtered, -1).gather(1, pick).squeeze(1);
  } else {
    const auto gumbel = -at::log(-at::log(uniform_noise(token_mix_, step_mix)));
    tokens = (scaled + gumbel).argmax(-1);
    sampling_lp = at::log_softmax(scaled, -1).gather(1, tokens.unsqueeze(1)).squeeze(1);
  }
  tokens = at::where(greedy_, greedy_tokens, tokens);
  sampling_lp = at::where(greedy_, at::zeros_like(sampling_lp), sampling_lp);
  return {tokens, sampling_lp, model_lp.gather(1, tokens.unsqueeze(1)).squeeze(1)};
}

}  // namespace crucible::lm
