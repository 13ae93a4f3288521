#pragma once
// The end-of-run summary, built from what the run directory holds (so a resumed run summarises every unit, not
// only those of the last process): per seed, the GRPO learning curve, best-of-N's best per task, or TTT's
// best-of-adaptation selection (best kernel at any step, and the step whose batch scored best), with budgets.
#include <filesystem>
#include <string>

#include "experiment/experiment.h"

namespace crucible::modes {

// Writes <dir>/summary.json and returns a few human-readable lines.
std::string write_run_summary(const std::filesystem::path& dir, const experiment::Experiment& experiment);

}  // namespace crucible::modes
