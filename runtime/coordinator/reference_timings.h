#pragma once
// The GPU reference timings evaluators report with their verdicts, handed on with each candidate of the same task, so
// an evaluator that has not yet timed a task's reference on its GPU model takes the measurement another one made
// (kernels_eval's shared_timing.h says what is in one and when it is used). The first report of a key is kept, so
// every evaluator that takes it uses the same numbers.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "crucible/eval/shared_timing.h"

namespace crucible::coordinator {

class ReferenceTimingTable {
 public:
  // Enough for a multi-shape task on a few GPU models and settings; a node cannot grow the table past it.
  static constexpr std::size_t kPerTask = 64;

  // What an evaluator reported with its verdict on a candidate of `task`. Entries for another task, implausible
  // ones, repeats of a known key and those past the bound are dropped. Returns how many were new.
  std::size_t learn(const std::string& task, const std::vector<eval::SharedTiming>& reported);
  // What goes with a candidate of `task` (empty for a task nobody has timed).
  const std::vector<eval::SharedTiming>& for_task(const std::string& task) const;

 private:
  std::map<std::string, std::vector<eval::SharedTiming>> by_task_;
};

}  // namespace crucible::coordinator
