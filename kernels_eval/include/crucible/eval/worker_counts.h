#pragma once
// What became of a pool's workers so far: started (each a CUDA context for a CUDA worker), reused, resets refused.
#include <string>

namespace crucible::eval {

struct WorkerCounts {
  int started = 0, reused = 0, resets_passed = 0, resets_refused = 0, ended = 0;
  std::string last_refusal;
};

}  // namespace crucible::eval
