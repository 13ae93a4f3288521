#pragma once
// Reward normalizer: verdicts of one group in, a reward per sample and group-relative advantages out
// (rewards::GroupScorer), with an optional judge model asked and its score added.
#include <map>
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "judge/judge_reply.h"
#include "rewards/advantage.h"
#include "rewards/reward.h"

namespace crucible::actors {

struct NormalizerSetup {
  rewards::RewardSpec reward;
  rewards::AdvantageSpec advantage;
  bool task_baseline = false;
  rewards::MultiTurnSpec multi_turn;  // returns and gamma; the turns come with each group
  // LLM-as-judge ([judge]): none without one.
  std::shared_ptr<const judge::Judge> judge;
  double judge_weight = 0.0, judge_when_correct_below = 1.0;
  int judge_concurrency = 8;
  std::map<std::string, eval::TaskSpec> tasks;  // what the judge is told about each task
};

normalizer_actor::behavior_type reward_normalizer(normalizer_actor::pointer self, NormalizerSetup setup);

}  // namespace crucible::actors
