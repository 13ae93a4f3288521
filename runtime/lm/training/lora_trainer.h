#pragma once
#include <optional>
// Trains a LoRA adapter: AdamW over the adapter's parameters only, micro-batches with gradient accumulation,
// gradient-norm clipping. One call = one optimizer step over a whole batch.
#include <memory>

#include "lm/model/lora.h"
#include "lm/training/policy_loss.h"
#include "lm/model/transformer.h"

namespace crucible::lm {

struct TrainerOptions {
  double learning_rate = 1e-4;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int64_t micro_batch = 8;     // sequences per forward/backward
  // Recompute each block in the backward pass instead of keeping its activations (block_checkpoint.h): larger
  // micro-batches fit for about one more forward pass of compute. Needs LoRA dropout 0 (a second run must match).
  bool activation_checkpointing = false;
  LossOptions loss;
};

struct TrainMetrics {
  double loss = 0;
  std::optional<double> kl;  // mean per completion token, policy vs base (k3 estimator); unset: not measured
  double entropy = 0;        // mean per completion token
  double clip_fraction = 0;  // share of completion tokens where the clip was binding
  double grad_norm = 0;      // before clipping
  double distill_kl = 0;     // SDPO: mean KL(student || teacher) per taught completion token
  int64_t tokens = 0, dropped_sequences = 0, taught_sequences = 0;
};

class LoraTrainer {
 public:
  LoraTrainer(const Transformer& model, LoraAdapter& adapter, TrainerOptions options);
  ~LoraTrainer();

  TrainMetrics policy_step(const SequenceBatch& batch);  // GRPO / importance sampling
  TrainMetrics sft_step(const SequenceBatch& batch);     // supervised: completion tokens' NLL
  double evaluate_nll(const SequenceBatch& batch) const;  // mean completion-token NLL, no update
  int64_t steps() const { return steps_; }

  // A checkpoint directory: adapter/ (PEFT format), optimizer.pt (AdamW moments), trainer.json (step count).
  // Restoring into a trainer of the same adapter shape continues exactly where the saved one stopped.
  void save_checkpoint(const std::filesystem::path& dir) const;
  void load_checkpoint(const std::filesystem::path& dir);

 private:
  template <typename MicroLoss>
  TrainMetrics step(const SequenceBatch& batch, MicroLoss&& micro_loss);

  const Transformer& model_;
  LoraAdapter& adapter_;
  TrainerOptions options_;
  struct Optimizer;
  std::unique_ptr<Optimizer> optimizer_;
  int64_t steps_ = 0;
};

}  // namespace crucible::lm
