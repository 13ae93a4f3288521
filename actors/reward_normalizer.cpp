#include "actors/reward_normalizer.h"

#include <algorithm>
#include <map>
#include <memory>

namespace crucible::actors {

normalizer_actor::behavior_type reward_normalizer(normalizer_actor::pointer, NormalizerSetup setup) {
  auto baselines = std::make_shared<std::map<std::string, rewards::RunningBaseline>>();
  return {
      [=](msg::ScoreRequest& request) {
        msg::ScoredGroup out;
        out.unit = request.unit;
        out.group = request.group;
        std::vector<double> centred;
        for (const auto& v : request.verdicts) {
          const double r = rewards::reward(v, setup.reward);
          out.rewards.push_back(r);
          centred.push_back(setup.task_baseline ? (*baselines)[request.task].center(r) : r);
        }
        auto turns = setup.multi_turn;
        turns.turns = std::max<uint32_t>(1, request.turns);
        out.advantages = rewards::turn_advantages(rewards::turn_returns(centred, turns), turns.turns, setup.advantage);
        // Rejection sampling on profiling: a correct kernel that spends too little time in its own kernels trains
        // nothing.
        for (std::size_t i = 0; i < out.advantages.size(); ++i)
          if (rewards::rejected_for_coverage(request.verdicts[i], setup.reward)) out.advantages[i] = 0.0;
        return out;
      },
  };
}

}  // namespace crucible::actors
