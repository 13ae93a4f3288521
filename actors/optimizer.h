#pragma once
// Optimizer: applies one policy update per batch of (sample, advantage) and publishes the new version with its
// snapshot, which generators restore and the run directory keeps for --resume.
#include <memory>
#include <optional>

#include "actors/interfaces.h"
#include "devices/device_lease.h"
#include "policy/policy.h"

namespace crucible::actors {

struct OptimizerSetup {
  std::unique_ptr<policy::Policy> policy;
  std::optional<eval::Device> policy_device;  // leased while it trains; none: nowhere to guard
  std::shared_ptr<devices::DeviceLeases> leases;
};

optimizer_actor::behavior_type optimizer(optimizer_actor::pointer self, std::shared_ptr<OptimizerSetup> setup);

}  // namespace crucible::actors
