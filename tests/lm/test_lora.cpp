// LoRA on the tiny fixture model: gradients, switching off, merging, PEFT files, and training that works
// (GRPO on a verifiable synthetic reward, SFT on held-out data).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <random>

#include "lm/training/block_checkpoint.h"
#include "lm/generation/generator.h"
#include "lm/golden_batch.h"
#include "lm/golden_outputs.h"
#include "lm/finite_difference.h"
#include "lm/model/lora.h"
#include "lm/training/lora_trainer.h"
#include "lm/training/policy_loss.h"
#include "lm/model/transformer.h"
#include "support.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

Transformer tiny() { return Transformer::load(test::lm_fixture("qwen2_tiny")); }

LoraAdapter adapter_for(const Transformer& model, uint64_t seed = 1, LoraConfig config = {}) {
  config.rank = 4;
  config.alpha = 8;
  return LoraAdapter::create(model.config(), config, c10::Device(c10::kCPU), at::kFloat, seed);
}

// Gives B random values so the adapter changes the model (a fresh B is zero).
void perturb(LoraAdapter& adapter, double scale = 0.05) {
  at::NoGradGuard no_grad;
  auto g = at::detail::createCPUGenerator(7);
  for (auto& p : adapter.parameters())
    if (p.abs().sum().item<double>() == 0) p.normal_(0, scale, g);
}

at::Tensor logits_of(const Transformer& model, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  return model.forward_full(at::tensor(ids, at::kLong).view({1, -1}))[0];
}

SequenceBatch one_sequence(const std::vector<int64_t>& ids, int64_t prompt) {
  SequenceBatch b;
  b.sequences = {ids};
  b.prompt_lengths = {prompt};
  b.advantages = {1.0f};
  return b;
}

// Four completions of one golden prompt, each a token longer than the last, with alternating advantages.
SequenceBatch greedy_batch(const test::GoldenOutputs& g, std::size_t prompt, int64_t shortest) {
  SequenceBatch batch;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<int64_t> seq = g.prompts[prompt];
    seq.insert(seq.end(), g.greedy[prompt].begin(), g.greedy[prompt].begin() + shortest + i);
    batch.sequences.push_back(seq);
    batch.prompt_lengths.push_back(g.prompts[prompt].size());
    batch.advantages.push_back(i % 2 ? 1.0f : -1.0f);
  }
  return batch;
}

}  // namespace

TEST_CASE("lora: a fresh adapter is the base model, switched off it is the base model again") {
  auto model = tiny();
  const auto g = test::golden("qwen2_tiny");
  auto adapter = adapter_for(model);
  model.use_adapter(&adapter);
  CHECK((logits_of(model, g.prompts[2]) - g.logits[2]).abs().max().item<float>() < 1e-4f);
  perturb(adapter);
  CHECK((logits_of(model, g.prompts[2]) - g.logits[2]).abs().max().item<float>() > 1e-2f);
  adapter.set_enabled(false);
  CHECK((logits_of(model, g.prompts[2]) - g.logits[2]).abs().max().item<float>() < 1e-4f);
}

TEST_CASE("lora: gradients of A and B match finite differences") {
  auto model = tiny();
  auto adapter = adapter_for(model);
  perturb(adapter, 0.2);
  model.use_adapter(&adapter);
  const auto ids = test::golden("qwen2_tiny").prompts[2];
  const auto params = adapter.parameters();
  for (const auto& p : params) p.mutable_grad() = at::Tensor();
  auto t = at::tensor(ids, at::kLong).view({1, -1});
  token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().backward();
  // A few entries of the q A (layer 0), the down B (layer 1) and the v B (layer 1).
  const std::vector<std::pair<std::size_t, int64_t>> probes = {{0, 3}, {0, 100}, {27, 5}, {5, 17}, {5, 40}};
  int checked = 0;
  for (const auto& [index, flat] : probes) {
    auto p = params[index];
    const double analytic = p.grad().view(-1)[flat].item<double>();
    const double numeric = test::numeric_gradient(model, ids, p, flat);
        CAPTURE(index);
    CAPTURE(flat);
    CHECK(analytic == doctest::Approx(numeric).epsilon(0.03).scale(1.0));
    checked += std::abs(analytic) > 1e-3;
  }
  CHECK(checked >= 3);  // the probes are not all trivially zero
}

TEST_CASE("lora: a fused projection's deltas in one product equal each target's delta side by side") {
  auto model = tiny();
  struct Row {
    const char* what;
    std::vector<LoraTarget> adapted;
  };
  const Row rows[] = {
      {"q, k and v all adapted", {LoraTarget::q, LoraTarget::k, LoraTarget::v}},
      {"k left out", {LoraTarget::q, LoraTarget::v}},
      {"only up", {LoraTarget::up}},
  };
  const auto& c = model.config();
  for (const auto& row : rows) {
    CAPTURE(row.what);
    LoraConfig config;
    config.targets = row.adapted;
    auto adapter = adapter_for(model, 3, config);
    perturb(adapter, 0.2);
    const auto x = at::randn({2, 5, c.hidden_size});
    for (const auto& targets : {std::vector<std::pair<LoraTarget, int64_t>>{{LoraTarget::q, c.num_heads * c.head_dim},
                                                                            {LoraTarget::k, c.num_kv_heads * c.head_dim},
                                                                            {LoraTarget::v, c.num_kv_heads * c.head_dim}},
                                std::vector<std::pair<LoraTarget, int64_t>>{{LoraTarget::gate, c.intermediate_size},
                                                                            {LoraTarget::up, c.intermediate_size}}}) {
      int64_t width = 0;
      std::vector<at::Tensor> parts;
      for (const auto& [target, w] : targets) {
        width += w;
        auto d = adapter.delta(1, target, x);
        parts.push_back(d.defined() ? d : at::zeros({2, 5, w}));
      }
      const auto out = at::randn({2, 5, width});
      const auto expected = out + at::cat(parts, -1);
      at::Tensor fused;
      if (targets.size() == 3)
        fused = adapter.plus_deltas(1, x, out, {targets[0], targets[1], targets[2]});
      else
        fused = adapter.plus_deltas(1, x, out, {targets[0], targets[1]});
      CHECK(at::allclose(fused, expected, 1e-5, 1e-5));
    }
  }
}

TEST_CASE("lora: merged weights give the adapter's outputs, unmerging restores the base") {
  auto model = tiny();
  const auto g = test::golden("qwen2_tiny");
  auto adapter = adapter_for(model);
  perturb(adapter);
  model.use_adapter(&adapter);
  const auto adapted = logits_of(model, g.prompts[3]);
  model.merge_adapter(adapter);
  adapter.set_enabled(false);
  CHECK((logits_of(model, g.prompts[3]) - adapted).abs().max().item<float>() < 1e-4f);
  model.merge_adapter(adapter, -1);
  CHECK((logits_of(model, g.prompts[3]) - g.logits[3]).abs().max().item<float>() < 1e-4f);
}

TEST_CASE("lora: generation folds the adapter's current values into the weights, and unfolds them after") {
  auto model = tiny();
  const auto g = test::golden("qwen2_tiny");
  auto adapter = adapter_for(model);
  perturb(adapter);
  model.use_adapter(&adapter);
  const auto bytes = [](int64_t) { return std::string(); };
  GeneratorOptions off;
  off.fold_adapter = false;
  Generator folding(model, bytes), adding(model, bytes, off);
  GenerationRequest r;
  r.prompt = g.prompts[1];
  r.max_new_tokens = 12;
  r.sampling.temperature = 0;
  const auto compare = [&] {
    const auto folded = folding.generate({r})[0], added = adding.generate({r})[0];
    CHECK(folded.tokens == added.tokens);
    REQUIRE(folded.model_logprobs.size() == added.model_logprobs.size());
    for (std::size_t i = 0; i < folded.model_logprobs.size(); ++i)
      CHECK(folded.model_logprobs[i] == doctest::Approx(added.model_logprobs[i]).epsilon(1e-4).scale(1.0));
    return folded.tokens;
  };
  const auto first = compare();
  CHECK_FALSE(model.adapter_folded());  // a forward pass after generate adds the deltas again
  CHECK((logits_of(model, g.prompts[3]) - g.logits[3]).abs().max().item<float>() > 1e-2f);

  // An optimizer-like update in place: the next generate folds the new values, not the first call's.
  {
    at::NoGradGuard no_grad;
    for (auto& p : adapter.parameters()) p.mul_(-3.0);
  }
  CHECK(compare() != first);

  // Gradients still reach the adapter after generation (a folded adapter would get none).
  for (const auto& p : adapter.parameters()) p.mutable_grad() = at::Tensor();
  auto t = at::tensor(g.prompts[2], at::kLong).view({1, -1});
  token_logprobs(model, t, at::ones_like(t).to(at::kBool)).logprobs.sum().backward();
  double grad = 0;
  for (const auto& p : adapter.parameters())
    if (p.grad().defined()) grad += p.grad().abs().sum().item<double>();
  CHECK(grad > 0);

  // Switched off, an adapter is neither folded nor added.
  adapter.set_enabled(false);
  r.max_new_tokens = 24;
  CHECK(folding.generate({r})[0].tokens == g.greedy[1]);
}

TEST_CASE("lora: PEFT files round-trip exactly and mismatches are refused") {
  test::ScratchDir dir("peft");
  auto model = tiny();
  LoraConfig config;
  config.targets = {LoraTarget::q, LoraTarget::v, LoraTarget::down};
  auto adapter = adapter_for(model, 3, config);
  perturb(adapter);
  adapter.save_peft(dir.path() / "a", "qwen2_tiny");
  const auto text = test::read_file(dir.path() / "a" / "adapter_config.json");
  CHECK(text.find("\"peft_type\": \"LORA\"") != std::string::npos);
  CHECK(text.find("\"down_proj\"") != std::string::npos);
  const auto file = SafetensorsFile::open(dir.path() / "a" / "adapter_model.safetensors");
  CHECK(file->find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"));
  CHECK(file->find("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"));
  CHECK(file->find("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight") == nullptr);

  auto loaded = LoraAdapter::load_peft(dir.path() / "a", model.config(), c10::Device(c10::kCPU), at::kFloat);
  const auto a = adapter.parameters(), b = loaded.parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], b[i]));
  const auto ids = test::golden("qwen2_tiny").prompts[1];
  model.use_adapter(&adapter);
  const auto x = logits_of(model, ids);
  model.use_adapter(&loaded);
  CHECK(at::equal(x, logits_of(model, ids)));

  auto cfg = test::read_file(dir.path() / "a" / "adapter_config.json");
  cfg.replace(cfg.find("\"r\": 4"), 6, "\"r\": 8");
  test::write_file(dir.path() / "a" / "adapter_config.json", cfg);
  CHECK_THROWS_WITH_AS(LoraAdapter::load_peft(dir.path() / "a", model.config(), c10::Device(c10::kCPU), at::kFloat),
                       doctest::Contains("lora_A.weight is [4, 64], but this model and the module's rank 8 need [8, 64]"),
                       ModelFormatError);
}

TEST_CASE("lora: an adapter made by PEFT gives PEFT's logits") {
  auto model = tiny();
  const auto dir = test::lm_fixture("qwen2_tiny_peft");
  auto adapter = LoraAdapter::load_peft(dir, model.config(), c10::Device(c10::kCPU), at::kFloat);
  CHECK(adapter.config().targets.size() == 7);
  CHECK(adapter.config().scale() == 2.0);
  model.use_adapter(&adapter);
  const auto expected = SafetensorsFile::open(dir / "expected.safetensors");
  for (const char* i : {"1", "3"}) {
    const auto ids = test::read_golden_ids("qwen2_tiny").at(std::string("prompt_") + i);
    const auto want = view_to_tensor(*expected->find(std::string("logits_") + i));
    CHECK((logits_of(model, ids) - want).abs().max().item<float>() < 1e-4f);
  }
  adapter.set_enabled(false);  // the base model again: far from PEFT's adapted logits
  const auto ids = test::read_golden_ids("qwen2_tiny").at("prompt_3");
  CHECK((logits_of(model, ids) - view_to_tensor(*expected->find("logits_3"))).abs().max().item<float>() > 1.0f);
}

TEST_CASE("grpo: KL is zero before the first update, clipped loss, metrics, and mismatch rejection") {
  auto model = tiny();
  auto adapter = adapter_for(model);
  TrainerOptions options;
  options.learning_rate = 1e-2;
  options.loss.kl_coef = 0.1;
  LoraTrainer trainer(model, adapter, options);
  const auto g = test::golden("qwen2_tiny");
  auto batch = greedy_batch(g, 1, 4);
  const auto first = trainer.policy_step(batch);
  REQUIRE(first.kl);
  CHECK(*first.kl == doctest::Approx(0.0).epsilon(1e-9).scale(1e-7));
  CHECK(first.clip_fraction == 0.0);
  CHECK(first.tokens == 4 + 5 + 6 + 7);
  CHECK(first.grad_norm > 0);
  const auto second = trainer.policy_step(batch);
  REQUIRE(second.kl);
  CHECK(*second.kl > 0);

  // Sampler log-probs far from the trainer's: rejected rows contribute nothing.
  options.loss.max_logprob_mismatch = 0.5;
  LoraTrainer strict(model, adapter, options);
  for (const auto& s : batch.sequences) batch.old_logprobs.push_back(std::vector<float>(s.size() - g.prompts[1].size(), -50.0f));
  batch.old_logprobs[0].assign(batch.old_logprobs[0].size(), 0.0f);
  const auto m = strict.policy_step(batch);
  CHECK(m.dropped_sequences >= 3);
}

TEST_CASE("grpo: without a KL penalty the base model is not run, unless the KL is asked for as a metric") {
  // The same two steps from the same adapter, with and without the metric: the metric changes nothing else.
  const auto batch = greedy_batch(test::golden("qwen2_tiny"), 2, 3);
  std::vector<TrainMetrics> runs[2];
  for (const bool measure : {false, true}) {
    auto model = tiny();
    auto adapter = adapter_for(model, 3);
    TrainerOptions options;
    options.learning_rate = 1e-2;
    options.loss.measure_kl = measure;
    LoraTrainer trainer(model, adapter, options);
    for (int step = 0; step < 2; ++step) runs[measure].push_back(trainer.policy_step(batch));
  }
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    CHECK_FALSE(runs[0][step].kl);
    REQUIRE(runs[1][step].kl);
    CHECK(runs[0][step].loss == runs[1][step].loss);
    CHECK(runs[0][step].grad_norm == runs[1][step].grad_norm);
  }
  CHECK(*runs[1][1].kl > 0);  // measured after the first update moved the policy
}

TEST_CASE("grpo: a verifiable synthetic reward rises within a few dozen steps") {
  // Reward: the share of generated tokens whose id is below 100 (about a tenth of the vocabulary).
  auto model = tiny();
  auto adapter = adapter_for(model, 5);
  TrainerOptions options;
  options.learning_rate = 3e-2;
  options.micro_batch = 16;
  LoraTrainer trainer(model, adapter, options);
  Generator generator(model, [](int64_t) { return std::string(); });
  const auto g = test::golden("qwen2_tiny");
  const std::vector<std::vector<int64_t>> prompts = {g.prompts[0], g.prompts[1]};
  const int group = 8, steps = 30;
  auto reward_of = [](const std::vector<int64_t>& tokens) {
    double hits = 0;
    for (auto t : tokens) hits += t < 100;
    return tokens.empty() ? 0.0 : hits / tokens.size();
  };
  std::vector<double> means;
  for (int step = 0; step < steps; ++step) {
    model.use_adapter(&adapter);
    std::vector<GenerationRequest> requests;
    for (std::size_t p = 0; p < prompts.size(); ++p)
      for (int i = 0; i < group; ++i) {
        GenerationRequest r;
        r.prompt = prompts[p];
        r.sampling = {1.0, 1.0, 0, static_cast<uint64_t>(step * 1000 + p * 100 + i)};
        r.max_new_tokens = 8;
        requests.push_back(r);
      }
    const auto out = generator.generate(requests);
    SequenceBatch batch;
    double total = 0;
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      std::vector<double> rewards;
      for (int i = 0; i < group; ++i) rewards.push_back(reward_of(out[p * group + i].tokens));
      double mean = 0, var = 0;
      for (auto r : rewards) mean += r / group;
      for (auto r : rewards) var += (r - mean) * (r - mean) / group;
      for (int i = 0; i < group; ++i) {
        const auto& c = out[p * group + i];
        std::vector<int64_t> seq = prompts[p];
        seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
        batch.sequences.push_back(seq);
        batch.prompt_lengths.push_back(prompts[p].size());
        batch.old_logprobs.push_back(c.sampling_logprobs);
        batch.advantages.push_back(static_cast<float>((rewards[i] - mean) / (std::sqrt(var) + 1e-4)));
        total += rewards[i];
      }
    }
    means.push_back(total / (prompts.size() * group));
    trainer.policy_step(batch);
  }
  const double early = (means[0] + means[1] + means[2]) / 3, late = (means[steps - 1] + means[steps - 2] + means[steps - 3]) / 3;
  MESSAGE("synthetic reward: first steps " << early << ", last steps " << late);
  CHECK(late > early + 0.2);
}

TEST_CASE("sft: supervised LoRA training lowers the held-out loss") {
  auto model = tiny();
  auto adapter = adapter_for(model, 9);
  TrainerOptions options;
  options.learning_rate = 2e-2;
  LoraTrainer trainer(model, adapter, options);
  // One completion (a fixed 12-token answer) after varied 3-token prompts: train on some prompts, hold others out.
  const std::vector<int64_t> answer = {282, 72, 297, 326, 10, 90, 11, 667, 281, 358, 496, 370};
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> token(3, 999);
  auto make = [&] {
    std::vector<int64_t> seq = {token(rng), token(rng), token(rng)};
    seq.insert(seq.end(), answer.begin(), answer.end());
    return seq;
  };
  SequenceBatch train, held_out;
  for (int s = 0; s < 16; ++s) {
    train.sequences.push_back(make());
    train.prompt_lengths.push_back(3);
  }
  for (int s = 0; s < 4; ++s) {
    held_out.sequences.push_back(make());
    held_out.prompt_lengths.push_back(3);
  }
  const double before = trainer.evaluate_nll(held_out);
  for (int step = 0; step < 25; ++step) trainer.sft_step(train);
  const double after = trainer.evaluate_nll(held_out);
  MESSAGE("held-out NLL per token: " << before << " -> " << after);
  CHECK(after < before - 1.0);
}

TEST_CASE("lora trainer: a checkpoint restored into a new trainer continues exactly") {
  test::ScratchDir dir("ckpt");
  auto model = tiny();
  const auto g = test::golden("qwen2_tiny");
  const SequenceBatch batch = test::golden_batch(g);
  TrainerOptions options;
  options.learning_rate = 1e-2;
  auto a = adapter_for(model, 11);
  LoraTrainer first(model, a, options);
  first.policy_step(batch);
  first.policy_step(batch);
  first.save_checkpoint(dir.path() / "step-2");
  first.policy_step(batch);

  auto b = adapter_for(model, 99);  // a different init: everything must come from the checkpoint
  LoraTrainer second(model, b, options);
  second.load_checkpoint(dir.path() / "step-2");
  CHECK(second.steps() == 2);
  second.policy_step(batch);
  const auto pa = a.parameters(), pb = b.parameters();
  float worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<float>());
  CHECK(worst < 1e-6f);
}

TEST_CASE("lora trainer: activation checkpointing gives the same step as keeping the activations") {
  auto model = tiny();
  const auto g = test::golden("qwen2_tiny");
  SequenceBatch batch;
  for (int i = 0; i < 4; ++i) {
    std::vector<int64_t> seq = g.prompts[i % 2];
    seq.insert(seq.end(), g.greedy[i % 2].begin(), g.greedy[i % 2].begin() + 3 + i);
    batch.sequences.push_back(seq);
    batch.prompt_lengths.push_back(g.prompts[i % 2].size());
    batch.advantages.push_back(i % 2 ? 1.0f : -0.7f);
  }
  TrainerOptions options;
  options.learning_rate = 1e-2;
  options.micro_batch = 2;
  options.loss.kl_coef = 0.1;  // the base model's forward pass too, which records nothing
  auto kept = adapter_for(model, 5), recomputed = adapter_for(model, 5);
  perturb(kept);
  perturb(recomputed);
  LoraTrainer plain(model, kept, options);
  options.activation_checkpointing = true;
  LoraTrainer checkpointing(model, recomputed, options);
  for (int step = 0; step < 2; ++step) {
    const auto a = plain.policy_step(batch);
    const auto b = checkpointing.policy_step(batch);
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    CHECK(b.grad_norm == doctest::Approx(a.grad_norm).epsilon(1e-4));
    CHECK(b.grad_norm > 0);
  }
  const auto pa = kept.parameters(), pb = recomputed.parameters();
  float worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<float>());
  CHECK(worst < 1e-5f);
  CHECK_FALSE(model.activation_checkpointing());  // only for the step

  LoraConfig noisy;
  noisy.dropout = 0.1;
  auto with_dropout = adapter_for(model, 5, noisy);
  CHECK_THROWS_AS(LoraTrainer(model, with_dropout, options), std::invalid_argument);
}

TEST_CASE("checkpointed: the block runs once forward and once more in the backward pass, with the same gradients") {
  const auto w = at::randn({4, 4}).requires_grad_(true);
  const auto x = at::randn({3, 4}).requires_grad_(true);
  int runs = 0;
  auto block = [&](const at::Tensor& in) {
    ++runs;
    return at::tanh(at::matmul(in, w)).sum(1);
  };
  const auto plain = block(x);
  plain.sum().backward();
  const auto wg = w.grad().clone(), xg = x.grad().clone();
  w.grad().zero_();
  x.grad().zero_();
  runs = 0;
  const auto y = checkpointed(x, block);
  CHECK(runs == 1);
  CHECK(at::allclose(y, plain));
  y.sum().backward();
  CHECK(runs == 2);
  CHECK(at::allclose(w.grad(), wg));
  CHECK(at::allclose(x.grad(), xg));
}
