#pragma once
// Gradient checks by central differences: a sequence's total log-probability, and its change when one entry of a
// parameter moves by ±h.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <vector>

#include "lm/model/transformer.h"
#include "lm/training/policy_loss.h"

namespace crucible::test {

inline double sequence_logprob(const lm::Transformer& model, const std::vector<int64_t>& ids) {
  const auto t = at::tensor(ids, at::kLong).view({1, -1});
  return lm::token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().item<double>();
}

// d(sequence_logprob)/d(parameter.view(-1)[flat]) by central differences; the entry is restored afterwards.
inline double numeric_gradient(const lm::Transformer& model, const std::vector<int64_t>& ids, at::Tensor parameter,
                               int64_t flat, double h = 1e-2) {
  at::NoGradGuard no_grad;
  auto entry = parameter.view(-1)[flat];
  const float original = entry.item<float>();
  entry.fill_(original + h);
  const double plus = sequence_logprob(model, ids);
  entry.fill_(original - h);
  const double minus = sequence_logprob(model, ids);
  entry.fill_(original);
  return (plus - minus) / (2 * h);
}

}  // namespace crucible::test
