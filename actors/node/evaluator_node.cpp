#include "actors/node/evaluator_node.h"

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <variant>

#include "actors/evaluator.h"
#include "cluster/compile_ahead.h"
#include "cluster/join_proof.h"
#include "actors/node/transport.h"
#include "logging/log.h"
#include "messages/cluster_error.h"
#include "actors/node/actor_system_config.h"
#include "actors/node/eval_settings.h"
#include "actors/node/log_outbox.h"
#include "run/node_logs.h"
#include "tasks/task_loader.h"

namespace crucible::node {
namespace {

namespace msg = crucible::messages;
using Clock = std::chrono::steady_clock;
using actors::gateway_actor;

constexpr std::size_t kLinesPerBeat = 5000;
constexpr auto kJoinTimeout = std::chrono::seconds(10);

std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

// A refusal and a coordinator that cannot prove the secret end the node; a run that is over, or anything else, is
// worth another try (the next seed's run, or the same coordinator back). Told apart by the error's code.
struct JoinFailure {
  bool fatal = false;
  bool run_over = false;
  std::string message;
};

JoinFailure failure_of(caf::scoped_actor& self, const caf::error& e, const std::string& stage) {
  const auto code = msg::cluster_code(e);
  return {code == msg::cluster_error::join_refused, code == msg::cluster_error::run_over,
          stage + ": " + self->system().render(e)};
}

std::variant<msg::JoinAccepted, JoinFailure> join(caf::scoped_actor& self, const gateway_actor& gateway,
                                                  const NodeRequest& r, const std::vector<msg::NodeDevice>& devices) {
  const std::string nonce = cluster::fresh_nonce();
  std::optional<msg::JoinChallenge> challenge;
  JoinFailure failure;
  self->request(gateway, kJoinTimeout, msg::NodeHello{msg::kClusterProtocol, r.name, nonce, devices})
      .receive([&](msg::JoinChallenge& c) { challenge = std::move(c); },
               [&](caf::error& e) { failure = failure_of(self, e, "hello"); });
  if (!challenge) return failure;
  const auto expected = cluster::join_proof(r.secret, cluster::Role::coordinator, nonce, challenge->nonce, r.name);
  if (!cluster::proofs_match(expected, challenge->proof))
    return JoinFailure{true, false, "the coordinator did not prove the shared secret; none of its work will run here"};
  std::optional<msg::JoinAccepted> accepted;
  self->request(gateway, kJoinTimeout,
                msg::NodeProof{r.name, cluster::join_proof(r.secret, cluster::Role::node, challenge->nonce, nonce, r.name)})
      .receive([&](msg::JoinAccepted& a) { accepted = std::move(a); },
               [&](caf::error& e) { failure = failure_of(self, e, "proof"); });
  if (!accepted) return failure;
  return std::move(*accepted);
}

struct SessionEnd {
  bool run_over = false;  // the coordinator refused pulls: its run is done
  std::string reason;
};

using Evaluators = std::map<eval::Device, std::shared_ptr<eval::Evaluator>>;

// A task's text comes from the coordinator; files it names relative to itself are looked up in the node's tasks dir.
std::string task_source(const NodeRequest& r, const std::string& task) {
  if (r.tasks_dir.empty()) return "task " + task;
  return (std::filesystem::path(r.tasks_dir) / (task + ".toml")).string();
}

// A session's pullers: per device as many as cluster::pullers_for says, sharing the device's one evaluator (one set
// of workers and input pools); each monitored by `self`.
struct Pullers {
  std::vector<std::shared_ptr<actors::EvaluatorSetup>> setups;
  std::set<caf::actor_addr> running;
  std::shared_ptr<std::atomic<bool>> stop = std::make_shared<std::atomic<bool>>(false);
};

Pullers spawn_pullers(caf::scoped_actor& self, const msg::JoinAccepted& joined, const NodeRequest& r,
                      const Evaluators& evaluators) {
  auto coordinator = caf::actor_cast<actors::coordinator_actor>(joined.coordinator);
  std::map<std::string, eval::TaskSpec> tasks;
  for (const auto& t : joined.tasks) tasks[t.name] = tasks::parse_task_text(t.toml, task_source(r, t.name));
  auto leases = std::make_shared<devices::DeviceLeases>();
  Pullers out;
  for (const auto& device : r.devices) {
    const auto plan = cluster::pullers_for(device, r.compile_ahead);
    for (int p = 0; p < plan.pullers; ++p) {
      auto s = std::make_shared<actors::EvaluatorSetup>();
      s->options = eval::options_for(joined.eval, device);
      s->tasks = tasks;
      s->leases = leases;
      s->shared = evaluators.at(device);
      s->build_beside_evaluation = plan.build_beside_evaluation;
      s->session = joined.session;
      s->pull_timeout = ms(std::max(0.5, joined.heartbeat_s * 2));
      s->stop = out.stop;
      auto evaluator = self->system().spawn<caf::detached>(actors::evaluator, coordinator, s);
      self->monitor(evaluator);
      out.running.insert(evaluator.address());
      out.setups.push_back(s);
    }
  }
  return out;
}

// One heartbeat with the log lines waiting; on failure the lines go back to the outbox and the session ends.
std::optional<SessionEnd> heartbeat(caf::scoped_actor& self, const gateway_actor& gateway,
                                    const msg::JoinAccepted& joined, const NodeRequest& r) {
  auto lines = r.outbox ? r.outbox->take(kLinesPerBeat) : std::vector<msg::LogLine>{};
  auto sent = lines;
  std::optional<SessionEnd> end;
  self->request(gateway, ms(joined.timeout_s), msg::NodeHeartbeat{joined.session, std::move(sent)})
      .receive([&](caf::ok_atom) {},
               [&](caf::error& e) {
                 if (r.outbox) r.outbox->put_back(std::move(lines));
                 // The run may have ended while this beat was on its way (its notice still queued).
                 end = SessionEnd{msg::cluster_code(e) == msg::cluster_error::run_over,
                                  "heartbeat failed: " + self->system().render(e)};
               });
  return end;
}

// Beats until the gateway says the run is over, the gateway is lost, or every puller has stopped.
SessionEnd beat_until_over(caf::scoped_actor& self, const gateway_actor& gateway, const msg::JoinAccepted& joined,
                           const NodeRequest& r, Pullers& pullers) {
  std::optional<SessionEnd> end;
  auto next_beat = Clock::now();
  while (!end) {
    if (Clock::now() >= next_beat) {
      end = heartbeat(self, gateway, joined, r);
      next_beat = Clock::now() + ms(joined.heartbeat_s);
      if (end) break;
    }
    self->receive(
        [&](actors::over_atom, uint64_t session) {
          // Only this session's gateway ends it: a late notice for an earlier session, or one from anybody else
          // who reached this node's actor, is ignored.
          const auto& sender = self->current_sender();
          if (session != joined.session || !sender || sender->address() != gateway.address()) return;
          end = SessionEnd{true, "the run is over"};
        },
        [&](caf::down_msg& down) {
          if (down.source == gateway.address())
            end = SessionEnd{false, "lost the coordinator's node (" + self->system().render(down.reason) + ")"};
          else if (pullers.running.erase(down.source) && pullers.running.empty())
            end = SessionEnd{pullers.setups.front()->end_code == msg::cluster_error::run_over,
                             pullers.setups.front()->end_reason};
        },
        caf::after(std::max(std::chrono::milliseconds(1),
                            std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now()))) >>
            [] {});
  }
  return *end;
}

// One session: evaluators pull until the run ends or the coordinator is lost; heartbeats carry the log lines.
SessionEnd serve(caf::scoped_actor& self, const gateway_actor& gateway, const msg::JoinAccepted& joined,
                 const NodeRequest& r, const Evaluators& evaluators, const log::Logger& log) {
  auto pullers = spawn_pullers(self, joined, r, evaluators);
  self->monitor(gateway);
  const SessionEnd end = beat_until_over(self, gateway, joined, r, pullers);
  // Evaluators finish the candidate in hand (its result is discarded by a coordinator that moved on) and stop.
  pullers.stop->store(true);
  if (!end.run_over) self->send(gateway, actors::leave_atom_v, joined.session);
  while (!pullers.running.empty())
    self->receive([&](caf::down_msg& down) { pullers.running.erase(down.source); });
  self->demonitor(gateway.address());
  log.info("session ", joined.session, " ended: ", end.reason);
  return end;
}

// One kernels_eval evaluator per device for the node's life: its workers, input pools and reference timings serve
// every session (each seed of a run is one), and a GPU is set up before the first candidate arrives. Throws what
// preparing a device throws.
Evaluators prepare_evaluators(const NodeRequest& r, const log::Logger& log) {
  Evaluators evaluators;
  for (const auto& device : r.devices) {
    const auto started = Clock::now();
    auto evaluator = std::make_shared<eval::Evaluator>(eval::EvaluatorConfig{});
    evaluator->prepare(device);
    if (device.is_cuda())
      log.info("device ", device.name(), " ready in ", std::chrono::duration<double>(Clock::now() - started).count(), " s");
    evaluators[device] = std::move(evaluator);
  }
  return evaluators;
}

}  // namespace

NodeResult run_evaluator_node(const NodeRequest& r) {
  log::Logger log{"node"};
  std::vector<msg::NodeDevice> devices;
  try {
    if (!run::valid_node_name(r.name)) throw std::invalid_argument("'" + r.name + "' is not a valid node name");
    devices = describe_devices(r.devices);
  } catch (const std::exception& e) {
    return {2, e.what()};
  }
  Evaluators evaluators;
  try {
    evaluators = prepare_evaluators(r, log);
  } catch (const std::exception& e) {
    return {2, e.what()};
  }
  caf::actor_system_config config;
  configure_actor_system(config, 2);
  try {
    node::enable_network(config, {r.tls, 1.0, 60.0});
  } catch (const std::exception& e) {
    return {2, e.what()};
  }
  caf::actor_system system{config};
  caf::scoped_actor self{system};
  const std::string where = r.host + ":" + std::to_string(r.port);
  auto give_up_at = Clock::now() + ms(r.give_up_after_s);
  // Short at first: nodes usually start beside their coordinator and wait only for it to listen.
  constexpr auto kFirstBackoff = std::chrono::milliseconds(50);
  auto backoff = kFirstBackoff;
  std::string last_error;
  bool last_run = false;  // of the last session: whether its coordinator node runs no further seed
  auto next_said = Clock::now();
  auto wait = [&] {
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  };
  for (;;) {
    if (Clock::now() >= give_up_at)
      return {3, "gave up: no coordinator at " + where + " for " + std::to_string(r.give_up_after_s) + " s (" + last_error + ")"};
    auto gateway = node::connect<gateway_actor>(system, r.host, r.port, r.tls.enabled());
    if (!gateway) {
      last_error = system.render(gateway.error());
      // On the console (warn) at the first failure and every 15 s: a node waiting for its coordinator is not silent.
      if (Clock::now() >= next_said) {
        const auto left = std::chrono::duration_cast<std::chrono::seconds>(give_up_at - Clock::now()).count();
        log.warn("no coordinator at ", where, " yet (", last_error, "); trying again for ", left, " s more");
        next_said = Clock::now() + std::chrono::seconds(15);
      } else {
        log.debug("no coordinator at ", where, ": ", last_error, "; again in ", backoff.count(), " ms");
      }
      wait();
      continue;
    }
    auto joined = join(self, *gateway, r, devices);
    if (auto* failure = std::get_if<JoinFailure>(&joined)) {
      if (failure->fatal) return {2, failure->message};
      if (failure->run_over && last_run && r.exit_when_done) return {0, "the run is over"};
      last_error = failure->message;
      (failure->run_over ? log.info("join: ", last_error) : log.warn("join failed: ", last_error));
      wait();
      continue;
    }
    auto& accepted = std::get<msg::JoinAccepted>(joined);
    log.info("joined ", accepted.run, " at ", where, " (session ", accepted.session, ")");
    backoff = kFirstBackoff;
    SessionEnd end;
    try {
      end = serve(self, *gateway, accepted, r, evaluators, log);
    } catch (const std::exception& e) {
      return {2, "cannot serve " + accepted.run + ": " + e.what()};
    }
    last_run = accepted.last_run;
    if (end.run_over && last_run && r.exit_when_done) return {0, accepted.run + " is over"};
    last_error = end.reason;
    give_up_at = Clock::now() + ms(r.give_up_after_s);
  }
}

}  // namespace crucible::node
