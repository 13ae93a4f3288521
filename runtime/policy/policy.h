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
#include "policy/sample.h"
#include "policy/update_metrics.h"

namespace crucible::policy {

// One trajectory's previous turn and what the evaluator said about it: what a refinement turn improves on.
struct Attempt {
  Sample previous;
  Feedback feedback;
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
