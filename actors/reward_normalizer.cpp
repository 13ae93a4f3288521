#include "actors/reward_normalizer.h"

#include <memory>

#include "rewards/group_scorer.h"

namespace crucible::actors {
namespace {

// LLM-as-judge: while the group's correct share is below the threshold, each sample's score adds to its reward; a
// failed judgement adds nothing and is noted.
void judge_if_due(const NormalizerSetup& setup, const rewards::GroupScorer& scorer, const msg::ScoreRequest& request,
                  msg::ScoredGroup& out) {
  auto task = setup.tasks.find(request.task);
  if (!setup.judge || task == setup.tasks.end() || request.verdicts.empty()) return;
  if (!judge::judge_group(rewards::correct_share(request.verdicts), setup.judge_when_correct_below)) return;
  auto judged = judge::judge_samples(*setup.judge, task->second, request.sources, request.verdicts,
                                     setup.judge_concurrency, request.group * 1000);
  scorer.add_judge_scores(out.rewards, judged.scores);
  out.judge_scores = std::move(judged.scores);
  out.judge_notes = std::move(judged.notes);
}

}  // namespace

normalizer_actor::behavior_type reward_normalizer(normalizer_actor::pointer, NormalizerSetup setup) {
  auto scorer = std::make_shared<rewards::GroupScorer>(
      rewards::ScoringSpec{setup.reward, setup.advantage, setup.task_baseline, setup.multi_turn, setup.judge_weight});
  return {
      [=](msg::ScoreRequest& request) {
        msg::ScoredGroup out;
        out.unit = request.unit;
        out.group = request.group;
        out.rewards = scorer->rewards(request.verdicts);
        judge_if_due(setup, *scorer, request, out);
        out.advantages = scorer->advantages(request.task, out.rewards, request.verdicts, request.turns);
        return out;
      },
  };
}

}  // namespace crucible::actors
