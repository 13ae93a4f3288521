#include "actors/coordinator.h"

#include <caf/all.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "actors/unit_records.h"
#include "logging/log.h"
#include "run/node_logs.h"

namespace crucible::actors {
namespace {

enum class Phase { waiting, generating, running, training, committing, committed };

struct UnitState {
  Phase phase = Phase::waiting;
  std::size_t groups_generated = 0, groups_scored = 0;
  std::map<uint64_t, std::vector<uint64_t>> group_candidates;  // group -> candidate ids in sample order
  UnitTrace trace;
  std::string snapshot;
};

// Work waits in order of its unit, so the oldest unit (the one training and commits wait for) goes first.
using QueueKey = std::pair<std::size_t, uint64_t>;  // unit index, candidate id

// A node whose evaluators may pull work: the coordinator's own (session 0) or one a gateway admitted.
struct NodeState {
  std::string name;
  caf::node_id node;
  bool live = true;
};

struct Holding {
  uint64_t candidate = 0;
  uint64_t session = 0;
};

struct CoordinatorState {
  CoordinatorSetup setup;
  std::vector<UnitState> units;
  std::map<uint64_t, CandidateTrace> candidates;
  std::map<uint64_t, std::size_t> unit_of;  // candidate id -> unit index
  std::map<QueueKey, msg::CompileRequest> compile_queue;
  std::map<QueueKey, msg::EvalRequest> eval_queue;
  std::vector<caf::typed_response_promise<msg::CompileRequest>> compile_waiters;
  struct EvalWaiter {
    caf::actor_addr evaluator;
    uint64_t session = 0;
    caf::typed_response_promise<msg::EvalRequest> promise;
  };
  std::vector<EvalWaiter> eval_waiters;
  std::set<caf::actor_addr> monitored;
  std::map<caf::actor_addr, Holding> evaluating;  // evaluator -> what it holds, re-queued if it or its node is lost
  std::map<uint64_t, NodeState> nodes;            // by session
  // Which sources (by hash) each node was handed: a node compiles into its own cache, so a repeated source goes
  // where it was compiled before and the nodes' caches do not all fill with the same builds.
  std::map<uint64_t, std::unordered_set<std::size_t>> handed;
  caf::typed_response_promise<msg::RunOutcome> outcome;
  bool started = false, finished = false;
  double start_time = 0;
  std::size_t committed_now = 0, candidates_done = 0;
  uint64_t policy_version = 0;
  log::Logger log{"coordinator"};
  static inline const char* name = "coordinator";
};

using Self = coordinator_actor::stateful_pointer<CoordinatorState>;

bool unit_done(const CoordinatorState& st, int index) {
  return index < 0 || st.units[static_cast<std::size_t>(index)].phase == Phase::committed;
}

void pump(Self self);
void record_verdict(Self self, msg::VerdictSummary& verdict);
msg::VerdictSummary parse_error_verdict(const msg::Candidate& c, double at);

void finish(Self self, bool ok, const std::string& message) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  msg::RunOutcome out;
  out.ok = ok;
  out.message = message;
  for (const auto& u : st.units) out.units_committed += u.phase == Phase::committed;
  out.candidates = st.candidates_done;
  (ok ? st.log.info("run finished: ", message) : st.log.error("run stopped: ", message));
  const auto over = caf::make_error(caf::sec::request_receiver_down, "the run is over");
  for (auto& w : st.compile_waiters) w.deliver(over);
  for (auto& w : st.eval_waiters) w.promise.deliver(over);
  st.compile_waiters.clear();
  st.eval_waiters.clear();
  st.outcome.deliver(std::move(out));
  self->quit();
}

// Messages only this node's own actors may send: a peer that reached the coordinator's handle is not one of them.
bool from_here(Self self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

void cluster_event(Self self, nlohmann::json event) {
  event["at"] = wall_now();
  self->send(self->state.setup.telemetry, msg::ClusterEvent{event.dump()});
}

void requeue(Self self, uint64_t candidate) {
  auto& s = self->state;
  if (auto u = s.unit_of.find(candidate); u != s.unit_of.end() && !s.candidates.at(candidate).verdict) {
    const auto& c = s.candidates.at(candidate).candidate;
    s.eval_queue[{u->second, c.id}] = msg::EvalRequest{c, "", "", 0};
  }
}

void forget_waiters(Self self, const caf::actor_addr& evaluator) {
  auto& w = self->state.eval_waiters;
  w.erase(std::remove_if(w.begin(), w.end(), [&](const auto& x) { return x.evaluator == evaluator; }), w.end());
}

// The queued candidate for an evaluator of `session`: among the oldest few, one whose source that node already has
// compiled, else one no other live node has, else the oldest. Units stay in order: the window is small.
std::map<QueueKey, msg::EvalRequest>::iterator pick_for(CoordinatorState& st, uint64_t session) {
  constexpr int kWindow = 64;
  auto& mine = st.handed[session];
  auto unclaimed = st.eval_queue.end();
  int scanned = 0;
  for (auto it = st.eval_queue.begin(); it != st.eval_queue.end() && scanned < kWindow; ++it, ++scanned) {
    const std::size_t h = st.candidates.at(it->second.candidate.id).source_hash;
    if (mine.count(h)) return it;
    if (unclaimed != st.eval_queue.end()) continue;
    bool claimed = false;
    for (const auto& [other, hashes] : st.handed)
      if (other != session && st.nodes.count(other) && st.nodes.at(other).live && hashes.count(h)) claimed = true;
    if (!claimed) unclaimed = it;
  }
  return unclaimed != st.eval_queue.end() ? unclaimed : st.eval_queue.begin();
}

void dispatch(Self self) {
  auto& st = self->state;
  while (!st.compile_waiters.empty() && !st.compile_queue.empty()) {
    st.compile_waiters.back().deliver(std::move(st.compile_queue.begin()->second));
    st.compile_waiters.pop_back();
    st.compile_queue.erase(st.compile_queue.begin());
  }
  while (!st.eval_waiters.empty() && !st.eval_queue.empty()) {
    auto& waiter = st.eval_waiters.back();
    auto chosen = pick_for(st, waiter.session);
    auto& request = chosen->second;
    auto& trace = st.candidates.at(request.candidate.id);
    st.handed[waiter.session].insert(trace.source_hash);
    st.evaluating[waiter.evaluator] = Holding{request.candidate.id, waiter.session};
    trace.dispatched_at = wall_now();
    waiter.promise.deliver(request);
    st.eval_waiters.pop_back();
    st.eval_queue.erase(chosen);
  }
}

std::vector<const CandidateTrace*> traces_of(const CoordinatorState& st, const UnitState& u) {
  std::vector<const CandidateTrace*> out;
  for (const auto& [group, ids] : u.group_candidates)
    for (uint64_t id : ids) out.push_back(&st.candidates.at(id));
  return out;
}

void commit(Self self, std::size_t index) {
  auto& st = self->state;
  auto& u = st.units[index];
  u.phase = Phase::committing;
  u.trace.committed_at = wall_now();
  if (!u.trace.plan->train) u.trace.policy_version_after = st.policy_version;
  auto traces = traces_of(st, u);
  for (const auto* t : traces)
    self->send(st.setup.telemetry, msg::CandidateRecord{u.trace.plan->name, t->candidate.source,
                                                         st.setup.source_extension, candidate_record_json(*t, u.trace)});
  std::size_t done = 1;
  for (const auto& other : st.units) done += other.phase == Phase::committed;
  st.candidates_done += traces.size();
  const auto metrics = unit_metrics(traces);
  msg::CommitUnit request{u.trace.plan->name, unit_metrics_json(u.trace, traces, metrics), u.snapshot,
                          progress_line(st.setup.mode, u.trace, metrics, done, st.units.size(),
                                        wall_now() - st.start_time, st.candidates_done)};
  self->request(st.setup.telemetry, caf::infinite, std::move(request))
      .then(
          [=](committed_atom) {
            auto& s = self->state;
            s.units[index].phase = Phase::committed;
            ++s.committed_now;
            // Candidates of a committed unit are no longer needed in memory.
            for (const auto& [group, ids] : s.units[index].group_candidates)
              for (uint64_t id : ids) s.candidates.erase(id), s.unit_of.erase(id);
            pump(self);
          },
          [=](caf::error& e) { finish(self, false, "commit of " + self->state.units[index].trace.plan->name +
                                                       " failed: " + to_string(e)); });
}

void train(Self self, std::size_t index) {
  auto& st = self->state;
  auto& u = st.units[index];
  u.phase = Phase::training;
  msg::TrainBatch batch;
  batch.unit = u.trace.plan->name;
  batch.step = u.trace.plan->step;
  for (const auto* t : traces_of(st, u)) {
    if (!t->advantage) continue;  // dropped group
    batch.samples.push_back({t->candidate.id, t->candidate.policy_version, t->candidate.task, t->candidate.tokens,
                             t->candidate.logprobs, t->reward, *t->advantage});
  }
  u.trace.train_start = wall_now();
  self->request(st.setup.optimizer, caf::infinite, std::move(batch))
      .then(
          [=](msg::PolicyPublished& published) {
            auto& s = self->state;
            auto& unit = s.units[index];
            unit.trace.train_end = wall_now();
            unit.trace.policy_version_after = published.version;
            unit.trace.train_metrics = published.metrics;
            s.policy_version = published.version;
            unit.snapshot = published.snapshot;
            self->send(s.setup.generator, std::move(published));
            commit(self, index);
          },
          [=](caf::error& e) {
            finish(self, false, "training on " + self->state.units[index].trace.plan->name + " failed: " + to_string(e));
          });
}

// Each unit moves on as soon as its dependencies allow: generation after `generate_after` is committed, training
// after `train_after` is committed (so updates apply in order), commit right after training (or scoring).
void pump(Self self) {
  auto& st = self->state;
  if (st.finished) return;
  bool all_committed = true;
  for (std::size_t i = 0; i < st.units.size(); ++i) {
    auto& u = st.units[i];
    const auto& plan = *u.trace.plan;
    all_committed = all_committed && u.phase == Phase::committed;
    if (u.phase == Phase::waiting && unit_done(st, plan.generate_after)) {
      u.phase = Phase::generating;
      for (const auto& g : plan.groups) {
        msg::GenerateRequest request{plan.name, plan.step, g.task, g.group, g.n, g.group * 100000};
        self->request(st.setup.generator, caf::infinite, std::move(request))
            .then(
                [=](msg::Generated& generated) {
                  auto& s = self->state;
                  auto& unit = s.units[i];
                  auto& ids = unit.group_candidates[g.group];
                  std::vector<msg::VerdictSummary> unparsed;
                  for (auto& c : generated.candidates) {
                    ids.push_back(c.id);
                    s.unit_of[c.id] = i;
                    if (!c.parse_error.empty())
                      unparsed.push_back(parse_error_verdict(c, generated.finished_at));
                    else if (s.setup.compile_locally)
                      s.compile_queue[{i, c.id}] = msg::CompileRequest{c.id, c.source, s.setup.compile_device};
                    else  // compiled where it runs, for that node's architecture
                      s.eval_queue[{i, c.id}] = msg::EvalRequest{c, "", "", 0};
                    CandidateTrace trace;
                    trace.generate_start = generated.started_at;
                    trace.generate_end = generated.finished_at;
                    trace.candidate = std::move(c);
                    trace.source_hash = std::hash<std::string>{}(trace.candidate.source);
                    s.candidates[trace.candidate.id] = std::move(trace);
                  }
                  if (++unit.groups_generated == unit.trace.plan->groups.size()) unit.phase = Phase::running;
                  // After the whole group is known: a group of parse failures is complete at once.
                  for (auto& v : unparsed) record_verdict(self, v);
                  dispatch(self);
                },
                [=](caf::error& e) { finish(self, false, "generation for " + plan.name + " failed: " + to_string(e)); });
      }
    }
    if (u.phase == Phase::running && u.groups_scored == plan.groups.size() && unit_done(st, plan.train_after)) {
      if (plan.train) train(self, i);
      else commit(self, i);
    }
  }
  if (all_committed) finish(self, true, std::to_string(st.committed_now) + " units committed");
}

void on_group_complete(Self self, std::size_t index, uint64_t group) {
  auto& st = self->state;
  auto& u = st.units[index];
  msg::ScoreRequest request;
  request.unit = u.trace.plan->name;
  request.group = group;
  const auto& ids = u.group_candidates.at(group);
  request.task = st.candidates.at(ids.front()).candidate.task;
  for (uint64_t id : ids) request.verdicts.push_back(*st.candidates.at(id).verdict);
  self->request(st.setup.normalizer, caf::infinite, std::move(request))
      .then(
          [=](msg::ScoredGroup& scored) {
            auto& s = self->state;
            auto& unit = s.units[index];
            const auto& members = unit.group_candidates.at(group);
            const double now = wall_now();
            for (std::size_t k = 0; k < members.size(); ++k) {
              auto& t = s.candidates.at(members[k]);
              t.reward = scored.rewards.at(k);
              if (!scored.advantages.empty() && unit.trace.plan->train) t.advantage = scored.advantages.at(k);
              t.scored_at = now;
            }
            ++unit.groups_scored;
            pump(self);
          },
          [=](caf::error& e) { finish(self, false, "scoring failed: " + to_string(e)); });
}

// A reply with no usable source is judged here, without a compile or an evaluator: it is the policy's failure.
msg::VerdictSummary parse_error_verdict(const msg::Candidate& c, double at) {
  eval::Verdict v;
  v.task = c.task;
  v.status = eval::Status::parse_error;
  v.reasons.push_back({"no_source", c.parse_error});
  auto summary = msg::summarize(c.id, v);
  summary.device = "policy";
  summary.started_at = summary.finished_at = at;
  return summary;
}

void record_verdict(Self self, msg::VerdictSummary& verdict) {
  auto& st = self->state;
  auto where = st.unit_of.find(verdict.candidate_id);
  if (where == st.unit_of.end()) return;  // a duplicate after a re-queue
  auto& trace = st.candidates.at(verdict.candidate_id);
  if (trace.verdict) return;
  const uint64_t group = trace.candidate.group;
  trace.verdict = std::move(verdict);
  const auto& members = st.units[where->second].group_candidates.at(group);
  bool complete = true;
  for (uint64_t id : members) complete = complete && st.candidates.at(id).verdict.has_value();
  if (complete) on_group_complete(self, where->second, group);
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup) {
  return system.spawn([setup = std::move(setup)](Self self) mutable -> coordinator_actor::behavior_type {
    auto& st = self->state;
    st.setup = std::move(setup);
    st.units.resize(st.setup.units.size());
    for (std::size_t i = 0; i < st.units.size(); ++i) {
      st.units[i].trace.plan = &st.setup.units[i];
      if (st.setup.committed.count(st.setup.units[i].name)) st.units[i].phase = Phase::committed;
    }
    st.nodes[0] = NodeState{run::kLocalNode, self->node(), true};
    // An evaluator that dies mid-candidate (not a candidate's crash: those end in a verdict) gives its work back.
    self->set_down_handler([=](caf::down_msg& down) {
      auto& s = self->state;
      forget_waiters(self, down.source);
      auto it = s.evaluating.find(down.source);
      if (it == s.evaluating.end()) return;
      s.log.warn("an evaluator of node ", s.nodes[it->second.session].name, " went down holding candidate ",
                 it->second.candidate, "; re-queued");
      requeue(self, it->second.candidate);
      s.evaluating.erase(it);
      dispatch(self);
    });
    return {
        [=](run_atom) -> caf::result<msg::RunOutcome> {
          auto& s = self->state;
          if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
          s.outcome = self->make_response_promise<msg::RunOutcome>();
          if (!s.started) {
            s.started = true;
            s.start_time = wall_now();
            s.log.info("run of ", s.units.size(), " units (", s.setup.committed.size(), " already committed)");
            pump(self);
          }
          return s.outcome;
        },
        [=](pull_compile_atom) -> caf::result<msg::CompileRequest> {
          auto& s = self->state;
          if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
          if (s.finished) return caf::make_error(caf::sec::request_receiver_down, "the run is over");
          auto promise = self->make_response_promise<msg::CompileRequest>();
          s.compile_waiters.push_back(promise);
          dispatch(self);
          return promise;
        },
        [=](pull_eval_atom, std::string& device, uint64_t session) -> caf::result<msg::EvalRequest> {
          auto& s = self->state;
          if (s.finished) return caf::make_error(caf::sec::request_receiver_down, "the run is over");
          // Before the promise: making it takes the sender out of the current message.
          auto sender = self->current_sender();
          auto node = s.nodes.find(session);
          if (!sender || node == s.nodes.end() || !node->second.live || node->second.node != sender->node())
            return caf::make_error(caf::sec::request_receiver_down,
                                   "session " + std::to_string(session) + " is not part of this run");
          auto evaluator = caf::actor_cast<caf::actor_addr>(sender);
          // Verdicts come before the next pull on the same connection: an evaluator that pulls while holding a
          // candidate never got it (its pull timed out as the candidate was on its way).
          if (auto held = s.evaluating.find(evaluator); held != s.evaluating.end()) {
            s.log.debug("candidate ", held->second.candidate, " did not reach its evaluator; re-queued");
            requeue(self, held->second.candidate);
            s.evaluating.erase(held);
          }
          forget_waiters(self, evaluator);
          auto promise = self->make_response_promise<msg::EvalRequest>();
          if (s.monitored.insert(evaluator).second) self->monitor(sender);
          s.eval_waiters.push_back({evaluator, session, promise});
          s.log.debug("evaluator on ", node->second.name, "/", device, " is free");
          dispatch(self);
          return promise;
        },
        [=](msg::CompileDone& done) {
          auto& s = self->state;
          if (!from_here(self)) return;
          auto where = s.unit_of.find(done.candidate_id);
          if (where == s.unit_of.end()) return;
          auto& trace = s.candidates.at(done.candidate_id);
          trace.compile = done;
          // Failed builds go on to the evaluator too: the cache holds the failure, so the verdict
          // (compile_error with the compiler's log) is written by the same code as every other verdict.
          s.eval_queue[{where->second, done.candidate_id}] = msg::EvalRequest{trace.candidate, "", "", 0};
          dispatch(self);
        },
        [=](msg::VerdictSummary& verdict) {
          auto& s = self->state;
          const auto& sender = self->current_sender();
          auto held = s.evaluating.find(caf::actor_cast<caf::actor_addr>(sender));
          if (held == s.evaluating.end() || held->second.candidate != verdict.candidate_id) {
            std::string node = "an unknown node";
            for (const auto& [id, n] : s.nodes)
              if (sender && n.node == sender->node()) node = n.name;
            s.log.warn("late result for candidate ", verdict.candidate_id, " from ", node,
                       " discarded: it was handed to another evaluator");
            cluster_event(self, {{"event", "late_result"}, {"node", node}, {"candidate_id", verdict.candidate_id},
                                 {"status", verdict.status}});
            return;
          }
          verdict.node = s.nodes[held->second.session].name;
          s.evaluating.erase(held);
          if (auto t = s.candidates.find(verdict.candidate_id); t != s.candidates.end()) t->second.received_at = wall_now();
          record_verdict(self, verdict);
        },
        [=](msg::NodeJoined& joined) {
          auto& s = self->state;
          if (!from_here(self)) return;
          s.nodes[joined.session] = NodeState{joined.name, joined.node, true};
          s.log.info("node ", joined.name, " joined with ", joined.devices.size(), " device(s)");
          nlohmann::json devices = nlohmann::json::array();
          for (const auto& d : joined.devices)
            devices.push_back({{"device", d.device}, {"kind", d.kind}, {"name", d.name}, {"memory_bytes", d.memory_bytes},
                               {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                               {"multiprocessors", d.multiprocessors}});
          cluster_event(self, {{"event", "joined"}, {"node", joined.name}, {"session", joined.session}, {"devices", devices}});
        },
        [=](msg::NodeLost& lost) {
          auto& s = self->state;
          if (!from_here(self)) return;
          auto node = s.nodes.find(lost.session);
          if (node == s.nodes.end() || !node->second.live) return;
          node->second.live = false;
          std::vector<uint64_t> requeued;
          for (auto it = s.evaluating.begin(); it != s.evaluating.end();) {
            if (it->second.session != lost.session) {
              ++it;
              continue;
            }
            requeued.push_back(it->second.candidate);
            requeue(self, it->second.candidate);
            it = s.evaluating.erase(it);
          }
          // Its waiting pulls are answered, so evaluators of a node that still runs stop and it joins again.
          auto& w = s.eval_waiters;
          for (auto& x : w)
            if (x.session == lost.session) x.promise.deliver(caf::make_error(caf::sec::request_receiver_down, "session lost"));
          w.erase(std::remove_if(w.begin(), w.end(), [&](const auto& x) { return x.session == lost.session; }), w.end());
          s.log.warn("node ", node->second.name, " lost (", lost.reason, "); ", requeued.size(), " candidate(s) re-queued");
          cluster_event(self, {{"event", "lost"}, {"node", node->second.name}, {"session", lost.session},
                               {"reason", lost.reason}, {"requeued", requeued}});
          dispatch(self);
        },
    };
  });
}

}  // namespace crucible::actors
