#pragma once
// How a mode cuts an experiment into units of work: each unit asks the policy for one or more groups of samples,
// has them compiled, evaluated and scored, optionally trains on them, and is then committed to the run directory
// as a whole. Dependencies between units encode on-policy order and the staleness bound.
#include <cstdint>
#include <string>
#include <vector>

#include "experiment/experiment.h"

namespace crucible::modes {

struct GroupPlan {
  std::string task;
  uint32_t n = 0;
  uint64_t group = 0;  // unique within the run
};

struct UnitPlan {
  std::string name;  // "step=3", "task=relu", "task=relu/step=4": the run directory's key
  uint64_t step = 0;
  std::string task;  // best_of_n and ttt: the unit's task
  std::vector<GroupPlan> groups;
  uint32_t turns = 1;  // multi-turn: each group's samples are refined turns - 1 times, each turn judged first
  // Groups one after another, each once the one before is scored (PUCT chooses from what the earlier ones found).
  bool sequential_groups = false;
  bool train = false;
  int generate_after = -1;  // index of the unit that must be committed before this one is generated
  int train_after = -1;     // index of the unit that must be committed before this one trains
};

// Units in the order a sequential run would commit them. Task names are the resolved tasks, in order.
std::vector<UnitPlan> plan_units(const experiment::Experiment& experiment, const std::vector<std::string>& tasks);

}  // namespace crucible::modes
