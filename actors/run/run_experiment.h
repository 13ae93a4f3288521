#pragma once
// Node wiring for `crucible run`: one actor system per seed, with a coordinator, a rollout generator, a compiler
// pool, one evaluator per device, the reward normalizer, the optimizer and telemetry, writing DIR/seed-<s>/.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "experiment/experiment.h"
#include "logging/log.h"
#include "monitor/live_status.h"
#include "run/run_lock.h"

namespace crucible::node {

struct RunRequest {
  experiment::Experiment experiment;
  std::filesystem::path dir;  // the run directory (top level)
  bool resume = false;        // continue the units not yet committed in dir
  bool quiet = false;         // no progress lines
  log::Level console_level = log::Level::warn;
  // The directory's lock, when the caller took it first (to refuse a busy directory before it prints anything);
  // run_experiment takes it itself otherwise.
  std::shared_ptr<run::RunLock> lock;
  // The monitor's live status ([monitor]); run_experiment makes it when the experiment asks for a monitor.
  std::shared_ptr<monitor::LiveStatus> live;
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

// Holds the run directory's lock for the whole run: throws run::RunBusy when another process holds it, and
// std::invalid_argument for a new run into a directory that already holds one.
RunResult run_experiment(const RunRequest& request);

// Takes the run directory's lock (run::RunBusy when held) and refuses a new run into a directory that holds one.
std::shared_ptr<run::RunLock> lock_run_directory(const RunRequest& request);

// A fresh directory name under the experiment's run_root: <run_root>/<name>-<UTC timestamp>.
std::filesystem::path default_run_dir(const experiment::Experiment& experiment);

}  // namespace crucible::node
