#include "lm/training/chosen_logprobs.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <stdexcept>

namespace crucible::lm {
namespace {

int64_t rows_per_chunk(int64_t requested, int64_t vocabulary) {
  if (requested > 0) return requested;
  return std::max<int64_t>(1, (int64_t{1} << 30) / (4 * std::max<int64_t>(1, vocabulary)));
}

// Logits in float32, as the model's own logits() gives them: the product in the model's dtype, then widened.
at::Tensor chunk_logits(const at::Tensor& hidden, const at::Tensor& head) { return at::mm(hidden, head.t()).to(at::kFloat); }

struct ChosenFn : torch::autograd::Function<ChosenFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                                                const at::Tensor& head, const at::Tensor& chosen, int64_t chunk) {
    const int64_t n = hidden.size(0);
    auto logprobs = at::empty({n}, hidden.options().dtype(at::kFloat));
    auto entropy = at::empty({n}, hidden.options().dtype(at::kFloat));
    auto lse = at::empty({n}, hidden.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t rows = std::min(chunk, n - begin);
      const auto logits = chunk_logits(hidden.narrow(0, begin, rows), head);
      const auto norm = at::logsumexp(logits, -1);
      lse.narrow(0, begin, rows).copy_(norm);
      logprobs.narrow(0, begin, rows)
          .copy_(logits.gather(1, chosen.narrow(0, begin, rows).unsqueeze(1)).squeeze(1) - norm);
      // H = lse - sum(p * logits), with p = exp(logits - lse).
      entropy.narrow(0, begin, rows).copy_(norm - (at::exp(logits - norm.unsqueeze(1)) * logits).sum(-1));
    }
    ctx->save_for_backward({hidden, head, chosen, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->mark_non_differentiable({entropy});
    return {logprobs, entropy};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& head = saved[1];
    const auto& chosen = saved[2];
    const auto& lse = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto& grad = grads[0];
    at::Tensor grad_hidden;
    if (grad.defined()) {
      const int64_t n = hidden.size(0);
      grad_hidden = at::empty_like(hidden);
      for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t rows = std::min(chunk, n - begin);
        const auto g = grad.narrow(0, begin, rows).unsqueeze(1);
        // d log p(chosen) / d logits = onehot(chosen) - softmax(logits).
        auto d = at::exp(chunk_logits(hidden.narrow(0, begin, rows), head) - lse.narrow(0, begin, rows).unsqueeze(1));
        d.mul_(g.neg());
        d.scatter_add_(1, chosen.narrow(0, begin, rows).unsqueeze(1), g);
        grad_hidden.narrow(0, begin, rows).copy_(at::mm(d.to(hidden.scalar_type()), head));
      }
    }
    return {grad_hidden, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ChosenLogprobs chosen_logprobs(const at::Tensor& hidden, const at::Tensor& head, const at::Tensor& chosen,
                               int64_t chunk_rows) {
  if (head.requires_grad()) throw std::invalid_argument("chosen_logprobs: the output head is not trained here");
  auto out = ChosenFn::apply(hidden, head, chosen, rows_per_chunk(chunk_rows, head.size(0)));
  return {out[0], out[1]};
}

}  // namespace crucible::lm
