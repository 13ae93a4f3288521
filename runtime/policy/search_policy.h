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

#include "crucible/eval/candidate_language.h"
#include "crucible/eval/task_spec.h"
#include "policy/policy.h"

namespace crucible::policy {

struct KernelTemplate;

struct SearchPolicyOptions {
  double learning_rate = 0.5;
  double temperature = 1.0;  // sampling divides the logits by it
  eval::CandidateLanguage language;  // whose kernel templates to sample: C++ (the default), CUDA C++ or Triton
};

// A sample's tokens are its choice indices, one per knob; its output reads "knob=value ...".
class SearchPolicy : public Policy {
 public:
  explicit SearchPolicy(uint64_t seed, SearchPolicyOptions options = {});

  // n candidates for the task; throws std::invalid_argument when no template of the language covers it.
  std::vector<Sample> sample(const eval::TaskSpec& task, int n) override;
  // Local search: each attempt's knobs with some redrawn from the policy's distribution, never to the same value (one
  // knob after a correct attempt, two after a failed one: a failure is further from a good kernel).
  std::vector<Sample> refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) override;
  // REINFORCE on the logits: each knob's logits move by learning_rate * mean(advantage * (onehot - p)).
  void update(const std::vector<Sample>& samples, const std::vector<double>& advantages) override;
  void prepare(const eval::TaskSpec& task) override { logits_for(task); }
  uint64_t version() const override { return version_; }

  std::vector<double> probabilities(const std::string& task, std::size_t knob) const;
  // JSON: version, options (the language's name as "backend"), logits per task and knob
  std::string snapshot() const override;
  void restore(const std::string& json) override;  // throws std::invalid_argument on malformed input

 private:
  std::vector<std::vector<double>>& logits_for(const eval::TaskSpec& task);
  std::vector<double> choice_probabilities(const std::vector<double>& logits) const;  // softmax(logits / temperature)
  Sample rendered(const eval::TaskSpec& task, const KernelTemplate& t, const std::vector<std::vector<double>>& logits,
                  const std::vector<int32_t>& choice) const;

  std::map<std::string, std::vector<std::vector<double>>> logits_;  // task -> knob -> choice
  std::mt19937_64 rng_;
  SearchPolicyOptions options_;
  uint64_t version_ = 0;
};

}  // namespace crucible::policy
