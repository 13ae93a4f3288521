#pragma once
// Policy-gradient losses on a language model with a LoRA adapter, over (prompt + completion) sequences:
// clipped-ratio GRPO/PPO, the plain importance-sampling loss, an optional KL penalty to the base model (the same
// model with the adapter switched off), and the metrics that watch training.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "lm/lora.h"
#include "lm/transformer.h"

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

// Sums over a step's micro-batches. They stay on the device until the step ends and read() takes them all at once:
// reading one per micro-batch would make the host wait for the GPU each time, so the next micro-batch's kernels
// could not be queued while the last ones run (an update is bound by launching kernels as much as by running them).
class LossMetrics {
 public:
  enum Sum {
    loss,
    kl,
    entropy,
    clip_fraction,
    distill,  // KL(student || teacher) summed over taught completion tokens
    tokens,
    dropped_sequences,
    taught_sequences,
    taught_tokens,
    count
  };
  void add(Sum which, const at::Tensor& value);  // a scalar tensor, detached
  std::array<double, count> read() const;         // 0 for a sum never added to
  bool kl_measured = false;

 private:
  std::array<at::Tensor, count> sums_;
};

// Per-token log-probabilities of tokens[:, 1:] and the entropy of each predicting distribution, with autograd.
struct TokenLogprobs {
  at::Tensor logprobs, entropy;  // [B, T - 1] float32
  at::Tensor distribution;       // [B, T - 1, vocab]: every position's log-softmax (kept alive by autograd anyway)
};
// `causal_prefix`: as whole_sequences takes it (right-padded rows, known on the host, spare a wait for the device).
TokenLogprobs token_logprobs(const Transformer& model, const at::Tensor& tokens, const at::Tensor& valid,
                             std::optional<bool> causal_prefix = std::nullopt);

// The loss of one micro-batch (rows [begin, end) of the batch), scaled so that micro-batch losses add up to the
// whole batch's; backward() on it accumulates gradients into the adapter.
at::Tensor policy_loss(const Transformer& model, LoraAdapter& adapter, const SequenceBatch& batch, std::size_t begin,
                       std::size_t end, const LossOptions& options, int64_t batch_tokens, LossMetrics& metrics);

// Mean negative log-likelihood of the completion tokens of rows [begin, end), scaled to the whole batch's count.
at::Tensor sft_loss(const Transformer& model, const SequenceBatch& batch, std::size_t begin, std::size_t end,
                    int64_t batch_tokens, LossMetrics& metrics);

// Tensors of rows [begin, end): tokens [n, T] right-padded, valid [n, T], completion mask [n, T - 1]. Copied to a GPU
// from pinned memory without waiting for it.
struct PackedRows {
  at::Tensor tokens, valid, completion;
};

// A host tensor on `device`; to a GPU through pinned memory, queued behind the work already there rather than
// waiting for it.
at::Tensor queued_copy(const at::Tensor& host, c10::Device device);
PackedRows pack_rows(const SequenceBatch& batch, std::size_t begin, std::size_t end, c10::Device device);
int64_t completion_tokens(const SequenceBatch& batch);

}  // namespace crucible::lm
