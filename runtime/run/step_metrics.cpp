#include "run/step_metrics.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace crucible::run {
namespace {

double share(std::size_t count, std::size_t total) { return total ? double(count) / double(total) : 0.0; }

nlohmann::ordered_json optional_number(const std::optional<double>& x) {
  return x ? nlohmann::ordered_json(*x) : nlohmann::ordered_json();
}

}  // namespace

double fast_p(const std::vector<Outcome>& outcomes, double p) {
  auto fast = std::count_if(outcomes.begin(), outcomes.end(),
                            [p](const Outcome& o) { return o.correct && o.speedup && *o.speedup > p; });
  return share(static_cast<std::size_t>(fast), outcomes.size());
}

StepMetrics compute_metrics(const std::vector<Outcome>& outcomes) {
  StepMetrics m;
  m.samples = outcomes.size();
  if (outcomes.empty()) return m;
  double reward_sum = 0, log_speedup_sum = 0;
  std::size_t compiled = 0, correct = 0, timed = 0;
  m.reward_max = outcomes.front().reward;
  for (const auto& o : outcomes) {
    reward_sum += o.reward;
    m.reward_max = std::max(m.reward_max, o.reward);
    compiled += o.compiled;
    correct += o.correct;
    bool useful_speedup = o.correct && o.speedup && *o.speedup > 0;
    if (useful_speedup) {
      log_speedup_sum += std::log(*o.speedup);
      ++timed;
    }
    auto [it, first] = m.per_task_best.try_emplace(o.task, TaskBest{o.reward, std::nullopt});
    auto& best = it->second;
    if (!first) best.reward = std::max(best.reward, o.reward);
    if (o.correct && o.speedup && (!best.speedup || *o.speedup > *best.speedup)) best.speedup = o.speedup;
  }
  m.reward_mean = reward_sum / double(m.samples);
  m.compiled = share(compiled, m.samples);
  m.correct = share(correct, m.samples);
  m.fast_0 = fast_p(outcomes, 0.0);
  m.fast_1 = fast_p(outcomes, 1.0);
  m.fast_1_2 = fast_p(outcomes, 1.2);
  if (timed) m.geomean_speedup = std::exp(log_speedup_sum / double(timed));
  return m;
}

std::string metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["samples"] = m.samples;
  j["reward_mean"] = m.reward_mean;
  j["reward_max"] = m.reward_max;
  j["compiled"] = m.compiled;
  j["correct"] = m.correct;
  j["fast_0"] = m.fast_0;
  j["fast_1"] = m.fast_1;
  j["fast_1_2"] = m.fast_1_2;
  j["geomean_speedup"] = optional_number(m.geomean_speedup);
  auto& tasks = j["per_task_best"] = nlohmann::ordered_json::object();
  for (const auto& [task, best] : m.per_task_best)
    tasks[task] = {{"reward", best.reward}, {"speedup", optional_number(best.speedup)}};
  return j.dump();
}

}  // namespace crucible::run
