#pragma once
// The experiment a run directory recorded, read for reports and listings. Its tasks directory need not exist where
// the run is read (a run copied to another machine, or tasks moved since): what readers need of the tasks is in
// the run's own task record (run/task_record.h). Every other key is checked as strictly as for a run.
#include <filesystem>

#include "experiment/experiment.h"

namespace crucible::report {

// Throws config::ConfigError (file, line, key) for a malformed experiment, run::RecordedFileError when
// experiment.toml is not a regular file of the run.
experiment::Experiment read_recorded_experiment(const std::filesystem::path& run_dir);

}  // namespace crucible::report
