// The coordinator actor's messages: the run's start, pulls from compile workers and evaluators, their results, and
// the nodes the gateway reports. Each handler translates: the queues and the pipeline (runtime/coordinator) decide.
#include "actors/coordinator.h"

#include <caf/all.hpp>

#include "actors/coordinator_state.h"
#include "messages/cluster_error.h"
#include "run/node_logs.h"

namespace crucible::actors {
namespace coordination {
namespace {

using msg::cluster_error;

core::EvaluatorId id_of(Self self, const caf::actor_addr& addr) {
  auto& p = self->state.pullers;
  auto it = p.ids.find(addr);
  return it != p.ids.end() ? it->second : (p.ids[addr] = p.next_id++);
}

caf::error refusal(core::Refusal why) {
  return why == core::Refusal::run_over ? caf::make_error(cluster_error::run_over, "the run is over")
                                        : caf::make_error(cluster_error::session_lost, "session lost");
}

template <class Request, class MakeRequest>
void deliver_to(std::map<core::EvaluatorId, caf::typed_response_promise<Request>>& waiters, const core::Decisions& d,
                MakeRequest make_request) {
  for (const auto& a : d.assign) {
    waiters.at(a.evaluator).deliver(make_request(a.candidate));
    waiters.erase(a.evaluator);
  }
  for (const auto& r : d.refuse)
    if (auto w = waiters.find(r.evaluator); w != waiters.end()) {
      w->second.deliver(refusal(r.why));
      waiters.erase(w);
    }
}

// Messages only this node's own actors may send: a peer that reached the coordinator's handle is not one of them.
bool from_here(Self self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

void cluster_event(Self self, msg::ClusterEvent event) {
  event.at = wall_now();
  self->send(self->state.setup.telemetry, std::move(event));
}

std::string node_of_sender(Self self) {
  const auto& sender = self->current_sender();
  for (const auto& [session, node] : self->state.pullers.session_nodes)
    if (sender && node == sender->node()) return self->state.work.node_name(session);
  return sender && sender->node() == self->node() ? run::kLocalNode : "an unknown node";
}

caf::result<msg::RunOutcome> on_run(Self self) {
  auto& s = self->state;
  if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
  s.outcome = self->make_response_promise<msg::RunOutcome>();
  if (!s.started) {
    s.started = true;
    s.start_time = wall_now();
    s.progress.reset(s.start_time);
    s.log.info("run of ", s.pipeline->size(), " units (", s.pipeline->committed_before(), " already committed)");
    decide(self, s.pipeline->start());
  }
  return s.outcome;
}

caf::result<msg::CompileRequest> on_pull_compile(Self self) {
  auto& s = self->state;
  if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
  if (s.finished) return refusal(core::Refusal::run_over);
  const auto id = id_of(self, caf::actor_cast<caf::actor_addr>(self->current_sender()));
  auto promise = self->make_response_promise<msg::CompileRequest>();
  s.pullers.compile_waiters[id] = promise;
  deliver_compiles(self, s.compiles.pull(id));
  return promise;
}

// An evaluator pulls under its node's session, which must be the node it speaks from.
caf::result<msg::EvalRequest> on_pull_eval(Self self, const std::string& device, uint64_t session) {
  auto& s = self->state;
  if (s.finished) return refusal(core::Refusal::run_over);
  // Before the promise: making it takes the sender out of the current message.
  auto sender = self->current_sender();
  auto node = s.pullers.session_nodes.find(session);
  if (!sender || node == s.pullers.session_nodes.end() || node->second != sender->node())
    return caf::make_error(cluster_error::session_unknown, "session " + std::to_string(session));
  const auto id = id_of(self, caf::actor_cast<caf::actor_addr>(sender));
  if (s.pullers.monitored.insert(id).second) self->monitor(sender);
  auto promise = self->make_response_promise<msg::EvalRequest>();
  s.pullers.eval_waiters[id] = promise;
  s.log.debug("evaluator on ", s.work.node_name(session), "/", device, " is free");
  auto d = s.work.pull(id, session);
  for (auto c : d.requeued) s.log.debug("candidate ", c, " did not reach its evaluator; re-queued");
  deliver(self, d);
  return promise;
}

// Failed builds go on to the evaluator too: the cache holds the failure, so the verdict (compile_error with the
// compiler's log) is written by the same code as every other verdict.
void on_compile_done(Self self, msg::CompileDone& done) {
  auto& s = self->state;
  if (!from_here(self)) return;
  auto trace = s.candidates.find(done.candidate_id);
  auto unit = s.pipeline->unit_of(done.candidate_id);
  if (trace == s.candidates.end() || !unit) return;
  trace->second.compile = done;
  deliver(self, s.work.offer(*unit, offered(trace->second)));
}

void late_result(Self self, const msg::VerdictReport& verdict) {
  const std::string node = node_of_sender(self);
  self->state.log.warn("late result for candidate ", verdict.candidate_id, " from ", node,
                       " discarded: it was handed to another evaluator");
  msg::ClusterEvent event;
  event.kind = msg::ClusterEventKind::late_result;
  event.node = node;
  event.candidate_id = verdict.candidate_id;
  event.status = verdict.verdict.status;
  cluster_event(self, std::move(event));
}

// A verdict counts only from the evaluator that holds its candidate; the reference timings it brings are handed on.
void on_verdict(Self self, msg::VerdictReport& verdict) {
  auto& s = self->state;
  auto id = s.pullers.ids.find(caf::actor_cast<caf::actor_addr>(self->current_sender()));
  const auto check =
      id == s.pullers.ids.end() ? core::VerdictCheck{} : s.work.verdict(id->second, verdict.candidate_id);
  if (!check.accepted) return late_result(self, verdict);
  verdict.node = s.work.node_name(check.session);
  if (auto t = s.candidates.find(verdict.candidate_id); t != s.candidates.end()) {
    t->second.received_at = wall_now();
    const auto added = s.reference_timings.learn(t->second.candidate.task, verdict.reference_timings);
    if (added > 0)
      s.log.info(verdict.node, " timed the reference of ", t->second.candidate.task, " (", added,
                 " setting(s)); evaluators of the same GPU model will use it");
  }
  verdict.reference_timings.clear();
  record_verdict(self, std::move(verdict));
}

void on_node_joined(Self self, msg::NodeJoined& joined) {
  auto& s = self->state;
  if (!from_here(self)) return;
  s.work.join(joined.session, joined.name);
  s.pullers.session_nodes[joined.session] = joined.node;
  s.log.info("node ", joined.name, " joined with ", joined.devices.size(), " device(s)");
  msg::ClusterEvent event;
  event.kind = msg::ClusterEventKind::joined;
  event.node = joined.name;
  event.session = joined.session;
  event.devices = joined.devices;
  cluster_event(self, std::move(event));
}

// Its waiting pulls are answered, so evaluators of a node that still runs stop and it joins again.
void on_node_lost(Self self, msg::NodeLost& lost) {
  auto& s = self->state;
  if (!from_here(self) || !s.work.live(lost.session)) return;
  auto d = s.work.node_lost(lost.session);
  const std::string name = s.work.node_name(lost.session);
  s.log.warn("node ", name, " lost (", lost.reason, "); ", d.requeued.size(), " candidate(s) re-queued");
  msg::ClusterEvent event;
  event.kind = msg::ClusterEventKind::lost;
  event.node = name;
  event.session = lost.session;
  event.reason = lost.reason;
  event.requeued = d.requeued;
  cluster_event(self, std::move(event));
  deliver(self, d);
}

void init_state(Self self, CoordinatorSetup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  st.pipeline = std::make_unique<core::UnitPipeline>(st.setup.units, st.setup.committed);
  st.snapshots.resize(st.pipeline->size());
  for (std::size_t i = 0; i < st.pipeline->size(); ++i) {
    const auto& plan = st.pipeline->plan(i);
    st.units.push_back({plan.name, plan.step, plan.task, plan.train, 0, 0, 0, {}, 0});
  }
  st.pullers.session_nodes[core::kLocalSession] = self->node();
  st.progress = core::ProgressClock(st.setup.progress_lines, st.setup.progress_interval_s);
  if (st.setup.puct) {
    st.puct.emplace(*st.setup.puct);
    for (const auto& a : st.setup.archived) st.puct->add(evaluated(a.candidate, a.reward), {a.candidate, a.verdict});
  }
  st.setup.archived.clear();
}

// A handler that throws ends the run with a message instead of leaving its caller waiting for ever.
void end_on_exception(Self self) {
  self->set_exception_handler([=](std::exception_ptr& error) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    finish(self, false, "the coordinator failed: " + what);
    return caf::make_error(caf::sec::runtime_error, what);
  });
}

// The actors a run cannot go on without: should one stop, the run ends with a message (never a hang). An evaluator
// that dies mid-candidate (not a candidate's crash: those end in a verdict) gives its work back.
void watch_peers(Self self) {
  const auto& setup = self->state.setup;
  const std::vector<std::pair<caf::actor_addr, std::string>> essential{
      {setup.generator.address(), "rollout generator"}, {setup.normalizer.address(), "reward normalizer"},
      {setup.optimizer.address(), "optimizer"}, {setup.telemetry.address(), "telemetry"}};
  for (const auto& [addr, name] : essential)
    if (auto a = caf::actor_cast<caf::actor>(addr)) self->monitor(a);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& s = self->state;
    for (const auto& [addr, name] : essential)
      if (down.source == addr) return finish(self, false, "the " + name + " stopped: " + self->system().render(down.reason));
    auto id = s.pullers.ids.find(down.source);
    if (id == s.pullers.ids.end()) return;
    s.pullers.eval_waiters.erase(id->second);
    auto d = s.work.evaluator_down(id->second);
    for (auto c : d.requeued) s.log.warn("an evaluator went down holding candidate ", c, "; re-queued");
    deliver(self, d);
  });
}

}  // namespace

void deliver(Self self, const core::Decisions& d) {
  auto& st = self->state;
  deliver_to(st.pullers.eval_waiters, d, [&](uint64_t id) {
    auto& trace = st.candidates.at(id);
    trace.dispatched_at = wall_now();
    return msg::EvalRequest{trace.candidate, st.reference_timings.for_task(trace.candidate.task)};
  });
}

void deliver_compiles(Self self, const core::Decisions& d) {
  auto& st = self->state;
  deliver_to(st.pullers.compile_waiters, d, [&](uint64_t id) {
    const auto& c = st.candidates.at(id).candidate;
    return msg::CompileRequest{c.id, c.source, st.setup.compile_device};
  });
}

}  // namespace coordination

coordinator_actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup) {
  using namespace coordination;
  return system.spawn([setup = std::move(setup)](Self self) mutable -> coordinator_actor::behavior_type {
    init_state(self, std::move(setup));
    end_on_exception(self);
    watch_peers(self);
    return {
        [=](run_atom) { return on_run(self); },
        [=](pull_compile_atom) { return on_pull_compile(self); },
        [=](pull_eval_atom, std::string& device, uint64_t session) { return on_pull_eval(self, device, session); },
        [=](msg::CompileDone& done) { on_compile_done(self, done); },
        [=](msg::VerdictReport& verdict) { on_verdict(self, verdict); },
        [=](msg::NodeJoined& joined) { on_node_joined(self, joined); },
        [=](msg::NodeLost& lost) { on_node_lost(self, lost); },
    };
  });
}

}  // namespace crucible::actors
