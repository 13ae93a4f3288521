// Self-distillation (SDPO) on the tiny fixture model: the student, trained on the KL to a teacher that reads the
// same completion after another prompt, moves its next-token distributions towards the teacher's; sequences without
// a teacher are untouched by the distillation term.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <doctest/doctest.h>

#include "lm/golden_outputs.h"
#include "lm/model/lora.h"
#include "lm/training/lora_trainer.h"
#include "lm/training/policy_loss.h"
#include "lm/training/self_distillation.h"
#include "lm/model/transformer.h"
#include "support.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

// Mean KL(student || teacher) over the completion tokens of row 0, at the adapter's current weights.
double completion_kl(const Transformer& model, const SequenceBatch& batch) {
  at::NoGradGuard no_grad;
  const auto rows = pack_rows(batch, 0, 1, c10::Device(c10::kCPU));
  const auto student = token_logprobs(model, rows.tokens, rows.valid, true).distribution;
  const auto terms = self_distillation_terms(model, batch, 0, 1, student);
  return ((terms.per_token * rows.completion).sum() / rows.completion.sum()).item<double>();
}

// The student's distributions at the completion positions of row 0, as probabilities [L, vocab].
at::Tensor completion_distributions(const Transformer& model, const std::vector<int64_t>& prompt,
                                    const std::vector<int64_t>& completion) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> ids = prompt;
  ids.insert(ids.end(), completion.begin(), completion.end());
  const auto t = at::tensor(ids, at::kLong).view({1, -1});
  const auto all = token_logprobs(model, t, at::ones_like(t).to(at::kBool), true).distribution[0];
  return all.narrow(0, static_cast<int64_t>(prompt.size()) - 1, static_cast<int64_t>(completion.size())).exp();
}

// Mean KL(p || q) over positions, for distributions [L, vocab].
double mean_kl(const at::Tensor& p, const at::Tensor& q) { return (p * (p.log() - q.log())).sum(-1).mean().item<double>(); }

}  // namespace

TEST_CASE("sdpo: training on the distillation term moves the student's distributions towards the teacher's") {
  auto model = Transformer::load(test::lm_fixture("qwen2_tiny"));
  LoraConfig lora;
  lora.rank = 8;
  lora.alpha = 16;
  auto adapter = LoraAdapter::create(model.config(), lora, c10::Device(c10::kCPU), at::kFloat, 3);
  model.use_adapter(&adapter);
  const auto g = test::golden("qwen2_tiny");
  // The student sees prompt 1; its teacher sees prompt 0 followed by prompt 1 (the "feedback" is extra context).
  const std::vector<int64_t> student_prompt = g.prompts[1];
  std::vector<int64_t> teacher_prompt = g.prompts[0];
  teacher_prompt.insert(teacher_prompt.end(), g.prompts[1].begin(), g.prompts[1].end());
  const std::vector<int64_t> completion(g.greedy[1].begin(), g.greedy[1].begin() + 6);
  SequenceBatch batch;
  std::vector<int64_t> seq = student_prompt;
  seq.insert(seq.end(), completion.begin(), completion.end());
  batch.sequences = {seq};
  batch.prompt_lengths = {static_cast<int64_t>(student_prompt.size())};
  batch.advantages = {0.0f};  // no policy-gradient signal: only the teacher moves the student
  batch.teacher_prompts = {teacher_prompt};

  const auto teacher_before = completion_distributions(model, teacher_prompt, completion);
  const auto student_before = completion_distributions(model, student_prompt, completion);
  const double kl_before = completion_kl(model, batch);
  const double fixed_before = mean_kl(student_before, teacher_before);
  REQUIRE(kl_before > 1e-2);  // the two contexts do give different distributions

  // A small step first: the teacher is the live policy and moves with the student, so the student is compared with
  // where the teacher stood before the step (the target the gradient saw).
  TrainerOptions options;
  options.learning_rate = 1e-4;
  options.loss.distill_weight = 1.0;
  LoraTrainer trainer(model, adapter, options);
  const auto first = trainer.policy_step(batch);
  CHECK(first.taught_sequences == 1);
  CHECK(first.distill_kl == doctest::Approx(kl_before).epsilon(1e-3));
  CHECK(first.grad_norm > 0);
  const auto student_early = completion_distributions(model, student_prompt, completion);
  const double fixed_after = mean_kl(student_early, teacher_before);

  // Then until the two agree: the loss the student minimises is the KL itself.
  LoraTrainer faster(model, adapter, [&] { auto o = options; o.learning_rate = 2e-2; return o; }());
  for (int step = 0; step < 20; ++step) faster.policy_step(batch);
  const double kl_after = completion_kl(model, batch);
  MESSAGE("KL(student || teacher before the step) " << fixed_before << " -> " << fixed_after
                                                   << "; KL(student || teacher), 20 steps later " << kl_before << " -> "
                                                   << kl_after);
  CHECK(fixed_before == doctest::Approx(kl_before).epsilon(1e-4));
  CHECK(fixed_after < 0.98 * fixed_before);
  CHECK(kl_after < 0.1 * kl_before);
}

TEST_CASE("sdpo: a sequence without a teacher gets no gradient from the distillation term, and mixing keeps GRPO's") {
  auto model = Transformer::load(test::lm_fixture("qwen2_tiny"));
  auto adapter = LoraAdapter::create(model.config(), LoraConfig{}, c10::Device(c10::kCPU), at::kFloat, 4);
  const auto g = test::golden("qwen2_tiny");
  SequenceBatch batch;
  std::vector<int64_t> seq = g.prompts[1];
  seq.insert(seq.end(), g.greedy[1].begin(), g.greedy[1].begin() + 5);
  batch.sequences = {seq};
  batch.prompt_lengths = {static_cast<int64_t>(g.prompts[1].size())};
  batch.advantages = {1.0f};

  TrainerOptions pure;
  pure.loss.distill_weight = 1.0;
  LoraTrainer untaught(model, adapter, pure);
  const auto m = untaught.policy_step(batch);  // w = 1 and no teacher: nothing to learn from
  CHECK(m.taught_sequences == 0);
  CHECK(m.grad_norm == doctest::Approx(0.0));
  CHECK(m.loss == doctest::Approx(0.0));

  TrainerOptions mixed;
  mixed.loss.distill_weight = 0.5;
  LoraTrainer half(model, adapter, mixed);
  const auto h = half.policy_step(batch);  // half of GRPO's term remains
  CHECK(h.grad_norm > 0);
  CHECK(h.loss < 0);
}
