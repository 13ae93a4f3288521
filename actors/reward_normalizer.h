#pragma once
// Reward normalizer: verdicts of one group in, a reward per sample and group-relative advantages out, with an
// optional per-task running baseline applied before grouping.
#include "actors/interfaces.h"
#include "rewards/advantage.h"
#include "rewards/reward.h"

namespace crucible::actors {

struct NormalizerSetup {
  rewards::RewardSpec reward;
  rewards::AdvantageSpec advantage;
  bool task_baseline = false;
  rewards::MultiTurnSpec multi_turn;  // returns and gamma; the turns come with each group
};

normalizer_actor::behavior_type reward_normalizer(normalizer_actor::pointer self, NormalizerSetup setup);

}  // namespace crucible::actors
