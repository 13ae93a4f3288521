#include "lm/training/lora_trainer.h"

#include "lm/format/safetensors.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/types.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace crucible::lm {

struct LoraTrainer::Optimizer {
  std::vector<at::Tensor> parameters;
  torch::optim::AdamW adamw;
};

LoraTrainer::LoraTrainer(const Transformer& model, LoraAdapter& adapter, TrainerOptions options)
    : model_(model), adapter_(adapter), options_(options) {
  if (options.activation_checkpointing && adapter.config().dropout > 0)
    throw std::invalid_argument("activation checkpointing recomputes each block, so LoRA dropout must be 0 (it is " +
                                std::to_string(adapter.config().dropout) + ")");
  auto parameters = adapter.parameters();
  torch::optim::AdamWOptions o(options.learning_rate);
  o.betas({options.beta1, options.beta2}).eps(options.eps).weight_decay(options.weight_decay);
  optimizer_.reset(new Optimizer{parameters, torch::optim::AdamW(parameters, o)});
}

LoraTrainer::~LoraTrainer() = default;

template <typename MicroLoss>
TrainMetrics LoraTrainer::step(const SequenceBatch& batch, MicroLoss&& micro_loss) {
  if (batch.sequences.empty()) throw std::invalid_argument("an empty training batch");
  if (batch.prompt_lengths.size() != batch.sequences.size())
    throw std::invalid_argument("a training batch needs one prompt length per sequence");
  model_.use_adapter(&adapter_);
  adapter_.set_training(true);
  // For this step only: the same model also samples and scores, where nothing is recorded for a backward pass.
  struct Checkpointing {
    const Transformer& model;
    bool before;
    ~Checkpointing() { model.set_activation_checkpointing(before); }
  } restore{model_, model_.activation_checkpointing()};
  model_.set_activation_checkpointing(options_.activation_checkpointing);
  optimizer_->adamw.zero_grad();
  const int64_t batch_tokens = completion_tokens(batch);
  LossMetrics sums;
  const std::size_t micro = static_cast<std::size_t>(std::max<int64_t>(1, options_.micro_batch));
  for (std::size_t begin = 0; begin < batch.sequences.size(); begin += micro) {
    const auto end = std::min(batch.sequences.size(), begin + micro);
    micro_loss(begin, end, batch_tokens, sums).backward();
  }
  adapter_.set_training(false);
  TrainMetrics m;
  m.grad_norm = options_.max_grad_norm > 0
                    ? torch::nn::utils::clip_grad_norm_(optimizer_->parameters, options_.max_grad_norm)
                    : torch::nn::utils::clip_grad_norm_(optimizer_->parameters, 1e30);
  optimizer_->adamw.step();
  ++steps_;
  const double tokens = std::max<int64_t>(1, sums.tokens);
  m.loss = sums.loss;
  if (sums.kl_measured) m.kl = sums.kl / tokens;
  m.entropy = sums.entropy / tokens;
  m.clip_fraction = sums.clip_fraction / tokens;
  m.tokens = sums.tokens;
  m.dropped_sequences = sums.dropped_sequences;
  m.distill_kl = sums.distill / static_cast<double>(std::max<int64_t>(1, sums.taught_tokens));
  m.taught_sequences = sums.taught_sequences;
  return m;
}

TrainMetrics LoraTrainer::policy_step(const SequenceBatch& batch) {
  if (batch.advantages.size() != batch.sequences.size())
    throw std::invalid_argument("a policy batch needs one advantage per sequence");
  return step(batch, [&](std::size_t begin, std::size_t end, int64_t tokens, LossMetrics& sums) {
    return policy_loss(model_, adapter_, batch, begin, end, options_.loss, tokens, sums);
  });
}

TrainMetrics LoraTrainer::sft_step(const SequenceBatch& batch) {
  return step(batch, [&](std::size_t begin, std::size_t end, int64_t tokens, LossMetrics& sums) {
    return sft_loss(model_, batch, begin, end, tokens, sums);
  });
}

void LoraTrainer::save_checkpoint(const std::filesystem::path& dir) const {
  std::filesystem::create_directories(dir);
  adapter_.save_peft(dir / "adapter");
  torch::save(optimizer_->adamw, (dir / "optimizer.pt").string());
  std::ofstream(dir / "trainer.json") << nlohmann::json{{"steps", steps_}}.dump() << "\n";
}

void LoraTrainer::load_checkpoint(const std::filesystem::path& dir) {
  const auto& o = model_.options();
  const auto dtype = adapter_.parameters().front().scalar_type();
  adapter_.copy_from(LoraAdapter::load_peft(dir / "adapter", model_.config(), o.device, dtype));
  torch::load(optimizer_->adamw, (dir / "optimizer.pt").string());
  try {
    steps_ = nlohmann::json::parse(std::ifstream(dir / "trainer.json")).at("steps").get<int64_t>();
  } catch (const std::exception& e) {
    throw ModelFormatError((dir / "trainer.json").string() + ": " + e.what());
  }
}

double LoraTrainer::evaluate_nll(const SequenceBatch& batch) const {
  at::NoGradGuard no_grad;
  model_.use_adapter(&adapter_);
  LossMetrics sums;
  const int64_t tokens = completion_tokens(batch);
  const std::size_t micro = static_cast<std::size_t>(std::max<int64_t>(1, options_.micro_batch));
  double loss = 0;
  for (std::size_t begin = 0; begin < batch.sequences.size(); begin += micro)
    loss += sft_loss(model_, batch, begin, std::min(batch.sequences.size(), begin + micro), tokens, sums).item<double>();
  return loss;
}

}  // namespace crucible::lm
