#pragma once
// Evaluator, one per device: pulls the next compiled candidate from the coordinator whenever it is free, judges it
// with kernels_eval's sandboxed workers while holding its device's lease, and sends the verdict back.
#include <map>
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "crucible/eval/evaluator.h"
#include "devices/device_lease.h"

namespace crucible::actors {

struct EvaluatorSetup {
  std::string device;
  eval::EvalOptions options;
  eval::EvaluatorConfig config;
  std::map<std::string, eval::TaskSpec> tasks;
  std::shared_ptr<devices::DeviceLeases> leases;
};

// Spawn detached. A candidate that crashes, hangs or breaks the evaluator's own code ends as a verdict; the loop
// only ends when the coordinator refuses a pull.
void evaluator(caf::blocking_actor* self, coordinator_actor coordinator, std::shared_ptr<EvaluatorSetup> setup);

}  // namespace crucible::actors
