#pragma once
// A policy that replays candidates written elsewhere: <dir>/<task>/*.cpp (*.cu or *.py: the language's source
// extension), handed out in turn. It lets a run judge a fixed set of outputs (an external model's, a benchmark's)
// with the full pipeline, and it is how tests put crashing or hanging candidates into a live run. Updates only count
// versions: there is nothing to learn.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "crucible/eval/candidate_language.h"
#include "policy/policy.h"

namespace crucible::policy {

class ReplayPolicy : public Policy {
 public:
  // Replays the files of the language's source extension. Throws std::invalid_argument when dir is missing.
  ReplayPolicy(std::filesystem::path dir, eval::CandidateLanguage language);

  std::vector<Sample> sample(const eval::TaskSpec& task, int n) override;
  void prepare(const eval::TaskSpec&) override {}
  void update(const std::vector<Sample>& samples, const std::vector<double>& advantages) override;
  uint64_t version() const override { return version_; }
  std::string snapshot() const override;
  void restore(const std::string& snapshot) override;

  // The files a task would replay, sorted; empty when there are none.
  std::vector<std::filesystem::path> files_for(const std::string& task) const;

 private:
  std::filesystem::path dir_;
  std::string extension_;
  std::map<std::string, uint64_t> next_;  // per task: index of the next file
  uint64_t version_ = 0;
};

}  // namespace crucible::policy
