#pragma once
// What the runtime asks of any policy (the embedded search policy, a language model): sample candidates for a task,
// learn from advantages, and save or restore itself. A policy is owned by one actor at a time; none is thread-safe.
#include <cstdint>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"
#include "policy/feedback.h"

namespace crucible::policy {

struct Sample {
  std::string task;
  std::string output;             // the policy's raw output (a model's text; the search policy's chosen knobs)
  std::string source;             // the candidate source assembled from it
  std::vector<int32_t> tokens;    // what was sampled: token ids, or one choice index per knob
  std::vector<float> logprobs;    // per token: the policy's own log-probability (a model's, before temperature)
  std::string parse_error;        // why no source could be assembled (recorded as a parse_error verdict); empty: ok
  uint64_t policy_version = 0;
  // A refinement turn's whole prompt as the model saw it (earlier code and feedback included), which training must
  // condition on; empty: the task's own prompt.
  std::string prompt;
  // The policy could not produce a sample at all (a served model's server down or refusing): parse_error says why,
  // and the record says policy_error instead of no_source.
  bool policy_error = false;
  // Self-distillation (SDPO): what this sample's teacher reads at the end of the prompt's user turn, filled in
  // before an update (policy/teacher_context.h); empty: no teacher.
  std::string teacher_context;
};

// One trajectory's previous turn and what the evaluator said about it: what a refinement turn improves on.
struct Attempt {
  Sample previous;
  Feedback feedback;
};

// What an update measured, per adapter (a language model's task under ttt; "" for the one shared adapter).
struct UpdateMetrics {
  std::string adapter;
  double loss = 0;
  std::optional<double> kl;  // policy vs base, per completion token; unset where it was not measured
  double entropy = 0, clip_fraction = 0, grad_norm = 0;
  int64_t sequences = 0, tokens = 0, dropped_sequences = 0;
  double distill_kl = 0;         // SDPO: mean KL(student || teacher) per taught completion token
  int64_t taught_sequences = 0;  // SDPO: sequences that had a teacher
};

struct GroupAsk {
  const eval::TaskSpec* task = nullptr;
  int n = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // n candidates for the task; throws std::invalid_argument when the policy cannot write for it.
  virtual std::vector<Sample> sample(const eval::TaskSpec& task, int n) = 0;
  // Several groups at once, one result per ask: a language model fills one batch with them.
  virtual std::vector<std::vector<Sample>> sample_groups(const std::vector<GroupAsk>& asks) {
    std::vector<std::vector<Sample>> out;
    for (const auto& a : asks) out.push_back(sample(*a.task, a.n));
    return out;
  }
  // One new sample per attempt, each improving on its attempt's code in the light of its feedback (multi-turn
  // refinement). Throws std::invalid_argument for a policy that cannot.
  virtual std::vector<Sample> refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) {
    (void)task;
    (void)attempts;
    throw std::invalid_argument("this policy cannot refine earlier attempts (multi-turn)");
  }
  // Makes the policy ready to learn about a task it has not sampled itself (an optimizer's copy of the policy).
  virtual void prepare(const eval::TaskSpec& task) = 0;
  // One step from (sample, advantage) pairs; the version goes up by one.
  virtual void update(const std::vector<Sample>& samples, const std::vector<double>& advantages) = 0;
  virtual uint64_t version() const = 0;
  // What the last update measured (loss, KL, entropy, ...), written with the unit's metrics; none for a policy
  // that measures nothing.
  virtual std::vector<UpdateMetrics> update_metrics() const { return {}; }
  virtual std::string snapshot() const = 0;
  virtual void restore(const std::string& snapshot) = 0;  // throws std::invalid_argument on malformed input
};

}  // namespace crucible::policy
