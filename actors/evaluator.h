#pragma once
// Evaluator, one per device (or a few per GPU on a node, to build ahead): pulls the next candidate from the
// coordinator whenever it is free, evaluates it with kernels_eval's sandboxed workers while holding its device's lease,
// and sends the verdict back.
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "crucible/eval/evaluator.h"
#include "devices/device_lease.h"
#include "messages/cluster_error.h"

namespace crucible::actors {

struct EvaluatorSetup {
  eval::EvalOptions options;  // options.device: the device it evaluates on, and whose lease it holds meanwhile
  eval::EvaluatorConfig config;
  // Evaluators of one device on a node may share one kernels_eval evaluator (its workers, pools and reference
  // timings); the device's lease keeps their evaluations apart. Unset: the actor makes its own from `config`.
  std::shared_ptr<eval::Evaluator> shared;
  // Build the candidate before taking the device's lease, so it builds while another candidate is evaluated.
  bool build_beside_evaluation = false;
  std::map<std::string, eval::TaskSpec> tasks;
  std::shared_ptr<devices::DeviceLeases> leases;
  // An evaluator node's: its session, and pulls that time out (so a coordinator gone silent is noticed) until
  // `stop` is set. The coordinator's own evaluators wait as long as it takes.
  uint64_t session = 0;
  std::optional<std::chrono::milliseconds> pull_timeout;
  std::shared_ptr<std::atomic<bool>> stop = std::make_shared<std::atomic<bool>>(false);
  std::string end_reason;  // why the loop ended: the coordinator's refusal, or "stopped"
  msg::cluster_error end_code{};  // the refusal's code, when it had one (run_over, session_lost, session_unknown)
};

// Spawn detached. A candidate that crashes, hangs or breaks the evaluator's own code ends as a verdict; the loop
// only ends when the coordinator refuses a pull, or `stop` is set.
void evaluator(caf::blocking_actor* self, coordinator_actor coordinator, std::shared_ptr<EvaluatorSetup> setup);

}  // namespace crucible::actors
