#include "lm/policy_loss.h"

#include "lm/self_distillation.h"

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

void LossMetrics::add(Sum which, const at::Tensor& value) {
  const auto v = value.detach().to(at::kDouble);
  auto& sum = sums_[which];
  sum = sum.defined() ? sum + v : v;
}

std::array<double, LossMetrics::count> LossMetrics::read() const {
  std::array<double, count> out{};
  std::vector<at::Tensor> defined;
  std::vector<int> which;
  for (int i = 0; i < count; ++i)
    if (sums_[i].defined()) defined.push_back(sums_[i].reshape({1})), which.push_back(i);
  if (defined.empty()) return out;
  const auto host = at::cat(defined).to(at::kCPU);  // one wait for the device
  const auto* values = host.data_ptr<double>();
  for (std::size_t k = 0; k < which.size(); ++k) out[which[k]] = values[k];
  return out;
}

at::Tensor queued_copy(const at::Tensor& host, c10::Device device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

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
  return {queued_copy(tokens, device), queued_copy(valid, device), queued_copy(completion, device)};
}

TokenLogprobs token_logprobs(const Transformer& model, const at::Tensor& tokens, const at::Tensor& valid,
                             std::optional<bool> causal_prefix) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  model.reserve_positions(T);
  auto cache = model.make_cache(B, T);
  const auto hidden = model.hidden_states(tokens, whole_sequences(valid, causal_prefix), cache);
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
  // pack_rows right-pads every row: the attention's shape is known without asking the device.
  const auto current = token_logprobs(model, rows.tokens, rows.valid, /*causal_prefix=*/true);
  // The base model's log-probs, only where the KL is used or asked for.
  const bool kl_needed = o.kl_coef > 0 || o.measure_kl;
  at::Tensor reference;
  if (kl_needed) {
    at::NoGradGuard no_grad;
    AdapterOff off(adapter);
    reference = token_logprobs(model, rows.tokens, rows.valid, /*causal_prefix=*/true).logprobs;
  }
  // The sampler's log-probs where given; on-policy rows use the current ones (ratio 1, gradient of log pi). Made on
  // the host and queued: nothing here waits for the forward pass.
  at::Tensor old;
  {
    const int64_t T = rows.tokens.size(1);
    auto given = at::zeros({n, T - 1}, at::kFloat);
    auto has = at::zeros({n, T - 1}, at::kBool);
    auto values = given.accessor<float, 2>();
    auto present = has.accessor<bool, 2>();
    for (int64_t r = 0; r < n; ++r) {
      const auto i = begin + r;
      if (i >= batch.old_logprobs.size() || batch.old_logprobs[i].empty()) continue;
      const auto& lp = batch.old_logprobs[i];
      const int64_t p = batch.prompt_lengths[i];
      if (static_cast<int64_t>(lp.size()) != static_cast<int64_t>(batch.sequences[i].size()) - p)
        throw std::invalid_argument("old_logprobs must have one value per completion token");
      for (std::size_t j = 0; j < lp.size(); ++j) {
        values[r][p - 1 + static_cast<int64_t>(j)] = lp[j];
        present[r][p - 1 + static_cast<int64_t>(j)] = true;
      }
    }
    old = at::where(queued_copy(has, device), queued_copy(given, device), current.logprobs.detach());
  }
  auto mask = rows.completion;
  if (o.max_logprob_mismatch) {
    const auto per_row = ((old - current.logprobs.detach()).abs() * mask).sum(1) / mask.sum(1).clamp_min(1);
    const auto keep = (per_row <= *o.max_logprob_mismatch).to(at::kFloat);
    metrics.add(LossMetrics::dropped_sequences, n - keep.sum());
    mask = mask * keep.unsqueeze(1);
  }
  std::vector<float> adv(batch.advantages.begin() + begin, batch.advantages.begin() + end);
  const auto advantages = queued_copy(at::tensor(adv), device).unsqueeze(1);
  const auto ratio = at::exp(current.logprobs - old);
  at::Tensor per_token;
  if (o.kind == LossKind::grpo_clip) {
    const auto unclipped = ratio * advantages;
    const auto clipped = at::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high) * advantages;
    per_token = -at::min(unclipped, clipped);
    metrics.add(LossMetrics::clip_fraction, ((clipped < unclipped).to(at::kFloat) * mask).sum());
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
    metrics.add(LossMetrics::distill, (distill.per_token.detach() * taught_mask).sum());
    metrics.add(LossMetrics::taught_sequences, distill.taught.sum());
    metrics.add(LossMetrics::taught_tokens, taught_mask.sum());
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
  metrics.add(LossMetrics::loss, loss);
  if (kl_needed) {
    metrics.add(LossMetrics::kl, (kl.detach() * mask).sum());
    metrics.kl_measured = true;
  }
  metrics.add(LossMetrics::entropy, (current.entropy.detach() * mask).sum());
  metrics.add(LossMetrics::tokens, mask.sum());
  return loss;
}

at::Tensor sft_loss(const Transformer& model, const SequenceBatch& batch, std::size_t begin, std::size_t end,
                    int64_t batch_tokens, LossMetrics& metrics) {
  const auto rows = pack_rows(batch, begin, end, model.options().device);
  const auto current = token_logprobs(model, rows.tokens, rows.valid, /*causal_prefix=*/true);
  const auto loss = -(current.logprobs * rows.completion).sum() / static_cast<double>(std::max<int64_t>(1, batch_tokens));
  metrics.add(LossMetrics::loss, loss);
  metrics.add(LossMetrics::entropy, (current.entropy.detach() * rows.completion).sum());
  metrics.add(LossMetrics::tokens, rows.completion.sum());
  return loss;
}

}  // namespace crucible::lm
