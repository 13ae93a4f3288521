#pragma once
// Telemetry: the only writer of the run directory. At each unit's commit it writes the unit's candidate records (sources
// beside them, each once) and metrics, then makes the commit durable; prints the console progress line of each.
#include <memory>

#include "actors/interfaces.h"
#include "run/run_directory.h"

namespace crucible::actors {

telemetry_actor::behavior_type telemetry(telemetry_actor::pointer self, std::shared_ptr<run::RunDirectory> dir,
                                         bool quiet);

}  // namespace crucible::actors
