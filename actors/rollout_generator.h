#pragma once
// Rollout generator: asks its policy for the groups of samples requested together (one batch for a model) and
// tags them as candidates; restores each policy version the optimizer publishes.
#include <memory>
#include <map>
#include <optional>
#include <string>

#include "actors/interfaces.h"
#include "crucible/eval/task_spec.h"
#include "policy/policy.h"
#include "devices/device_lease.h"

namespace crucible::actors {

struct GeneratorSetup {
  std::unique_ptr<policy::Policy> policy;
  std::map<std::string, eval::TaskSpec> tasks;
  std::optional<eval::Device> policy_device;  // where the policy computes, leased while it does; none: nowhere to guard
  std::shared_ptr<devices::DeviceLeases> leases;  // shared with evaluators on the same device
};

generator_actor::behavior_type rollout_generator(generator_actor::pointer self, std::shared_ptr<GeneratorSetup> setup);

}  // namespace crucible::actors
