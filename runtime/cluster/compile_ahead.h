#pragma once
// How an evaluator node keeps a device busy: how many candidates it holds per device (one evaluated, the others
// being built), and whether a build may run while the device's evaluation does. On a GPU a build (CPU work) does not
// disturb a GPU timing, so the next candidates are built during the evaluation in hand. On a CPU device the build
// would run on the cores that time, so it waits its turn.
#include <optional>

#include "crucible/eval/device.h"

namespace crucible::cluster {

struct DevicePullers {
  int pullers = 1;                     // candidates held for the device at once
  bool build_beside_evaluation = false;  // a puller builds its candidate before taking the device's lease
};

// `compile_ahead`: candidates built ahead per device as asked (`crucible node --compile-ahead`); unset: 1 on a GPU,
// 0 on a CPU. Throws std::invalid_argument for a negative count, or ahead-building asked for a CPU device.
DevicePullers pullers_for(const eval::Device& device, std::optional<int> compile_ahead);

}  // namespace crucible::cluster
