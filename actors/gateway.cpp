#include "actors/gateway.h"

#include <caf/all.hpp>

#include <map>
#include <random>

#include "cluster/join_proof.h"
#include "logging/log.h"
#include "messages/cluster_error.h"
#include "run/node_logs.h"

namespace crucible::actors {
namespace {

// A hello not followed by a proof in time is forgotten; so are the oldest when too many wait.
constexpr std::size_t kMaxPending = 256;
constexpr std::size_t kMaxLinesPerBeat = 20000;

struct Pending {
  msg::NodeHello hello;
  std::string own_nonce;
  caf::node_id node;
  double since = 0;
};

struct Session {
  std::string name;
  caf::node_id node;
  caf::actor_addr peer;  // the node's own actor that joined; monitored
  double last_seen = 0;
};

struct GatewayState {
  GatewaySetup setup;
  std::map<caf::actor_addr, Pending> pending;
  std::map<uint64_t, Session> sessions;
  // Session ids are unique across the seeds' runs and restarts of a coordinator node: a random high half per
  // gateway, then a counter. A node's late message for an old session can never name a current one.
  uint64_t next_session = (uint64_t{std::random_device{}()} << 32) | 1;
  std::unique_ptr<run::NodeLogWriter> node_logs;
  bool over = false;  // the coordinator is gone: no more joins
  log::Logger log{"gateway"};
  static inline const char* name = "gateway";
};

using Self = gateway_actor::stateful_pointer<GatewayState>;

using msg::cluster_error;

caf::error refuse(const std::string& why) { return caf::make_error(cluster_error::join_refused, why); }
caf::error run_over() { return caf::make_error(cluster_error::run_over, "the run is over"); }

void end_session(Self self, uint64_t id, const std::string& reason) {
  auto& st = self->state;
  auto it = st.sessions.find(id);
  if (it == st.sessions.end()) return;
  st.log.warn("node ", it->second.name, " (session ", id, ") lost: ", reason);
  st.sessions.erase(it);
  self->send(st.setup.coordinator, msg::NodeLost{id, reason});
}

// Every node hears that the run is over (so one with --exit-when-done leaves) and none joins it any more.
void announce_over(Self self) {
  auto& st = self->state;
  if (st.over) return;
  st.over = true;
  st.log.info("the run is over; telling ", st.sessions.size(), " node(s)");
  for (const auto& [id, session] : st.sessions)
    // Sent as the gateway, naming the session: a node checks both before it stops.
    if (auto peer = caf::actor_cast<caf::actor>(session.peer)) 
      caf::unsafe_send_as(self, peer, over_atom_v, id);
  st.sessions.clear();
  st.pending.clear();
}

std::string device_list(const std::vector<msg::NodeDevice>& devices) {
  std::string out;
  for (const auto& d : devices) {
    out += (out.empty() ? "" : ", ") + d.device.name() + " (" + d.name;
    if (d.device.is_cuda()) out += ", sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
    out += ")";
  }
  return out;
}

// What a hello must hold before the gateway spends a proof on it; empty: nothing is wrong with it.
std::string hello_problem(const GatewaySetup& setup, const msg::NodeHello& hello) {
  if (hello.protocol != msg::kClusterProtocol)
    return "protocol " + std::to_string(hello.protocol) + ", this coordinator speaks " +
           std::to_string(msg::kClusterProtocol);
  if (!run::valid_node_name(hello.node)) return "'" + hello.node + "' is not a valid node name";
  if (hello.nonce.size() < 32) return "nonce too short";
  const std::string backend(eval::backend_name(setup.eval.backend));
  for (const auto& d : hello.devices)
    if (d.device.backend != setup.eval.backend)
      return "device " + d.device.name() + " is not a " + backend + " device; this run evaluates on " + backend;
  if (hello.devices.empty()) return "no devices";
  return "";
}

caf::result<msg::JoinChallenge> on_hello(Self self, msg::NodeHello& hello) {
  auto& s = self->state;
  auto sender = self->current_sender();
  if (!sender) return refuse("an anonymous hello");  // a join needs an actor to answer
  if (s.over) return run_over();
  if (auto problem = hello_problem(s.setup, hello); !problem.empty()) return refuse(problem);
  if (s.pending.size() >= kMaxPending) s.pending.erase(s.pending.begin());
  Pending p{hello, cluster::fresh_nonce(), sender->node(), wall_now()};
  msg::JoinChallenge challenge{p.own_nonce, cluster::join_proof(s.setup.secret, cluster::Role::coordinator,
                                                                  hello.nonce, p.own_nonce, hello.node)};
  const auto addr = caf::actor_cast<caf::actor_addr>(sender);
  s.pending[addr] = std::move(p);
  self->monitor(sender);
  return challenge;
}

msg::JoinAccepted accepted(const GatewaySetup& setup, uint64_t session) {
  msg::JoinAccepted out;
  out.session = session;
  out.coordinator = caf::actor_cast<caf::strong_actor_ptr>(setup.coordinator);
  out.run = setup.run;
  out.eval = setup.eval;
  out.tasks = setup.tasks;
  out.heartbeat_s = setup.heartbeat_s;
  out.timeout_s = setup.timeout_s;
  out.last_run = setup.last_run;
  return out;
}

caf::result<msg::JoinAccepted> on_proof(Self self, msg::NodeProof& proof) {
  auto& s = self->state;
  auto sender = self->current_sender();
  if (!sender) return refuse("an anonymous proof");
  const auto addr = caf::actor_cast<caf::actor_addr>(sender);
  auto it = s.pending.find(addr);
  if (s.over) return run_over();
  if (it == s.pending.end() || it->second.hello.node != proof.node || it->second.node != sender->node())
    return refuse("no hello from this node");
  Pending p = std::move(it->second);
  s.pending.erase(it);
  const auto expected =
      cluster::join_proof(s.setup.secret, cluster::Role::node, p.own_nonce, p.hello.nonce, p.hello.node);
  if (!cluster::proofs_match(expected, proof.proof)) {
    s.log.warn("node ", p.hello.node, " refused: it did not prove the shared secret");
    return refuse("the node did not prove the shared secret");
  }
  // A node that comes back under its name (after a partition, a restart) replaces its old session.
  for (auto& [id, session] : s.sessions)
    if (session.name == p.hello.node) {
      end_session(self, id, "it joined again");
      break;
    }
  const uint64_t id = s.next_session++;
  s.sessions[id] = Session{p.hello.node, p.node, addr, wall_now()};
  s.log.info("node ", p.hello.node, " joined (session ", id, "): ", device_list(p.hello.devices));
  self->send(s.setup.coordinator, msg::NodeJoined{id, p.hello.node, p.node, p.hello.devices});
  return accepted(s.setup, id);
}

caf::result<caf::ok_atom> on_heartbeat(Self self, msg::NodeHeartbeat& beat) {
  auto& s = self->state;
  auto it = s.sessions.find(beat.session);
  if (s.over) return run_over();
  const auto& sender = self->current_sender();
  if (it == s.sessions.end() || !sender || it->second.node != sender->node())
    return caf::make_error(cluster_error::session_unknown, "session " + std::to_string(beat.session));
  it->second.last_seen = wall_now();
  const std::size_t n = std::min(beat.lines.size(), kMaxLinesPerBeat);
  try {
    for (std::size_t i = 0; i < n; ++i)
      s.node_logs->write(it->second.name, beat.lines[i].component, std::move(beat.lines[i].text));
  } catch (const std::exception& e) {
    s.log.error("cannot write the log lines of node ", it->second.name, ": ", e.what());
  }
  return caf::ok_atom_v;
}

void on_leave(Self self, uint64_t session) {
  auto& s = self->state;
  auto it = s.sessions.find(session);
  const auto& sender = self->current_sender();
  if (it != s.sessions.end() && sender && it->second.node == sender->node()) end_session(self, session, "it left");
}

// Sessions silent for the timeout are lost, hellos without a proof in time forgotten; then again after a beat.
void on_check(Self self, caf::timespan beat) {
  auto& s = self->state;
  const double now = wall_now();
  std::vector<uint64_t> silent;
  for (const auto& [id, session] : s.sessions)
    if (now - session.last_seen > s.setup.timeout_s) silent.push_back(id);
  for (uint64_t id : silent) end_session(self, id, log::cat("no heartbeat for ", s.setup.timeout_s, " s"));
  for (auto it = s.pending.begin(); it != s.pending.end();)
    it = now - it->second.since > s.setup.timeout_s ? s.pending.erase(it) : std::next(it);
  self->delayed_send(self, beat, check_atom_v);
}

// The coordinator's end is the run's; a node's connection lost ends its session.
void watch(Self self) {
  self->monitor(self->state.setup.coordinator);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& s = self->state;
    if (down.source == s.setup.coordinator.address()) return announce_over(self);
    s.pending.erase(down.source);
    for (auto& [id, session] : s.sessions)
      if (session.peer == down.source) return end_session(self, id, "connection lost (" + to_string(down.reason) + ")");
  });
}

}  // namespace

gateway_actor spawn_gateway(caf::actor_system& system, GatewaySetup setup) {
  return system.spawn([setup = std::move(setup)](Self self) mutable -> gateway_actor::behavior_type {
    auto& st = self->state;
    st.setup = std::move(setup);
    st.node_logs = std::make_unique<run::NodeLogWriter>(st.setup.log_dir);
    const auto beat = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.setup.heartbeat_s));
    watch(self);
    self->send(self, check_atom_v);
    return {
        [=](msg::NodeHello& hello) { return on_hello(self, hello); },
        [=](msg::NodeProof& proof) { return on_proof(self, proof); },
        [=](msg::NodeHeartbeat& heartbeat) { return on_heartbeat(self, heartbeat); },
        [=](leave_atom, uint64_t session) { on_leave(self, session); },
        [=](over_atom) -> caf::result<caf::ok_atom> {
          if (self->current_sender() && self->current_sender()->node() == self->node()) announce_over(self);
          return caf::ok_atom_v;
        },
        [=](check_atom) { on_check(self, beat); },
    };
  });
}

}  // namespace crucible::actors
