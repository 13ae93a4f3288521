#include "cluster/compile_ahead.h"

#include <stdexcept>
#include <string>

namespace crucible::cluster {

DevicePullers pullers_for(const eval::Device& device, std::optional<int> compile_ahead) {
  const bool gpu = device.is_cuda();
  const int ahead = compile_ahead.value_or(gpu ? 1 : 0);
  if (ahead < 0) throw std::invalid_argument("--compile-ahead must be 0 or more");
  if (ahead > 0 && !gpu)
    throw std::invalid_argument("--compile-ahead on " + device.name() +
                                ": a build beside an evaluation would run on the cores that time it");
  return {1 + ahead, ahead > 0};
}

}  // namespace crucible::cluster
