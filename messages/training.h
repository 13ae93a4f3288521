#pragma once
// Messages from the reward normalizer to the optimizer, and the optimizer's announcement of a new policy.
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace crucible::messages {

// What the optimizer needs of one sample: which task, what was sampled, and how good it was relative to its group.
struct ScoredSample {
  uint64_t policy_version = 0;  // the version that sampled it: the optimizer bounds staleness with it
  std::string task;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  double advantage = 0.0;
  std::string prompt;  // a refinement turn's whole prompt; empty: the task's own
  std::string teacher_context;  // SDPO: what its teacher reads after the prompt; empty: none
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScoredSample& x) {
  return f(caf::meta::type_name("crucible.ScoredSample"), x.policy_version, x.task, x.tokens, x.logprobs,
           x.advantage, x.prompt, x.teacher_context);
}

struct TrainBatch {
  std::string unit;  // the run directory's unit of work this batch ends
  uint64_t step = 0;
  std::vector<ScoredSample> samples;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainBatch& x) {
  return f(caf::meta::type_name("crucible.TrainBatch"), x.unit, x.step, x.samples);
}

// What an update measured, per adapter ("" for the one shared adapter).
struct TrainMetrics {
  std::string adapter;
  double loss = 0;
  caf::optional<double> kl;  // policy vs base, per completion token; unset where it was not measured
  double entropy = 0, clip_fraction = 0, grad_norm = 0;
  int64_t sequences = 0, tokens = 0, dropped_sequences = 0;
  double distill_kl = 0;
  int64_t taught_sequences = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainMetrics& x) {
  return f(caf::meta::type_name("crucible.TrainMetrics"), x.adapter, x.loss, x.kl, x.entropy, x.clip_fraction,
           x.grad_norm, x.sequences, x.tokens, x.dropped_sequences, x.distill_kl, x.taught_sequences);
}

// A new policy version: generators restore the snapshot, so they may live on another node.
struct PolicyPublished {
  uint64_t version = 0;
  uint64_t step = 0;
  double update_seconds = 0.0;
  std::string snapshot;
  std::vector<TrainMetrics> metrics;  // empty when the policy measures nothing
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PolicyPublished& x) {
  return f(caf::meta::type_name("crucible.PolicyPublished"), x.version, x.step, x.update_seconds, x.snapshot,
           x.metrics);
}

}  // namespace crucible::messages
