#include "rewards/group_scorer.h"

#include <algorithm>
#include <cmath>

namespace crucible::rewards {

double correct_share(const std::vector<eval::Verdict>& verdicts) {
  if (verdicts.empty()) return 0.0;
  double correct = 0;
  for (const auto& v : verdicts) correct += v.status == eval::Status::correct;
  return correct / static_cast<double>(verdicts.size());
}

std::vector<double> GroupScorer::rewards(const std::vector<eval::Verdict>& verdicts) const {
  std::vector<double> out;
  for (const auto& v : verdicts) out.push_back(reward(v, spec_.reward));
  return out;
}

void GroupScorer::add_judge_scores(std::vector<double>& rewards, const std::vector<double>& scores) const {
  for (std::size_t i = 0; i < rewards.size() && i < scores.size(); ++i)
    if (!std::isnan(scores[i])) rewards[i] += spec_.judge_weight * scores[i];
}

std::vector<double> GroupScorer::advantages(const std::string& task, const std::vector<double>& rewards,
                                            const std::vector<eval::Verdict>& verdicts, uint32_t turns) {
  std::vector<double> centred;
  for (double r : rewards) centred.push_back(spec_.task_baseline ? baselines_[task].center(r) : r);
  auto multi_turn = spec_.multi_turn;
  multi_turn.turns = std::max<uint32_t>(1, turns);
  auto out = turn_advantages(turn_returns(centred, multi_turn), multi_turn.turns, spec_.advantage);
  // Rejection sampling on profiling: a correct kernel that spends too little time in its own kernels trains nothing.
  for (std::size_t i = 0; i < out.size() && i < verdicts.size(); ++i)
    if (rejected_for_coverage(verdicts[i], spec_.reward)) out[i] = 0.0;
  return out;
}

}  // namespace crucible::rewards
