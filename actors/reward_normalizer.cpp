#include "actors/reward_normalizer.h"

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
        out.advantages = rewards::advantages(centred, setup.advantage);
        return out;
      },
  };
}

}  // namespace crucible::actors
