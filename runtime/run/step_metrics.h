#pragma once
// What one step's samples achieved, in the terms KernelBench reports (fast_p) plus reward statistics.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crucible::run {

struct Outcome {
  std::string task;
  bool compiled = false;
  bool correct = false;
  std::optional<double> speedup;  // reference time / candidate time, where the candidate was timed
  double reward = 0.0;
};

struct TaskBest {
  double reward = 0.0;            // the task's highest reward
  std::optional<double> speedup;  // the task's highest speedup among its correct samples
};

struct StepMetrics {
  std::size_t samples = 0;
  double reward_mean = 0, reward_max = 0, compiled = 0, correct = 0;  // compiled/correct are shares in [0,1]
  double fast_0 = 0, fast_1 = 0, fast_1_2 = 0;  // share of ALL samples that are correct with speedup > p
  std::optional<double> geomean_speedup;        // over correct samples that have a (positive) speedup
  std::map<std::string, TaskBest> per_task_best;
};

// No samples: every number is 0 and there is no geomean.
StepMetrics compute_metrics(const std::vector<Outcome>& outcomes);
// KernelBench's fast_p: correct samples whose speedup is strictly above p, over all samples (0 when there are none).
double fast_p(const std::vector<Outcome>& outcomes, double p);
// One JSON object's text; fast_1_2 under that name, geomean_speedup null when absent, per_task_best keyed by task.
std::string metrics_json(const StepMetrics& m);

}  // namespace crucible::run
