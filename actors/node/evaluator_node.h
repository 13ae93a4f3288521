#pragma once
// Node wiring for `crucible node --join`: an evaluator node. It connects to a run's gateway, checks that the
// coordinator proves the shared secret before proving it back, then runs one evaluator per device that pulls
// candidates (as source: compiled here, for this node's GPUs, into this node's cache), and sends heartbeats that
// carry its log lines. When it loses the coordinator it stops its evaluators and joins again with backoff, until
// `give_up_after_s` pass without one.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/network_settings.h"
#include "crucible/eval/device.h"

namespace crucible::node {

class LogOutbox;

struct NodeRequest {
  std::string host;
  uint16_t port = 0;
  std::vector<eval::Device> devices;
  std::string name;
  std::string secret;
  cluster::TlsFiles tls;
  double give_up_after_s = 120;  // without a coordinator (at start, or after losing one)
  bool exit_when_done = false;   // exit once the coordinator's last run is over
  std::optional<int> compile_ahead;  // candidates built ahead per device (cluster/compile_ahead.h); unset: default
  // Where the run's tasks' files named relative to a task (imported tasks' TorchScript references) are found on this
  // node: a copy of the coordinator's tasks directory. Empty: the node's working directory.
  std::string tasks_dir;
  std::shared_ptr<LogOutbox> outbox;  // the node's log lines, fed by the logging facade
};

struct NodeResult {
  int exit_code = 0;  // 0: done or gave up waiting; 2: refused, or the coordinator failed to prove the secret
  std::string message;
};

NodeResult run_evaluator_node(const NodeRequest& request);

}  // namespace crucible::node
