#include "modes/unit_plan.h"

#include <algorithm>

namespace crucible::modes {
namespace {

std::vector<UnitPlan> plan_grpo(const experiment::GrpoConfig& c, const std::vector<std::string>& tasks) {
  std::vector<UnitPlan> units;
  uint64_t group = 0;
  for (int s = 0; s < c.steps; ++s) {
    UnitPlan u;
    u.name = "step=" + std::to_string(s);
    u.step = static_cast<uint64_t>(s);
    u.train = true;
    // Tasks in rotation, so that every task appears equally often whatever the batch size.
    for (int b = 0; b < c.batch_size; ++b)
      u.groups.push_back({tasks[(static_cast<std::size_t>(s) * c.batch_size + b) % tasks.size()],
                          static_cast<uint32_t>(c.group_size), group++});
    // Step s is sampled by the policy after step s-1-max_staleness, so no sample lags more than max_staleness.
    u.generate_after = std::max(-1, s - 1 - c.max_staleness);
    u.train_after = s - 1;
    units.push_back(std::move(u));
  }
  return units;
}

std::vector<UnitPlan> plan_best_of_n(const experiment::BestOfNConfig& c, const std::vector<std::string>& tasks) {
  std::vector<UnitPlan> units;
  uint64_t group = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    UnitPlan u;
    u.name = "task=" + tasks[t];
    u.task = tasks[t];
    for (int left = c.k; left > 0; left -= c.group_size)
      u.groups.push_back({tasks[t], static_cast<uint32_t>(std::min(left, c.group_size)), group++});
    // Two tasks in flight keep every stage busy while the first one's results are committed early.
    u.generate_after = std::max(-1, static_cast<int>(t) - 2);
    units.push_back(std::move(u));
  }
  return units;
}

std::vector<UnitPlan> plan_ttt(const experiment::TttConfig& c, const std::vector<std::string>& tasks) {
  std::vector<UnitPlan> units;
  uint64_t group = 0;
  std::vector<int> last_of_task;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    for (int s = 0; s < c.steps; ++s) {
      UnitPlan u;
      u.name = "task=" + tasks[t] + "/step=" + std::to_string(s);
      u.step = static_cast<uint64_t>(s);
      u.task = tasks[t];
      u.train = true;
      u.groups.push_back({tasks[t], static_cast<uint32_t>(c.rollouts), group++});
      const int self = static_cast<int>(units.size());
      if (s > 0) {
        u.generate_after = u.train_after = self - 1;  // strictly on-policy within a task
      } else if (t >= static_cast<std::size_t>(c.concurrent_tasks)) {
        u.generate_after = last_of_task[t - c.concurrent_tasks];  // a slot frees when a task finishes
      }
      units.push_back(std::move(u));
    }
    last_of_task.push_back(static_cast<int>(units.size()) - 1);
  }
  return units;
}

}  // namespace

std::vector<UnitPlan> plan_units(const experiment::Experiment& e, const std::vector<std::string>& tasks) {
  std::vector<UnitPlan> units;
  switch (e.mode) {
    case experiment::RunMode::grpo: units = plan_grpo(e.grpo, tasks); break;
    case experiment::RunMode::best_of_n: units = plan_best_of_n(e.best_of_n, tasks); break;
    case experiment::RunMode::ttt: units = plan_ttt(e.ttt, tasks); break;
  }
  for (auto& u : units) {
    u.turns = e.multi_turn.turns;
    u.sequential_groups = e.search.kind == experiment::SearchKind::puct;
  }
  return units;
}

}  // namespace crucible::modes
