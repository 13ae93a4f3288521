#pragma once
// Telemetry: the only writer of the run directory. Candidate records (sources beside them) as they come, and a
// durable commit per finished unit; prints the console progress line of each commit.
#include <memory>

#include "actors/interfaces.h"
#include "run/run_directory.h"

namespace crucible::actors {

telemetry_actor::behavior_type telemetry(telemetry_actor::pointer self, std::shared_ptr<run::RunDirectory> dir,
                                         bool quiet);

}  // namespace crucible::actors
