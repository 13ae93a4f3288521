#include "lm/training/policy_loss.h"

#include "lm/training/chosen_logprobs.h"
#include "lm/training/self_distillation.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace crucible::lm {
namespace {

// Switches the adapter off for a scope (the base model's forward pass).
struct AdapterOff {
  explicit AdapterOff(LoraAdapter& a) : adapter(a), was(a.enabled()) { adapter.set_enabled(false); }
  ~AdapterOff() { adapter.set_enabled(was); }
  LoraAdapter& adapter;
  bool was;
};

int64_t longest_completion(const SequenceBatch& batch) {
  int64_t longest = 0;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i)
    longest = std::max<int64_t>(longest, batch.sequences[i].size() - batch.prompt_lengths[i]);
  return longest;
}

}  // namespace

int64_t completion_tokens(const SequenceBatch& batch) {
  int64_t n = 0;
  for (std::size_t i = 0; i < batch.sequences.size(); ++i) n += batch.sequences[i].size() - batch.prompt_lengths[i];
  return n;
}

PackedRows pack_rows(const SequenceBatch& batch, std::size_t begin, std::size_t end, c10::Device device) {
  const int64_t n = static_cast<int64_t>(end - begin);
  int64_t T = 2;
  for (std::size_t i = begin; i < end; ++i) T = std::max<int64_t>(T, batch.sequences[i].size());
  auto tokens = at::zeros({n, T}, at::kLong);
  auto valid = at::zeros({n, T}, at::kBool);
  auto completion = at::zeros({n, T - 1}, at::kFloat);
  auto tok = tokens.accessor<int64_t, 2>();
  auto ok = valid.accessor<bool, 2>();
  auto comp = completion.accessor<float, 2>();
  for (int64_t r = 0; r < n; ++r) {
    const auto& seq = batch.sequences[begin + r];
    const int64_t len = seq.size(), prompt = batch.prompt_lengths[begin + r];
    if (prompt < 1 || prompt > len) throw std::invalid_argument("a sequence's prompt length is outside it");
    for (int64_t t = 0; t < len; ++t) {
      tok[r][t] = seq[t];
      ok[r][t] = true;
    }
    for (int64_t t = prompt - 1; t + 1 < len; ++t) comp[r][t] = 1.0f;  // position t predicts token t + 1
  }
  return {tokens.to(device), valid.to(device), completion.to(device)};
}

TokenLogprobs token_logprobs(const Transformer& model, const at::Tensor& tokens, const at::Tensor& valid,
                             bool with_distribution) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  model.reserve_positions(T);
  auto cache = model.make_cache(B, T);
  const auto hidden = model.hidden_states(tokens, whole_sequences(valid), cache);
  if (!with_distribution) {
    const auto predicting = hidden.narrow(1, 0, T - 1).reshape({B * (T - 1), hidden.size(-1)});
    const auto chosen = chosen_logprobs(predicting, model.weights().lm_head, tokens.narrow(1, 1, T - 1).reshape({-1}));
    return {chosen.logprobs.view({B, T - 1}), chosen.entropy.view({B, T - 1}), at::Tensor()};
  }
  const auto all = at::log_softmax(model.logits(hidden.narrow(1, 0, T - 1)), -1);
  // Entropy is a metric: computed outside autograd, so no [B, T, vocab] tensor is kept for a backward pass.
  at::Tensor entropy;
  {
    at::NoGradGuard no_grad;
    entropy = -(all.exp() * all).sum(-1);
  }
  return {all.gather(2, tokens.narrow(1, 1, T - 1).unsqueeze(2)).squeeze(2), entropy, all};
}

at::Tensor policy_loss(const Transformer& model, LoraAdapter& adapter, const SequenceBatch& batch, std::size_t begin,
                       std::size_t end, const LossOptions& o, int64_t batch_tokens, LossMetrics& metrics) {
  const auto device = model.options().device;
  const auto rows = pack_rows(batch, begin, end, device);
  const int64_t n = static_cast<int64_t>(end - begin);
  model.use_adapter(&adapter);
  const auto current = token_logprobs(model, rows.tokens, rows.valid, /*with_distribution=*/o.distill_weight > 0);
  // The base model's log-probs, only where the KL is used or asked for.
  const bool kl_needed = o.kl_coef > 0 || o.measure_kl;
  at::Tensor reference;
  if (kl_needed) {
    at::NoGradGuard no_grad;
    AdapterOff off(adapter);
    reference = token_logprobs(model, rows.tokens, rows.valid).logprobs;
  }
  // The sampler's log-probs where given; on-policy rows use the current ones (ratio 1, gradient of log pi).
  auto old = current.logprobs.detach().clone();
  {
    auto host = old.to(at::kCPU).contiguous();
    auto acc = host.accessor<float, 2>();
    for (int64_t r = 0; r < n; ++r) {
      const auto i = begin + r;
      if (i >= batch.old_logprobs.size() || batch.old_logprobs[i].empty()) continue;
      const auto& lp = batch.old_logprobs[i];
      const int64_t p = batch.prompt_lengths[i];
      if (static_cast<int64_t>(lp.size()) != static_cast<int64_t>(batch.sequences[i].size()) - p)
        throw std::invalid_argument("old_logprobs must have one value per completion token");
      for (std::size_t j = 0; j < lp.size(); ++j) acc[r][p - 1 + static_cast<int64_t>(j)] = lp[j];
    }
    old = host.to(device);
  }
  auto mask = rows.completion;
  if (o.max_logprob_mismatch) {
    const auto per_row = ((old - current.logprobs.detach()).abs() * mask).sum(1) / mask.sum(1).clamp_min(1);
    const auto keep = (per_row <= *o.max_logprob_mismatch).to(at::kFloat);
    metrics.dropped_sequences += n - keep.sum().item<int64_t>();
    mask = mask * keep.unsqueeze(1);
  }
  std::vector<float> adv(batch.advantages.begin() + begin, batch.advantages.begin() + end);
  const auto advantages = at::tensor(adv).to(device).unsqueeze(1);
  const auto ratio = at::exp(current.logprobs - old);
  at::Tensor per_token;
  if (o.kind == LossKind::grpo_clip) {
    const auto unclipped = ratio * advantages;
    const auto clipped = at::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high) * advantages;
    per_token = -at::min(unclipped, clipped);
    metrics.clip_fraction += ((clipped < unclipped).to(at::kFloat) * mask).sum().item<double>();
  } else {
    per_token = -ratio * advantages;
  }
  at::Tensor kl;
  if (kl_needed) {
    const auto log_ratio = reference - current.logprobs;
    kl = at::exp(log_ratio) - log_ratio - 1;
  }
  if (o.distill_weight > 0) {
    // The teacher reads without LoRA dropout: its distributions are the target, not a noisy sample of it.
    const bool training = adapter.training();
    adapter.set_training(false);
    DistillationTerms distill;
    try {
      distill = self_distillation_terms(model, batch, begin, end, current.distribution);
    } catch (...) {
      adapter.set_training(training);
      throw;
    }
    adapter.set_training(training);
    per_token = (1.0 - o.distill_weight) * per_token + o.distill_weight * distill.per_token * distill.taught;
    const auto taught_mask = mask * distill.taught;
    metrics.distill += (distill.per_token.detach() * taught_mask).sum().item<double>();
    metrics.taught_sequences += distill.taught.sum().item<int64_t>();
    metrics.taught_tokens += taught_mask.sum().item<int64_t>();
  }
  // The KL penalty to the base model keeps its own weight, whatever share the distillation takes.
  if (o.kl_coef > 0) per_token = per_token + o.kl_coef * kl;

  at::Tensor loss;
  const double sequences = static_cast<double>(batch.sequences.size());
  switch (o.normalization) {
    case TokenNormalization::sequence_mean:
      loss = ((per_token * mask).sum(1) / mask.sum(1).clamp_min(1)).sum() / sequences;
      break;
    case TokenNormalization::token_sum: {
      const double length = o.normalization_length > 0 ? o.normalization_length : longest_completion(batch);
      loss = (per_token * mask).sum() / (sequences * std::max(1.0, length));
      break;
    }
    case TokenNormalization::token_mean:
      loss = (per_token * mask).sum() / static_cast<double>(std::max<int64_t>(1, batch_tokens));
      break;
  }
  metrics.loss += loss.item<double>();
  if (kl_needed) {
    metrics.kl += (kl.detach() * mask).sum().item<double>();
    metrics.kl_measured = true;
  }
  metrics.entropy += (current.entropy.detach() * mask).sum().item<double>();
  metrics.tokens += mask.sum().item<int64_t>();
  return loss;
}

at::Tensor sft_loss(const Transformer& model, const SequenceBatch& batch, std::size_t begin, std::size_t end,
                    int64_t batch_tokens, LossMetrics& metrics) {
  const auto rows = pack_rows(batch, begin, end, model.options().device);
  const auto current = token_logprobs(model, rows.tokens, rows.valid);
  const auto loss = -(current.logprobs * rows.completion).sum() / static_cast<double>(std::max<int64_t>(1, batch_tokens));
  metrics.loss += loss.item<double>();
  metrics.entropy += (current.entropy.detach() * rows.completion).sum().item<double>();
  metrics.tokens += rows.completion.sum().item<int64_t>();
  return loss;
}

}  // namespace crucible::lm
