// The coordinator's unit flow: each decision of the pipeline as the messages it takes (generate, refine, score,
// train, commit), and the events that feed the pipeline back (generated, judged, scored, trained, committed).
#include <caf/all.hpp>

#include <cmath>
#include <iostream>
#include <stdexcept>

#include "actors/coordinator_state.h"
#include "coordinator/candidate_ids.h"
#include "coordinator/teacher_contexts.h"

namespace crucible::actors::coordination {
namespace {

const std::string& task_of_group(const modes::UnitPlan& plan, uint64_t group) {
  for (const auto& g : plan.groups)
    if (g.group == group) return g.task;
  throw std::logic_error("unit " + plan.name + " has no group " + std::to_string(group));
}

// A reply with no usable source is judged here, without a compile or an evaluator: it is the policy's failure.
msg::VerdictReport parse_error_verdict(const msg::Candidate& c, double at) {
  const auto code = c.policy_error ? eval::ReasonCode::policy_error : eval::ReasonCode::no_source;
  auto report = msg::report(
      c.id, eval::verdict_without_evaluation(c.task, std::nullopt, eval::Status::parse_error, code, c.parse_error));
  report.started_at = report.finished_at = at;
  return report;
}

// How far the oldest unit in flight has got, between its commits' progress lines.
void print_unit_progress(Self self) {
  auto& st = self->state;
  const double now = wall_now();
  const auto unit = st.progress.due(now) ? core::oldest_unit_in_flight(*st.pipeline) : std::nullopt;
  if (!unit) return;
  std::vector<std::optional<eval::Status>> verdicts;
  for (uint64_t id : st.pipeline->candidates(*unit)) {
    auto t = st.candidates.find(id);
    const bool judged = t != st.candidates.end() && t->second.verdict;
    verdicts.push_back(judged ? std::optional<eval::Status>(t->second.verdict->verdict.status) : std::nullopt);
  }
  std::cout << core::unit_progress_line(st.setup.mode, st.setup.seed, st.pipeline->plan(*unit).name, verdicts)
            << std::endl;
  st.progress.reset(now);
}

void ask_generator(Self self, std::size_t unit, uint64_t group, msg::GenerateRequest request, const char* what) {
  self->request(self->state.setup.generator, caf::infinite, std::move(request))
      .then([=](msg::Generated& generated) { on_generated(self, unit, group, generated); },
            [=](caf::error& e) {
              finish(self, false, std::string(what) + " for " + self->state.pipeline->plan(unit).name + " failed: " +
                                      reason_of(self, e));
            });
}

// One group's first samples: fresh, or with PUCT (once the task's archive holds states) each improving on a state
// the archive chooses.
void generate_group(Self self, std::size_t unit, const modes::GroupPlan& g) {
  auto& st = self->state;
  const auto& plan = st.pipeline->plan(unit);
  msg::GenerateRequest request{plan.name, plan.step, g.task, g.group, g.n, core::first_candidate_id(g.group)};
  if (st.puct)
    for (const PuctState* state : st.puct->choose(g.task, g.n)) {
      request.previous.push_back(state->candidate);
      request.verdicts.push_back(state->verdict);
    }
  ask_generator(self, unit, g.group, std::move(request), "generation");
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

void refine(Self self, std::size_t unit, uint64_t group, uint32_t turn) {
  auto& st = self->state;
  const auto& plan = st.pipeline->plan(unit);
  msg::GenerateRequest request{plan.name, plan.step, task_of_group(plan, group), group, 0,
                               core::first_candidate_id(group, turn)};
  request.turn = turn;
  for (uint64_t id : st.pipeline->turn(unit, group, turn - 1)) {
    const auto& trace = st.candidates.at(id);
    request.previous.push_back(trace.candidate);
    request.verdicts.push_back(trace.verdict->verdict);
  }
  request.n = static_cast<uint32_t>(request.previous.size());
  ask_generator(self, unit, group, std::move(request), "refinement");
}

// A group's rewards, advantages (when its unit trains) and judgements onto its candidates' records; with PUCT, its
// candidates join their task's archive.
void apply_scores(Self self, std::size_t unit, uint64_t group, const msg::ScoredGroup& scored) {
  auto& st = self->state;
  const auto& members = st.pipeline->group(unit, group);
  const bool trains = st.pipeline->plan(unit).train;
  const double now = wall_now();
  for (std::size_t k = 0; k < members.size(); ++k) {
    auto& t = st.candidates.at(members[k]);
    t.reward = scored.rewards.at(k);
    if (!scored.advantages.empty() && trains) t.advantage = scored.advantages.at(k);
    t.scored_at = now;
    if (k < scored.judge_scores.size()) {
      t.judged = true;
      if (!std::isnan(scored.judge_scores[k])) t.judge_score = scored.judge_scores[k];
      t.judge_note = scored.judge_notes.at(k);
    }
    if (st.puct) st.puct->add(evaluated(t.candidate, t.reward), {t.candidate, t.verdict->verdict});
  }
}

void score(Self self, std::size_t unit, uint64_t group) {
  auto& st = self->state;
  msg::ScoreRequest request;
  request.unit = st.pipeline->plan(unit).name;
  request.group = group;
  request.task = task_of_group(st.pipeline->plan(unit), group);
  for (uint64_t id : st.pipeline->group(unit, group)) {
    const auto& t = st.candidates.at(id);
    request.verdicts.push_back(t.verdict->verdict);
    request.sources.push_back(t.candidate.source.empty() ? t.candidate.output : t.candidate.source);
  }
  request.turns = std::max<uint32_t>(1, st.pipeline->turns_generated(unit, group));
  self->request(st.setup.normalizer, caf::infinite, std::move(request))
      .then(
          [=](msg::ScoredGroup& scored) {
            apply_scores(self, unit, group, scored);
            decide(self, self->state.pipeline->scored(unit, group));
          },
          [=](caf::error& e) { finish(self, false, "scoring failed: " + reason_of(self, e)); });
}

// The unit's trained samples as they were generated, each with its advantage (and, SDPO, its teacher's context).
msg::TrainBatch train_batch(CoordinatorState& st, std::size_t unit) {
  msg::TrainBatch batch{st.pipeline->plan(unit).name, st.pipeline->plan(unit).step, {}, {}};
  std::map<uint64_t, std::string> contexts;
  if (st.setup.teacher_feedback) {
    std::vector<std::vector<uint64_t>> groups;
    for (const auto& g : st.pipeline->plan(unit).groups) groups.push_back(st.pipeline->group(unit, g.group));
    const auto attempt_of = [&](uint64_t id) {
      const auto& t = st.candidates.at(id);
      return policy::GroupAttempt{t.verdict ? &t.verdict->verdict : nullptr,
                                  t.candidate.source.empty() ? t.candidate.output : t.candidate.source, t.reward};
    };
    contexts = core::unit_teacher_contexts(groups, attempt_of, *st.setup.teacher_feedback,
                                              eval::CandidateLanguage{st.setup.backend, st.setup.kind});
  }
  for (uint64_t id : st.pipeline->candidates(unit)) {
    const auto& t = st.candidates.at(id);
    if (!t.advantage) continue;  // dropped group
    batch.samples.push_back(t.candidate);
    batch.samples.back().teacher_context = std::move(contexts[id]);
    batch.advantages.push_back(*t.advantage);
  }
  return batch;
}

void train(Self self, std::size_t unit) {
  auto& st = self->state;
  st.units[unit].train_start = wall_now();
  self->request(st.setup.optimizer, caf::infinite, train_batch(st, unit))
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

msg::Progress progress(const CoordinatorState& st) {
  return {st.setup.mode,        st.pipeline->committed_count() + 1, st.pipeline->size(),
          wall_now() - st.start_time, st.candidates_done,           st.pipeline->committed_before(),
          st.setup.seed,        st.setup.seed_index,                std::max<std::size_t>(1, st.setup.seeds)};
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
  st.progress.reset(wall_now());  // the commit's own progress line follows
  if (st.setup.live) st.setup.live->update([&](monitor::LiveSnapshot& s) { s.candidates_done += ids.size(); });
  self->request(st.setup.telemetry, caf::infinite,
                msg::CommitUnit{u, std::string(eval::source_extension(st.setup.backend, st.setup.kind)), st.snapshots[unit], progress(st)})
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

void publish_status(Self self) {
  auto& st = self->state;
  if (!st.setup.live) return;
  const core::QueueCounts queues{st.candidates.size(), st.compiles.queued(), st.work.queued(),
                                 st.pullers.eval_waiters.size(), st.finished};
  st.setup.live->update([&](monitor::LiveSnapshot& s) { core::describe_run(*st.pipeline, queues, s); });
}

}  // namespace

core::EvaluatedState evaluated(const msg::Candidate& c, double reward) {
  return {c.id, c.parent, c.task, c.source.empty() ? c.output : c.source, reward, c.policy_error};
}

core::Offered offered(const msg::CandidateRecord& trace) {
  return {trace.candidate.id, trace.source_hash, std::hash<std::string>{}(trace.candidate.task)};
}

std::string reason_of(Self self, const caf::error& e) {
  if (e.context().match_elements<std::string>()) return e.context().get_as<std::string>(0);
  return self->system().render(e);
}

void finish(Self self, bool ok, const std::string& message) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  msg::RunOutcome out{ok, message, st.pipeline->committed_count(), st.candidates_done};
  (ok ? st.log.info("run finished: ", message) : st.log.error("run stopped: ", message));
  deliver(self, st.work.close());
  deliver_compiles(self, st.compiles.close());
  st.outcome.deliver(std::move(out));
  self->quit();
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

void on_generated(Self self, std::size_t unit, uint64_t group, msg::Generated& generated) {
  auto& st = self->state;
  std::vector<uint64_t> ids;
  for (auto& c : generated.candidates) {
    ids.push_back(c.id);
    msg::CandidateRecord trace;
    trace.unit = st.pipeline->plan(unit).name;
    trace.generate_start = generated.started_at;
    trace.generate_end = generated.finished_at;
    trace.source_hash = std::hash<std::string>{}(c.source);
    trace.candidate = std::move(c);
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

}  // namespace crucible::actors::coordination
