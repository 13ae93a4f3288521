#include "actors/reward_normalizer.h"

#include <algorithm>
#include <cmath>
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
        for (const auto& v : request.verdicts) out.rewards.push_back(rewards::reward(v, setup.reward));
        // LLM-as-judge: while the group's correct share is below the threshold, each sample's score adds to its
        // reward; a failed judgement adds nothing and is noted.
        auto task = setup.tasks.find(request.task);
        if (setup.judge && task != setup.tasks.end() && !request.verdicts.empty()) {
          double correct = 0;
          for (const auto& v : request.verdicts) correct += v.status == eval::Status::correct;
          if (judge::judge_group(correct / static_cast<double>(request.verdicts.size()), setup.judge_when_correct_below)) {
            auto judged = judge::judge_samples(*setup.judge, task->second, request.sources, request.verdicts,
                                               setup.judge_concurrency, request.group * 1000);
            for (std::size_t i = 0; i < out.rewards.size(); ++i)
              if (!std::isnan(judged.scores[i])) out.rewards[i] += setup.judge_weight * judged.scores[i];
            out.judge_scores = std::move(judged.scores);
            out.judge_notes = std::move(judged.notes);
          }
        }
        std::vector<double> centred;
        for (double r : out.rewards) centred.push_back(setup.task_baseline ? (*baselines)[request.task].center(r) : r);
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
