#pragma once
// Messages of the cluster: an evaluator node joining a run through the coordinator node's gateway (a mutual proof of
// the shared secret first), its heartbeats carrying its log lines, and what the gateway tells the coordinator.
#include <caf/actor_control_block.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/node_id.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "eval_values.h"

namespace crucible::messages {

// One device a node evaluates on, as the node describes it.
struct NodeDevice {
  eval::Device device;  // on the node
  std::string name;     // the GPU's (or CPU's) model name
  uint64_t memory_bytes = 0;
  int32_t cc_major = 0, cc_minor = 0;  // compute capability; 0 on the CPU
  int32_t multiprocessors = 0;         // SMs; cores on the CPU
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeDevice& x) {
  return f(caf::meta::type_name("crucible.NodeDevice"), x.device, x.name, x.memory_bytes, x.cc_major, x.cc_minor,
           x.multiprocessors);
}

// 2: typed devices and settings, error codes; 3: shared reference timings; 4: the settings' torch_ops
constexpr uint32_t kClusterProtocol = 4;


// Node -> gateway, first: who it is and its nonce.
struct NodeHello {
  uint32_t protocol = kClusterProtocol;
  std::string node;
  std::string nonce;
  std::vector<NodeDevice> devices;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeHello& x) {
  return f(caf::meta::type_name("crucible.NodeHello"), x.protocol, x.node, x.nonce, x.devices);
}

// Gateway -> node: the coordinator's nonce and its proof of the secret over the node's nonce.
struct JoinChallenge {
  std::string nonce;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinChallenge& x) {
  return f(caf::meta::type_name("crucible.JoinChallenge"), x.nonce, x.proof);
}

// Node -> gateway, once the coordinator's proof checked out: the node's proof over the coordinator's nonce.
struct NodeProof {
  std::string node;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeProof& x) {
  return f(caf::meta::type_name("crucible.NodeProof"), x.node, x.proof);
}

// A task as its TOML file reads, so a node needs no copy of the coordinator's configs/.
struct TaskText {
  std::string name;
  std::string toml;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TaskText& x) {
  return f(caf::meta::type_name("crucible.TaskText"), x.name, x.toml);
}

// Gateway -> node: accepted. The coordinator to pull work from, what the work is, and how liveness is kept.
struct JoinAccepted {
  uint64_t session = 0;
  caf::strong_actor_ptr coordinator;
  std::string run;  // experiment name and seed, for the node's log
  eval::RunEvalSettings eval;
  std::vector<TaskText> tasks;
  double heartbeat_s = 1.0, timeout_s = 10.0;
  bool last_run = true;  // no further seed follows this run on this coordinator node
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinAccepted& x) {
  return f(caf::meta::type_name("crucible.JoinAccepted"), x.session, x.coordinator, x.run, x.eval, x.tasks,
           x.heartbeat_s, x.timeout_s, x.last_run);
}

// One line of a node's actor log, formatted as the node wrote it.
struct LogLine {
  std::string component;
  std::string text;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LogLine& x) {
  return f(caf::meta::type_name("crucible.LogLine"), x.component, x.text);
}

// Node -> gateway every heartbeat interval: alive, with the log lines written since the last one.
struct NodeHeartbeat {
  uint64_t session = 0;
  std::vector<LogLine> lines;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeHeartbeat& x) {
  return f(caf::meta::type_name("crucible.NodeHeartbeat"), x.session, x.lines);
}

// Gateway -> coordinator: a node proved the secret; its evaluators may pull under `session` from `node`.
struct NodeJoined {
  uint64_t session = 0;
  std::string name;
  caf::node_id node;
  std::vector<NodeDevice> devices;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeJoined& x) {
  return f(caf::meta::type_name("crucible.NodeJoined"), x.session, x.name, x.node, x.devices);
}

// Gateway -> coordinator: a session ended (connection lost, heartbeats missed, or the node left).
struct NodeLost {
  uint64_t session = 0;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeLost& x) {
  return f(caf::meta::type_name("crucible.NodeLost"), x.session, x.reason);
}

}  // namespace crucible::messages
