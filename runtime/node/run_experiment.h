#pragma once
// Node wiring for `crucible run`: one actor system per seed, with a coordinator, a rollout generator, a compiler
// pool, one evaluator per device, the reward normalizer, the optimizer and telemetry, writing DIR/seed-<s>/.
#include <filesystem>
#include <string>
#include <vector>

#include "experiment/experiment.h"
#include "logging/log.h"

namespace crucible::node {

struct RunRequest {
  experiment::Experiment experiment;
  std::filesystem::path dir;  // the run directory (top level)
  bool resume = false;        // continue the units not yet committed in dir
  bool quiet = false;         // no progress lines
  log::Level console_level = log::Level::warn;
};

struct RunResult {
  bool ok = false;
  std::string message;
  std::filesystem::path dir;
  std::string summary;  // human-readable, also in dir/summary.json
};

// Checks everything that can be checked before work starts (tasks, templates, devices); throws
// config::ConfigError or std::invalid_argument for a malformed or impossible experiment. Returns its tasks.
std::vector<eval::TaskSpec> check_runnable(const experiment::Experiment& experiment);

RunResult run_experiment(const RunRequest& request);

// A fresh directory name under the experiment's run_root: <run_root>/<name>-<UTC timestamp>.
std::filesystem::path default_run_dir(const experiment::Experiment& experiment);

}  // namespace crucible::node
