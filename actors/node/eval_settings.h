#pragma once
// What an evaluator needs to know of a run, whichever node it is on: the experiment's [eval] settings and its
// tasks' text travel to evaluator nodes, and both sides make the same evaluation options of them
// (eval::options_for).
#include <string>
#include <vector>

#include "crucible/eval/evaluator.h"
#include "experiment/experiment.h"
#include "messages/cluster.h"

namespace crucible::node {

// Each task's file as written (read from TaskSpec::source_path).
std::vector<messages::TaskText> task_texts(const std::vector<eval::TaskSpec>& tasks);

// The devices an evaluator node offers, described: GPU model, memory, compute capability and SMs; the CPU's model
// and cores. Throws std::invalid_argument for a GPU that is not usable here.
std::vector<messages::NodeDevice> describe_devices(const std::vector<eval::Device>& devices);

}  // namespace crucible::node
