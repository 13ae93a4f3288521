#pragma once
// Runs a task's reference alone on a device, at that device's size set: does it load, run, give the declared
// outputs, and fit? The check an imported task gets where it will be evaluated (an imported TorchScript program
// on a GPU node, where it was traced with that node's PyTorch), before any candidate is evaluated against it.
#include <string>

#include "crucible/eval/device.h"
#include "crucible/eval/task_spec.h"

namespace crucible::eval {

enum class ReferenceStatus { ok, too_large, failed };
std::string_view reference_status_name(ReferenceStatus s);

struct ReferenceCheck {
  ReferenceStatus status = ReferenceStatus::failed;
  std::string detail;          // why not ok
  double bytes_needed = 0;     // the inputs' pools and one set of inputs and outputs, as the evaluator holds them
  double bytes_free = 0;       // on a GPU: free device memory before the check; 0 on the CPU
  double load_ms = 0;          // the reference loaded (a TorchScript file) and its input pools built
  double run_ms = 0;           // the median of three runs, after one warm-up
};

// Never throws for a task's own faults (a missing program, a wrong output shape): those are `failed`.
ReferenceCheck check_reference(const TaskSpec& task, const Device& device);

}  // namespace crucible::eval
