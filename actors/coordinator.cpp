#include "actors/coordinator.h"

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <variant>

#include "coordinator/reference_timings.h"
#include "coordinator/unit_pipeline.h"
#include "coordinator/work_queue.h"
#include "logging/log.h"
#include "messages/cluster_error.h"
#include "run/node_logs.h"

namespace crucible::actors {
namespace {

namespace core = crucible::coordinator;
using msg::cluster_error;

// What decides lives in core::UnitPipeline and core::WorkQueue; this state holds what only an actor can: handles,
// promises, and the candidates' traces that become their records.
struct CoordinatorState {
  CoordinatorSetup setup;
  std::unique_ptr<core::UnitPipeline> pipeline;
  core::WorkQueue work;
  core::CompileQueue compiles;
  core::ReferenceTimingTable reference_timings;
  std::vector<msg::UnitRecord> units;
  std::vector<std::string> snapshots;
  std::map<uint64_t, msg::CandidateRecord> candidates;
  // PUCT: per task, the archive of evaluated states, and what each state was (its sample and verdict), kept past
  // its unit's commit so later units (ttt's next steps) can improve on it.
  std::map<std::string, search::PuctArchive> archives;
  std::map<uint64_t, std::pair<msg::Candidate, eval::Verdict>> states;
  std::map<uint64_t, uint64_t> state_of;  // candidate id -> the archive state it is (a duplicate: the held one)
  // Pullers by the core's numbering: evaluators (and the sessions they pull under) and compile workers.
  std::map<caf::actor_addr, core::EvaluatorId> ids;
  std::map<core::EvaluatorId, caf::typed_response_promise<msg::EvalRequest>> eval_waiters;
  std::map<core::EvaluatorId, caf::typed_response_promise<msg::CompileRequest>> compile_waiters;
  std::set<core::EvaluatorId> monitored;
  std::map<core::SessionId, caf::node_id> session_nodes;
  core::EvaluatorId next_id = 1;
  caf::typed_response_promise<msg::RunOutcome> outcome;
  bool started = false, finished = false;
  double start_time = 0, last_progress_print = 0;
  std::size_t candidates_done = 0;
  uint64_t policy_version = 0;
  log::Logger log{"coordinator"};
  static inline const char* name = "coordinator";
};

using Self = coordinator_actor::stateful_pointer<CoordinatorState>;

void decide(Self self, const std::vector<core::Decision>& decisions);

// An actor's failure as a person reads it: the text it carried ("commit failed: cannot write ...: No space left on
// device"), else CAF's rendering.
std::string reason_of(Self self, const caf::error& e) {
  if (e.context().match_elements<std::string>()) return e.context().get_as<std::string>(0);
  return self->system().render(e);
}

core::EvaluatorId id_of(Self self, const caf::actor_addr& addr) {
  auto& st = self->state;
  auto it = st.ids.find(addr);
  return it != st.ids.end() ? it->second : (st.ids[addr] = st.next_id++);
}

caf::error refusal(core::Refusal why) {
  return why == core::Refusal::run_over ? caf::make_error(cluster_error::run_over, "the run is over")
                                        : caf::make_error(cluster_error::session_lost, "session lost");
}

// Carries out a queue's decisions: each assigned candidate's request to the puller that waits for it, refusals to
// the others.
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

void deliver(Self self, const core::Decisions& d) {
  auto& st = self->state;
  deliver_to(st.eval_waiters, d, [&](uint64_t id) {
    auto& trace = st.candidates.at(id);
    trace.dispatched_at = wall_now();
    return msg::EvalRequest{trace.candidate, st.reference_timings.for_task(trace.candidate.task)};
  });
}

void deliver_compiles(Self self, const core::Decisions& d) {
  auto& st = self->state;
  deliver_to(st.compile_waiters, d, [&](uint64_t id) {
    const auto& c = st.candidates.at(id).candidate;
    return msg::CompileRequest{c.id, c.source, st.setup.compile_device};
  });
}

void finish(Self self, bool ok, const std::string& message) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  msg::RunOutcome out;
  out.ok = ok;
  out.message = message;
  out.units_committed = st.pipeline->committed_count();
  out.candidates = st.candidates_done;
  (ok ? st.log.info("run finished: ", message) : st.log.error("run stopped: ", message));
  deliver(self, st.work.close());
  deliver_compiles(self, st.compiles.close());
  st.outcome.deliver(std::move(out));
  self->quit();
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

// A reply with no usable source is judged here, without a compile or an evaluator: it is the policy's failure.
msg::VerdictReport parse_error_verdict(const msg::Candidate& c, double at) {
  const auto code = c.policy_error ? eval::ReasonCode::policy_error : eval::ReasonCode::no_source;
  auto report = msg::report(
      c.id, eval::verdict_without_evaluation(c.task, std::nullopt, eval::Status::parse_error, code, c.parse_error));
  report.started_at = report.finished_at = at;
  return report;
}

// How far the oldest unit in flight has got, between its commits' progress lines: candidates with a verdict of
// those generated so far, by status.
void print_unit_progress(Self self) {
  auto& st = self->state;
  const double now = wall_now();
  if (!st.setup.progress_lines || now - st.last_progress_print < st.setup.progress_interval_s) return;
  for (std::size_t u = 0; u < st.pipeline->size(); ++u) {
    const auto phase = st.pipeline->phase(u);
    if (phase != core::Phase::generating && phase != core::Phase::running) continue;
    std::map<eval::Status, int> by_status;
    std::size_t judged = 0, total = 0;
    for (uint64_t id : st.pipeline->candidates(u)) {
      ++total;
      auto t = st.candidates.find(id);
      if (t == st.candidates.end() || !t->second.verdict) continue;
      ++judged;
      ++by_status[t->second.verdict->verdict.status];
    }
    std::string counts;
    for (const auto& [status, n] : by_status) counts += " " + std::string(eval::status_name(status)) + " " + std::to_string(n);
    std::cout << "[" << st.setup.mode << " seed " << st.setup.seed << "] " << st.pipeline->plan(u).name << " in progress: "
              << judged << "/" << total << " evaluated |" << counts << std::endl;
    st.last_progress_print = now;
    return;
  }
}

void record_verdict(Self self, msg::VerdictReport verdict) {
  auto& st = self->state;
  auto trace = st.candidates.find(verdict.candidate_id);
  if (trace == st.candidates.end() || st.pipeline->judged_already(verdict.candidate_id)) return;
  trace->second.verdict = std::move(verdict);
  const auto decisions = st.pipeline->judged(trace->first);
  print_unit_progress(self);
  decide(self, decisions);
}

core::Offered offered(const msg::CandidateRecord& trace) {
  return {trace.candidate.id, trace.source_hash, std::hash<std::string>{}(trace.candidate.task)};
}

void on_generated(Self self, std::size_t unit, uint64_t group, msg::Generated& generated) {
  auto& st = self->state;
  std::vector<uint64_t> ids;
  for (auto& c : generated.candidates) {
    ids.push_back(c.id);
    msg::CandidateRecord trace;
    trace.unit = st.pipeline->plan(unit).name;
    trace.generate_start = generated.started_at;
    trace.generate_end = generated.finished_at;
    trace.candidate = std::move(c);
    trace.source_hash = std::hash<std::string>{}(trace.candidate.source);
    st.candidates[trace.candidate.id] = std::move(trace);
  }
  decide(self, st.pipeline->generated(unit, group, ids));
  std::vector<core::Offered> to_nodes;
  for (uint64_t id : ids) {
    const auto& trace = st.candidates.at(id);
    if (!trace.candidate.parse_error.empty())  // after the whole group is known: it may be complete at once
      record_verdict(self, parse_error_verdict(trace.candidate, generated.finished_at));
    else if (st.setup.compile_locally)
      deliver_compiles(self, st.compiles.offer(unit, id));
    else  // compiled where it runs, for that node's architecture
      to_nodes.push_back(offered(trace));
  }
  if (!to_nodes.empty()) deliver(self, st.work.offer(unit, to_nodes));
}

// One group's first samples: fresh, or with PUCT (once the task's archive holds states) each improving on a state
// the archive chooses.
void generate_group(Self self, std::size_t unit, const modes::GroupPlan& g) {
  auto& st = self->state;
  const auto& plan = st.pipeline->plan(unit);
  msg::GenerateRequest request{plan.name, plan.step, g.task, g.group, g.n, g.group * 100000};
  if (st.setup.puct) {
    auto archive = st.archives.find(g.task);
    if (archive != st.archives.end())
      for (uint64_t id : archive->second.choose(g.n)) {
        const auto& [candidate, verdict] = st.states.at(id);
        request.previous.push_back(candidate);
        request.verdicts.push_back(verdict);
      }
  }
  const uint64_t group = g.group;
  self->request(st.setup.generator, caf::infinite, std::move(request))
      .then([=](msg::Generated& generated) { on_generated(self, unit, group, generated); },
            [=](caf::error& e) {
              finish(self, false, "generation for " + self->state.pipeline->plan(unit).name + " failed: " +
                                      reason_of(self, e));
            });
}

void generate(Self self, std::size_t unit) {
  const auto& plan = self->state.pipeline->plan(unit);
  for (const auto& g : plan.groups) {
    generate_group(self, unit, g);
    if (plan.sequential_groups) break;  // the rest follow one by one (Expand)
  }
}

void expand(Self self, std::size_t unit, uint64_t group) {
  for (const auto& g : self->state.pipeline->plan(unit).groups)
    if (g.group == group) return generate_group(self, unit, g);
}

// PUCT: one evaluated candidate joins its task's archive (a parse failure as its reply, so duplicates merge).
void archive_one(CoordinatorState& st, const msg::Candidate& c, const eval::Verdict& verdict, double reward) {
  if (c.policy_error) return;  // the server failed, not the state: neither a state nor a visit
  auto& archive = st.archives.try_emplace(c.task, *st.setup.puct).first->second;
  std::optional<uint64_t> parent;
  if (c.parent >= 0) {  // the state the parent candidate became (a duplicate's is the one held)
    auto known = st.state_of.find(static_cast<uint64_t>(c.parent));
    parent = known != st.state_of.end() ? known->second : static_cast<uint64_t>(c.parent);
  }
  const uint64_t state = archive.add(c.id, parent, c.source.empty() ? c.output : c.source, reward);
  st.state_of[c.id] = state;
  if (state == c.id) st.states[c.id] = {c, verdict};
}

void archive_group(Self self, std::size_t unit, uint64_t group) {
  auto& st = self->state;
  if (!st.setup.puct) return;
  for (uint64_t id : st.pipeline->group(unit, group)) {
    const auto& t = st.candidates.at(id);
    archive_one(st, t.candidate, t.verdict->verdict, t.reward);
  }
}

// Ids of a refinement turn: after the group's first turn (group * 100000 + index), 1000 per turn (the experiment
// keeps groups under 1000 samples and turns under 100).
uint64_t first_id_of_turn(uint64_t group, uint32_t turn) { return group * 100000 + uint64_t{turn} * 1000; }

void refine(Self self, std::size_t unit, uint64_t group, uint32_t turn) {
  auto& st = self->state;
  const auto& plan = st.pipeline->plan(unit);
  msg::GenerateRequest request{plan.name, plan.step, "", group, 0, first_id_of_turn(group, turn)};
  for (const auto& g : plan.groups)
    if (g.group == group) request.task = g.task;
  request.turn = turn;
  for (uint64_t id : st.pipeline->turn(unit, group, turn - 1)) {
    const auto& trace = st.candidates.at(id);
    request.previous.push_back(trace.candidate);
    request.verdicts.push_back(trace.verdict->verdict);
  }
  request.n = static_cast<uint32_t>(request.previous.size());
  self->request(st.setup.generator, caf::infinite, std::move(request))
      .then([=](msg::Generated& generated) { on_generated(self, unit, group, generated); },
            [=](caf::error& e) {
              finish(self, false, "refinement for " + self->state.pipeline->plan(unit).name + " failed: " +
                                      reason_of(self, e));
            });
}

void score(Self self, std::size_t unit, uint64_t group) {
  auto& st = self->state;
  msg::ScoreRequest request;
  request.unit = st.pipeline->plan(unit).name;
  request.group = group;
  const auto& ids = st.pipeline->group(unit, group);
  for (const auto& g : st.pipeline->plan(unit).groups)
    if (g.group == group) request.task = g.task;
  for (uint64_t id : ids) {
    const auto& c = st.candidates.at(id).candidate;
    request.verdicts.push_back(st.candidates.at(id).verdict->verdict);
    request.sources.push_back(c.source.empty() ? c.output : c.source);
  }
  request.turns = std::max<uint32_t>(1, st.pipeline->turns_generated(unit, group));
  self->request(st.setup.normalizer, caf::infinite, std::move(request))
      .then(
          [=](msg::ScoredGroup& scored) {
            auto& s = self->state;
            const auto& members = s.pipeline->group(unit, group);
            const bool trains = s.pipeline->plan(unit).train;
            const double now = wall_now();
            for (std::size_t k = 0; k < members.size(); ++k) {
              auto& t = s.candidates.at(members[k]);
              t.reward = scored.rewards.at(k);
              if (!scored.advantages.empty() && trains) t.advantage = scored.advantages.at(k);
              t.scored_at = now;
              if (k < scored.judge_scores.size()) {
                t.judged = true;
                if (!std::isnan(scored.judge_scores[k])) t.judge_score = scored.judge_scores[k];
                t.judge_note = scored.judge_notes.at(k);
              }
            }
            archive_group(self, unit, group);
            decide(self, s.pipeline->scored(unit, group));
          },
          [=](caf::error& e) { finish(self, false, "scoring failed: " + reason_of(self, e)); });
}

// Self-distillation: what each candidate's teacher reads, decided group by group (all turns of a group together).
std::map<uint64_t, std::string> teacher_contexts(Self self, std::size_t unit) {
  auto& st = self->state;
  std::map<uint64_t, std::string> out;
  if (!st.setup.teacher_feedback) return out;
  const std::string backend(eval::candidate_language(st.setup.backend, st.setup.kind));
  for (const auto& g : st.pipeline->plan(unit).groups) {
    const auto& ids = st.pipeline->group(unit, g.group);
    std::vector<policy::GroupAttempt> group;
    for (uint64_t id : ids) {
      const auto& t = st.candidates.at(id);
      group.push_back({t.verdict ? &t.verdict->verdict : nullptr,
                       t.candidate.source.empty() ? t.candidate.output : t.candidate.source, t.reward});
    }
    auto contexts = policy::teacher_contexts(group, *st.setup.teacher_feedback, backend);
    for (std::size_t k = 0; k < ids.size(); ++k) out[ids[k]] = std::move(contexts[k]);
  }
  return out;
}

void train(Self self, std::size_t unit) {
  auto& st = self->state;
  msg::TrainBatch batch;
  batch.unit = st.pipeline->plan(unit).name;
  batch.step = st.pipeline->plan(unit).step;
  auto contexts = teacher_contexts(self, unit);
  for (uint64_t id : st.pipeline->candidates(unit)) {
    const auto& t = st.candidates.at(id);
    if (!t.advantage) continue;  // dropped group
    batch.samples.push_back({t.candidate.policy_version, t.candidate.task, t.candidate.tokens, t.candidate.logprobs,
                             *t.advantage, t.candidate.prompt, std::move(contexts[id])});
  }
  st.units[unit].train_start = wall_now();
  self->request(st.setup.optimizer, caf::infinite, std::move(batch))
      .then(
          [=](msg::PolicyPublished& published) {
            auto& s = self->state;
            auto& trace = s.units[unit];
            trace.train_end = wall_now();
            trace.policy_version_after = published.version;
            trace.train_metrics = published.metrics;
            s.policy_version = published.version;
            s.snapshots[unit] = published.snapshot;
            self->send(s.setup.generator, std::move(published));
            decide(self, s.pipeline->trained(unit));
          },
          [=](caf::error& e) {
            finish(self, false,
                   "training on " + self->state.pipeline->plan(unit).name + " failed: " + reason_of(self, e));
          });
}

// The unit's candidates go to telemetry, then the commit: telemetry writes them all and makes the commit durable.
void commit(Self self, std::size_t unit) {
  auto& st = self->state;
  auto& u = st.units[unit];
  u.committed_at = wall_now();
  if (!u.train) u.policy_version_after = st.policy_version;
  const auto ids = st.pipeline->candidates(unit);
  for (uint64_t id : ids) self->send(st.setup.telemetry, st.candidates.at(id));
  st.candidates_done += ids.size();
  st.last_progress_print = wall_now();  // the commit's own progress line follows
  if (st.setup.live) st.setup.live->update([&](monitor::LiveSnapshot& s) { s.candidates_done += ids.size(); });
  msg::Progress progress{st.setup.mode,         st.pipeline->committed_count() + 1,
                         st.pipeline->size(),    wall_now() - st.start_time,
                         st.candidates_done,     st.pipeline->committed_before(),
                         st.setup.seed,          st.setup.seed_index,
                         std::max<std::size_t>(1, st.setup.seeds)};
  self->request(st.setup.telemetry, caf::infinite,
                msg::CommitUnit{u, std::string(eval::source_extension(st.setup.backend, st.setup.kind)),
                                st.snapshots[unit], std::move(progress)})
      .then(
          [=](committed_atom) {
            auto& s = self->state;
            const auto done = s.pipeline->candidates(unit);
            auto next = s.pipeline->committed(unit);
            for (uint64_t id : done) s.candidates.erase(id);  // no longer needed in memory
            decide(self, next);
          },
          [=](caf::error& e) {
            finish(self, false,
                   "commit of " + self->state.pipeline->plan(unit).name + " failed: " + reason_of(self, e));
          });
}

const char* phase_name(core::Phase p) {
  switch (p) {
    case core::Phase::waiting: return "waiting";
    case core::Phase::generating: return "generating";
    case core::Phase::running: return "running";
    case core::Phase::training: return "training";
    case core::Phase::committing: return "committing";
    case core::Phase::committed: return "committed";
  }
  return "?";
}

// The monitor's copy of what the run is doing: units by phase, queues, and what each actor is busy with.
void publish_status(Self self) {
  auto& st = self->state;
  if (!st.setup.live) return;
  std::map<std::string, std::size_t> phases;
  std::string latest, generating, training, committing;
  for (std::size_t u = 0; u < st.pipeline->size(); ++u) {
    const auto p = st.pipeline->phase(u);
    ++phases[phase_name(p)];
    const auto& name = st.pipeline->plan(u).name;
    if (p != core::Phase::waiting && p != core::Phase::committed) latest = name;
    if (p == core::Phase::generating) generating += (generating.empty() ? "" : ", ") + name;
    if (p == core::Phase::training) training += (training.empty() ? "" : ", ") + name;
    if (p == core::Phase::committing) committing += (committing.empty() ? "" : ", ") + name;
  }
  const std::size_t idle = st.eval_waiters.size();
  st.setup.live->update([&](monitor::LiveSnapshot& s) {
    s.units_total = st.pipeline->size();
    s.units_committed = st.pipeline->committed_count();
    s.units_committed_at_start = st.pipeline->committed_before();
    s.units_by_phase = phases;
    if (!latest.empty()) s.latest_unit = latest;
    s.candidates_in_flight = st.candidates.size();
    s.compile_queue = st.compiles.queued();
    s.evaluation_queue = st.work.queued();
    s.evaluators_idle = idle;
    s.actors["coordinator"] = st.finished ? "finished" : "running";
    s.actors["generator"] = generating.empty() ? "idle" : "busy: " + generating;
    s.actors["optimizer"] = training.empty() ? "idle" : "busy: " + training;
    s.actors["telemetry"] = committing.empty() ? "idle" : "committing " + committing;
    s.actors["evaluators"] = std::to_string(idle) + " waiting for work, " + std::to_string(st.work.queued()) +
                             " candidates queued";
  });
}

void decide(Self self, const std::vector<core::Decision>& decisions) {
  auto& st = self->state;
  struct Publish {
    Self self;
    ~Publish() { publish_status(self); }
  } publish{self};
  for (const auto& d : decisions) {
    if (st.finished) return;
    if (auto* g = std::get_if<core::Generate>(&d)) generate(self, g->unit);
    else if (auto* r = std::get_if<core::Refine>(&d)) refine(self, r->unit, r->group, r->turn);
    else if (auto* x = std::get_if<core::Expand>(&d)) expand(self, x->unit, x->group);
    else if (auto* s = std::get_if<core::Score>(&d)) score(self, s->unit, s->group);
    else if (auto* t = std::get_if<core::Train>(&d)) train(self, t->unit);
    else if (auto* c = std::get_if<core::Commit>(&d)) commit(self, c->unit);
    else finish(self, true, std::to_string(st.pipeline->committed_count() - st.pipeline->committed_before()) +
                                " units committed");
  }
}

std::string node_of_sender(Self self) {
  const auto& sender = self->current_sender();
  for (const auto& [session, node] : self->state.session_nodes)
    if (sender && node == sender->node()) return self->state.work.node_name(session);
  return sender && sender->node() == self->node() ? run::kLocalNode : "an unknown node";
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup) {
  return system.spawn([setup = std::move(setup)](Self self) mutable -> coordinator_actor::behavior_type {
    auto& st = self->state;
    st.setup = std::move(setup);
    st.pipeline = std::make_unique<core::UnitPipeline>(st.setup.units, st.setup.committed);
    st.units.resize(st.pipeline->size());
    st.snapshots.resize(st.pipeline->size());
    for (std::size_t i = 0; i < st.units.size(); ++i) {
      const auto& plan = st.pipeline->plan(i);
      st.units[i].name = plan.name;
      st.units[i].step = plan.step;
      st.units[i].task = plan.task;
      st.units[i].train = plan.train;
    }
    st.session_nodes[core::kLocalSession] = self->node();
    if (st.setup.puct)
      for (const auto& a : st.setup.archived) archive_one(st, a.candidate, a.verdict, a.reward);
    st.setup.archived.clear();
    // A handler that throws ends the run with a message instead of leaving its caller waiting for ever.
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
    // An evaluator that dies mid-candidate (not a candidate's crash: those end in a verdict) gives its work back.
    // The actors a run cannot go on without: should one stop, the run ends with a message (never a hang).
    const std::vector<std::pair<caf::actor_addr, std::string>> essential{
        {st.setup.generator.address(), "rollout generator"}, {st.setup.normalizer.address(), "reward normalizer"},
        {st.setup.optimizer.address(), "optimizer"}, {st.setup.telemetry.address(), "telemetry"}};
    for (const auto& [addr, name] : essential)
      if (auto a = caf::actor_cast<caf::actor>(addr)) self->monitor(a);
    self->set_down_handler([=](caf::down_msg& down) {
      auto& s = self->state;
      for (const auto& [addr, name] : essential)
        if (down.source == addr) return finish(self, false, "the " + name + " stopped: " + self->system().render(down.reason));
      auto id = s.ids.find(down.source);
      if (id == s.ids.end()) return;
      s.eval_waiters.erase(id->second);
      auto d = s.work.evaluator_down(id->second);
      for (auto c : d.requeued) s.log.warn("an evaluator went down holding candidate ", c, "; re-queued");
      deliver(self, d);
    });
    return {
        [=](run_atom) -> caf::result<msg::RunOutcome> {
          auto& s = self->state;
          if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
          s.outcome = self->make_response_promise<msg::RunOutcome>();
          if (!s.started) {
            s.started = true;
            s.start_time = s.last_progress_print = wall_now();
            s.log.info("run of ", s.pipeline->size(), " units (", s.pipeline->committed_before(), " already committed)");
            decide(self, s.pipeline->start());
          }
          return s.outcome;
        },
        [=](pull_compile_atom) -> caf::result<msg::CompileRequest> {
          auto& s = self->state;
          if (!from_here(self)) return caf::make_error(caf::sec::unexpected_message);
          if (s.finished) return refusal(core::Refusal::run_over);
          const auto id = id_of(self, caf::actor_cast<caf::actor_addr>(self->current_sender()));
          auto promise = self->make_response_promise<msg::CompileRequest>();
          s.compile_waiters[id] = promise;
          deliver_compiles(self, s.compiles.pull(id));
          return promise;
        },
        [=](pull_eval_atom, std::string& device, uint64_t session) -> caf::result<msg::EvalRequest> {
          auto& s = self->state;
          if (s.finished) return refusal(core::Refusal::run_over);
          // Before the promise: making it takes the sender out of the current message.
          auto sender = self->current_sender();
          auto node = s.session_nodes.find(session);
          if (!sender || node == s.session_nodes.end() || node->second != sender->node())
            return caf::make_error(cluster_error::session_unknown, "session " + std::to_string(session));
          const auto addr = caf::actor_cast<caf::actor_addr>(sender);
          const auto id = id_of(self, addr);
          if (s.monitored.insert(id).second) self->monitor(sender);
          auto promise = self->make_response_promise<msg::EvalRequest>();
          s.eval_waiters[id] = promise;
          s.log.debug("evaluator on ", s.work.node_name(session), "/", device, " is free");
          auto d = s.work.pull(id, session);
          for (auto c : d.requeued) s.log.debug("candidate ", c, " did not reach its evaluator; re-queued");
          deliver(self, d);
          return promise;
        },
        [=](msg::CompileDone& done) {
          auto& s = self->state;
          if (!from_here(self)) return;
          auto trace = s.candidates.find(done.candidate_id);
          auto unit = s.pipeline->unit_of(done.candidate_id);
          if (trace == s.candidates.end() || !unit) return;
          trace->second.compile = done;
          // Failed builds go on to the evaluator too: the cache holds the failure, so the verdict (compile_error
          // with the compiler's log) is written by the same code as every other verdict.
          deliver(self, s.work.offer(*unit, offered(trace->second)));
        },
        [=](msg::VerdictReport& verdict) {
          auto& s = self->state;
          auto id = s.ids.find(caf::actor_cast<caf::actor_addr>(self->current_sender()));
          const auto check = id == s.ids.end() ? core::VerdictCheck{} : s.work.verdict(id->second, verdict.candidate_id);
          if (!check.accepted) {
            const std::string node = node_of_sender(self);
            s.log.warn("late result for candidate ", verdict.candidate_id, " from ", node,
                       " discarded: it was handed to another evaluator");
            msg::ClusterEvent event;
            event.kind = msg::ClusterEventKind::late_result;
            event.node = node;
            event.candidate_id = verdict.candidate_id;
            event.status = verdict.verdict.status;
            cluster_event(self, std::move(event));
            return;
          }
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
        },
        [=](msg::NodeJoined& joined) {
          auto& s = self->state;
          if (!from_here(self)) return;
          s.work.join(joined.session, joined.name);
          s.session_nodes[joined.session] = joined.node;
          s.log.info("node ", joined.name, " joined with ", joined.devices.size(), " device(s)");
          msg::ClusterEvent event;
          event.kind = msg::ClusterEventKind::joined;
          event.node = joined.name;
          event.session = joined.session;
          event.devices = joined.devices;
          cluster_event(self, std::move(event));
        },
        [=](msg::NodeLost& lost) {
          auto& s = self->state;
          if (!from_here(self) || !s.work.live(lost.session)) return;
          // Its waiting pulls are answered, so evaluators of a node that still runs stop and it joins again.
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
        },
    };
  });
}

}  // namespace crucible::actors
