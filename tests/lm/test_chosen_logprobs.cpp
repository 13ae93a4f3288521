// The chunked chosen-token log-probs against the whole log-softmax: the same values, entropies and gradients, for
// chunks that divide the positions, leave a remainder, or hold them all.
#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include "lm/training/chosen_logprobs.h"

using namespace crucible::lm;

TEST_CASE("chosen log-probs in chunks equal the whole log-softmax, with the same gradient") {
  at::manual_seed(11);
  const int64_t n = 10, h = 16, v = 50;
  const auto head = at::randn({v, h}, at::kDouble).to(at::kFloat);
  const auto chosen = at::randint(0, v, {n}, at::kLong);
  const auto base = at::randn({n, h});
  const auto upstream = at::randn({n});  // a loss's weights on each position

  auto whole = base.clone().requires_grad_(true);
  const auto all = at::log_softmax(at::mm(whole, head.t()).to(at::kFloat), -1);
  const auto expected_lp = all.gather(1, chosen.unsqueeze(1)).squeeze(1);
  const auto expected_entropy = -(all.exp() * all).sum(-1);
  (expected_lp * upstream).sum().backward();

  for (int64_t chunk : {1, 3, 10, 0}) {
    CAPTURE(chunk);
    auto x = base.clone().requires_grad_(true);
    const auto got = chosen_logprobs(x, head, chosen, chunk);
    CHECK(at::allclose(got.logprobs, expected_lp.detach(), 1e-5, 1e-5));
    // lse - sum(p * logits) cancels more than the log-softmax's sum: float32 agrees to about 1e-5 here.
    CHECK(at::allclose(got.entropy, expected_entropy.detach(), 1e-4, 1e-4));
    CHECK_FALSE(got.entropy.requires_grad());
    (got.logprobs * upstream).sum().backward();
    CHECK(at::allclose(x.grad(), whole.grad(), 1e-5, 1e-5));
  }
  CHECK_THROWS_AS(chosen_logprobs(base, head.clone().requires_grad_(true), chosen), std::invalid_argument);
}
