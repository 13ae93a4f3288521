#pragma once
// The embedded default policy: a search over kernel templates. For each task it keeps a categorical distribution
// (softmax of logits) per knob of the task's template; sampling draws one choice per knob and renders the source;
// an update is a policy-gradient step on those logits with the samples' advantages. No model needed, and it learns
// for real: the baseline any language-model policy must beat.
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "crucible/eval/task_spec.h"

namespace crucible::policy {

struct Sample {
  std::string task;
  std::vector<int> choices;  // index of the chosen value, per knob
  std::string source;
  uint64_t policy_version = 0;
};

class SearchPolicy {
 public:
  explicit SearchPolicy(uint64_t seed, double learning_rate = 0.5);

  // n candidates for the task; throws std::invalid_argument when no template covers it.
  std::vector<Sample> sample(const eval::TaskSpec& task, int n);
  // REINFORCE on the logits: each knob's logits move by learning_rate * mean(advantage * (onehot - p)).
  void update(const std::vector<Sample>& samples, const std::vector<double>& advantages);
  uint64_t version() const { return version_; }

  std::vector<double> probabilities(const std::string& task, std::size_t knob) const;
  std::string snapshot() const;          // JSON: version, learning rate, logits per task and knob
  void restore(const std::string& json);  // throws std::invalid_argument on malformed input

 private:
  std::vector<std::vector<double>>& logits_for(const eval::TaskSpec& task);

  std::map<std::string, std::vector<std::vector<double>>> logits_;  // task -> knob -> choice
  std::mt19937_64 rng_;
  double learning_rate_;
  uint64_t version_ = 0;
};

}  // namespace crucible::policy
