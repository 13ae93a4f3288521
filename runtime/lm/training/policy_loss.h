#pragma once
// Policy-gradient losses on a language model with a LoRA adapter, over (prompt + completion) sequences:
// clipped-ratio GRPO/PPO, the plain importance-sampling loss, an optional KL penalty to the base model (the same
// model with the adapter switched off), and the metrics that watch training.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "lm/model/lora.h"
#include "lm/model/transformer.h"

namespace crucible::lm {

struct SequenceBatch {
  std::vector<std::vector<int64_t>> sequences;   // prompt followed by completion
  std::vector<int64_t> prompt_lengths;           // where each completion starts
  std::vector<std::vector<float>> old_logprobs;  // the sampler's, one per completion token (may be empty: on-policy)
  std::vector<float> advantages;                 // one per sequence
  // Self-distillation (SDPO): per sequence, the teacher's prompt (the same task with feedback in context), which
  // reads the same completion; empty (or missing): no teacher for that sequence.
  std::vector<std::vector<int64_t>> teacher_prompts;
};

enum class LossKind { grpo_clip, importance_sampling };
enum class TokenNormalization {
  sequence_mean,  // mean over each completion's tokens, then over sequences (GRPO)
  token_sum,      // sum over tokens / (sequences x a fixed length): Dr. GRPO, no length bias
  token_mean,     // sum over tokens / all completion tokens in the batch
};

struct LossOptions {
  LossKind kind = LossKind::grpo_clip;
  TokenNormalization normalization = TokenNormalization::sequence_mean;
  double clip_low = 0.2, clip_high = 0.2;
  double kl_coef = 0.0;               // > 0 adds beta * KL(policy || base), the k3 estimator per token
  // The KL to the base as a metric where no penalty needs it: a forward pass of the base model per micro-batch (no
  // gradient), about a fifth of an update's time. Without a penalty and without this, the KL is not measured.
  bool measure_kl = false;
  int64_t normalization_length = 0;   // token_sum's fixed length (0: the longest completion in the batch)
  std::optional<double> max_logprob_mismatch;  // drop sequences whose mean |sampler - trainer| log-prob exceeds it
  // SDPO: each completion token's term is (1 - w) x the policy-gradient term + w x KL(student || teacher) where
  // the sequence has a teacher prompt (w x 0 where not). 0: no teacher is run.
  double distill_weight = 0.0;
};

struct LossMetrics {
  double loss = 0, kl = 0, entropy = 0, clip_fraction = 0;
  bool kl_measured = false;
  double distill = 0;  // KL(student || teacher) summed over taught completion tokens
  int64_t tokens = 0, dropped_sequences = 0, taught_sequences = 0, taught_tokens = 0;
};

// Per-token log-probabilities of tokens[:, 1:] and the entropy of each predicting distribution, with autograd.
struct TokenLogprobs {
  at::Tensor logprobs, entropy;  // [B, T - 1] float32
  at::Tensor distribution;       // [B, T - 1, vocab]: every position's log-softmax, where asked for
};
// Without `with_distribution` no [B, T - 1, vocab] tensor is kept (see chosen_logprobs.h); a teacher's distillation
// needs the whole distributions.
TokenLogprobs token_logprobs(const Transformer& model, const at::Tensor& tokens, const at::Tensor& valid,
                             bool with_distribution = false);

// The loss of one micro-batch (rows [begin, end) of the batch), scaled so that micro-batch losses add up to the
// whole batch's; backward() on it accumulates gradients into the adapter.
at::Tensor policy_loss(const Transformer& model, LoraAdapter& adapter, const SequenceBatch& batch, std::size_t begin,
                       std::size_t end, const LossOptions& options, int64_t batch_tokens, LossMetrics& metrics);

// Mean negative log-likelihood of the completion tokens of rows [begin, end), scaled to the whole batch's count.
at::Tensor sft_loss(const Transformer& model, const SequenceBatch& batch, std::size_t begin, std::size_t end,
                    int64_t batch_tokens, LossMetrics& metrics);

// Tensors of rows [begin, end): tokens [n, T] right-padded, valid [n, T], completion mask [n, T - 1].
struct PackedRows {
  at::Tensor tokens, valid, completion;
};
PackedRows pack_rows(const SequenceBatch& batch, std::size_t begin, std::size_t end, c10::Device device);
int64_t completion_tokens(const SequenceBatch& batch);

}  // namespace crucible::lm
