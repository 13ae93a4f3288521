#pragma once
// Gateway: the actor a coordinator node publishes for evaluator nodes. A node says hello with a nonce, the gateway
// proves the shared secret over it and sends its own nonce, the node proves the secret back; only then does the node
// get the coordinator's handle, the tasks and the evaluation settings, and the coordinator learn the node's session.
// Heartbeats keep a session alive and carry the node's log lines into the run's logs/nodes/<node>/; a session whose
// heartbeats stop for the timeout, or whose connection drops, is reported lost to the coordinator.
#include <caf/actor_system.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "actors/interfaces.h"

namespace crucible::actors {

struct GatewaySetup {
  std::string secret;
  coordinator_actor coordinator;
  std::string run;  // for the nodes' logs: experiment name and seed
  eval::RunEvalSettings eval;
  std::vector<msg::TaskText> tasks;
  double heartbeat_s = 1.0, timeout_s = 10.0;
  bool last_run = true;
  std::filesystem::path log_dir;  // the run's logs/; node lines go to log_dir/nodes/<node>/
};

gateway_actor spawn_gateway(caf::actor_system& system, GatewaySetup setup);

}  // namespace crucible::actors
