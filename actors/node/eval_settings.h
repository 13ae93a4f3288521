#pragma once
// What an evaluator needs to know of a run, whichever node it is on: the experiment's [eval] settings and its
// tasks' text travel to evaluator nodes, and both sides turn them into the same evaluation options.
#include <string>
#include <vector>

#include "crucible/eval/evaluator.h"
#include "experiment/experiment.h"
#include "messages/cluster.h"

namespace crucible::node {

messages::EvalSettings eval_settings(const experiment::Experiment& experiment);
eval::EvalOptions eval_options(const messages::EvalSettings& settings, const std::string& device);
// Each task's file as written (read from TaskSpec::source_path).
std::vector<messages::TaskText> task_texts(const std::vector<eval::TaskSpec>& tasks);

// The devices an evaluator node offers, described: GPU model, memory, compute capability and SMs; the CPU's model
// and cores. Throws std::invalid_argument for a device name that is not "cpu" or a usable "cuda:N".
std::vector<messages::NodeDevice> describe_devices(const std::vector<std::string>& devices);

}  // namespace crucible::node
