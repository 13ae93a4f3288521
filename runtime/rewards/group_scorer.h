#pragma once
// One group's scoring, as the reward normalizer asks for it: a reward per verdict (plus a judge's weighted score
// where one was asked), centred on the task's running baseline when the experiment asks for one, turned into
// group-relative advantages turn by turn, and zeroed for correct kernels rejected on coverage. The judge itself is
// asked by the caller (it waits on HTTP); the scorer only says when and adds what it said.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "crucible/eval/verdict.h"
#include "rewards/advantage.h"
#include "rewards/reward.h"

namespace crucible::rewards {

struct ScoringSpec {
  RewardSpec reward;
  AdvantageSpec advantage;
  bool task_baseline = false;
  MultiTurnSpec multi_turn;  // returns and gamma; the turns come with each group
  double judge_weight = 0.0;
};

// The share of correct verdicts in a group (0 for an empty group): what decides whether a judge is asked.
double correct_share(const std::vector<eval::Verdict>& verdicts);

class GroupScorer {
 public:
  explicit GroupScorer(ScoringSpec spec) : spec_(spec) {}
  std::vector<double> rewards(const std::vector<eval::Verdict>& verdicts) const;
  // Adds judge_weight * score to each reward whose score is a number (NaN: judging failed, adds nothing).
  void add_judge_scores(std::vector<double>& rewards, const std::vector<double>& scores) const;
  // `rewards`: the group's, turn by turn (the group's trajectories in the same order each turn); `turns` below 1
  // counts as 1. Empty when the group is dropped (constant rewards, where the advantage kind drops them).
  std::vector<double> advantages(const std::string& task, const std::vector<double>& rewards,
                                 const std::vector<eval::Verdict>& verdicts, uint32_t turns);

 private:
  ScoringSpec spec_;
  std::map<std::string, RunningBaseline> baselines_;  // per task, when task_baseline
};

}  // namespace crucible::rewards
