#include "actors/unit_records.h"

#include "monitor/live_status.h"

#include <nlohmann/json.hpp>

#include "crucible/eval/verdict_json.h"

#include <algorithm>
#include <map>
#include <cstdio>

namespace crucible::actors {
namespace {

using nlohmann::json;

json or_null(const caf::optional<double>& x) { return x ? json(*x) : json(nullptr); }

std::string clock_text(double seconds) {
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

}  // namespace

run::Outcome outcome_of(const msg::CandidateRecord& t) {
  run::Outcome o;
  o.task = t.candidate.task;
  // Without a compile of its own (the candidate went to a node as source), the verdict tells.
  const auto status = t.verdict ? std::optional<eval::Status>(t.verdict->verdict.status) : std::nullopt;
  o.compiled = t.compile ? t.compile->ok : status && status != eval::Status::compile_error && status != eval::Status::parse_error;
  o.correct = status == eval::Status::correct;
  if (t.verdict && t.verdict->verdict.speedup) o.speedup = *t.verdict->verdict.speedup;
  o.reward = t.reward;
  return o;
}

std::string candidate_record_json(const msg::CandidateRecord& t, const msg::UnitRecord& unit) {
  const auto& c = t.candidate;
  json j;
  j["candidate_id"] = c.id;
  j["step"] = c.step;
  j["task"] = c.task;
  j["group"] = c.group;
  j["index"] = c.index;
  j["trajectory"] = c.trajectory;
  j["turn"] = c.turn;
  j["parent"] = c.parent >= 0 ? json(c.parent) : json(nullptr);
  j["policy_version"] = c.policy_version;
  // Staleness in policy versions, where versions count this chain's updates only (GRPO; TTT is on-policy per task).
  if (unit.train && unit.task.empty()) j["staleness"] = unit.policy_version_after - 1 - c.policy_version;
  j["policy_output"] = c.output;
  j["tokens"] = c.tokens;
  j["logprobs"] = c.logprobs;
  if (t.compile) {
    j["compile"] = {{"ok", t.compile->ok}, {"cached", t.compile->cached}, {"seconds", t.compile->seconds},
                    {"hash", t.compile->hash}, {"log", t.compile->log}};
  }
  if (t.verdict) {
    const auto& v = t.verdict->verdict;
    const json verdict = json::parse(eval::to_json(v, -1));
    j["status"] = eval::status_name(v.status);
    j["reasons"] = verdict["reasons"];
    j["device"] = verdict["device"];
    j["node"] = t.verdict->node;
    j["candidate_median_us"] = v.candidate_time ? json(v.candidate_time->median_us) : json(nullptr);
    j["candidate_cv"] = v.candidate_time ? json(v.candidate_time->cv) : json(nullptr);
    j["reference_median_us"] = v.reference_time ? json(v.reference_time->median_us) : json(nullptr);
    j["speedup"] = v.speedup ? json(*v.speedup) : json(nullptr);
    j["verdict"] = verdict;
  }
  j["reward"] = t.reward;
  j["advantage"] = or_null(t.advantage);
  if (t.judged) j["judge"] = {{"score", or_null(t.judge_score)}, {"note", t.judge_note}};
  json times;
  times["generate"] = {t.generate_start, t.generate_end};
  if (t.compile) times["compile"] = {t.compile->started_at, t.compile->finished_at};
  if (t.verdict) times["evaluate"] = {t.verdict->started_at, t.verdict->finished_at};
  // On the coordinator's clock; minus the evaluation itself, what handing it out and back cost.
  if (t.received_at > 0) times["dispatch"] = {t.dispatched_at, t.received_at};
  times["scored"] = t.scored_at;
  if (unit.train) times["train"] = {unit.train_start, unit.train_end};
  times["committed"] = unit.committed_at;
  j["times"] = times;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on a stray byte
}

namespace {

// Per node: candidates judged, their evaluation seconds, and failures of the evaluator itself (not the candidate's).
json node_metrics(const std::vector<const msg::CandidateRecord*>& traces) {
  json nodes = json::object();
  for (const auto* t : traces) {
    if (!t->verdict || t->verdict->node.empty()) continue;
    const auto& v = *t->verdict;
    auto& n = nodes[v.node];
    if (n.is_null()) n = {{"candidates", 0}, {"evaluation_seconds", 0.0}, {"evaluator_errors", 0}};
    n["candidates"] = n["candidates"].get<int>() + 1;
    n["evaluation_seconds"] = n["evaluation_seconds"].get<double>() + (v.finished_at - v.started_at);
    const bool failed = v.verdict.has_reason(eval::ReasonCode::evaluator_error);
    n["evaluator_errors"] = n["evaluator_errors"].get<int>() + (failed ? 1 : 0);
  }
  return nodes;
}

}  // namespace

run::StepMetrics unit_metrics(const std::vector<const msg::CandidateRecord*>& traces) {
  std::vector<run::Outcome> outcomes;
  for (const auto* t : traces) outcomes.push_back(outcome_of(*t));
  return run::compute_metrics(outcomes);
}

std::string unit_metrics_json(const msg::UnitRecord& unit, const std::vector<const msg::CandidateRecord*>& traces,
                              const run::StepMetrics& metrics) {
  json j = json::parse(run::metrics_json(metrics));
  j["step"] = unit.step;
  if (!unit.task.empty()) j["task"] = unit.task;
  j["policy_version"] = unit.policy_version_after;
  double first = 0, compile_s = 0, eval_s = 0;
  uint64_t tokens = 0, min_version = UINT64_MAX;
  const msg::CandidateRecord* best = nullptr;
  for (const auto* t : traces) {
    first = first == 0 ? t->generate_start : std::min(first, t->generate_start);
    if (t->compile) compile_s += t->compile->seconds;
    if (t->verdict) eval_s += t->verdict->finished_at - t->verdict->started_at;
    tokens += t->candidate.tokens.size();
    min_version = std::min(min_version, t->candidate.policy_version);
    if (!best || t->reward > best->reward) best = t;
  }
  if (std::any_of(traces.begin(), traces.end(), [](const auto* t) { return t->candidate.turn > 0; })) {
    // Multi-turn: each turn's metrics, and each trajectory judged by its best turn (best-across-turns selection).
    std::map<uint32_t, std::vector<run::Outcome>> by_turn;
    std::map<uint64_t, const msg::CandidateRecord*> best_of_trajectory;
    for (const auto* t : traces) {
      by_turn[t->candidate.turn].push_back(outcome_of(*t));
      auto& b = best_of_trajectory[t->candidate.trajectory];
      if (!b || t->reward > b->reward) b = t;
    }
    json turns = json::array();
    for (const auto& [turn, outcomes] : by_turn) {
      json one = json::parse(run::metrics_json(run::compute_metrics(outcomes)));
      one["turn"] = turn;
      turns.push_back(std::move(one));
    }
    j["turns"] = turns;
    std::vector<run::Outcome> best;
    for (const auto& [trajectory, t] : best_of_trajectory) best.push_back(outcome_of(*t));
    j["best_across_turns"] = json::parse(run::metrics_json(run::compute_metrics(best)));
  }
  // Profiling: the mean share of GPU time in the candidates' own kernels, over those where it was measured; null
  // (unavailable, as on the CPU) when none was, never 0.
  double coverage_sum = 0;
  int coverage_n = 0;
  for (const auto* t : traces)
    if (t->verdict && t->verdict->verdict.kernel_coverage) coverage_sum += *t->verdict->verdict.kernel_coverage, ++coverage_n;
  j["kernel_coverage_mean"] = coverage_n ? json(coverage_sum / coverage_n) : json(nullptr);
  j["budget"] = {{"samples", traces.size()}, {"tokens", tokens}, {"compile_seconds", compile_s},
                 {"evaluation_seconds", eval_s}};
  j["nodes"] = node_metrics(traces);
  if (unit.train) {
    j["train_seconds"] = unit.train_end - unit.train_start;
    // One object for the shared adapter; per adapter (ttt's tasks) under "adapters".
    json all = json::array();
    for (const auto& m : unit.train_metrics) {
      json one{{"loss", m.loss}, {"kl", m.kl ? json(*m.kl) : json(nullptr)}, {"entropy", m.entropy},
               {"clip_fraction", m.clip_fraction},
               {"grad_norm", m.grad_norm}, {"sequences", m.sequences}, {"tokens", m.tokens},
               {"dropped_sequences", m.dropped_sequences}, {"taught_sequences", m.taught_sequences},
               {"distill_kl", m.taught_sequences > 0 ? json(m.distill_kl) : json(nullptr)}};
      if (!m.adapter.empty()) one["adapter"] = m.adapter;
      all.push_back(std::move(one));
    }
    if (all.size() == 1) j["train"] = all[0];
    else if (!all.empty()) j["train"] = {{"adapters", all}};
    if (unit.task.empty() && !traces.empty()) j["max_staleness"] = unit.policy_version_after - 1 - min_version;
  }
  j["wall_seconds"] = unit.committed_at - first;
  if (best && best->verdict) {
    j["best"] = {{"candidate_id", best->candidate.id}, {"task", best->candidate.task},
                 {"status", eval::status_name(best->verdict->verdict.status)}, {"reward", best->reward},
                 {"speedup", best->verdict->verdict.speedup ? json(*best->verdict->verdict.speedup) : json(nullptr)},
                 {"policy_output", best->candidate.output}};
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on a stray byte
}

std::string progress_line(const msg::Progress& p, const msg::UnitRecord& unit, const run::StepMetrics& m) {
  char buf[256];
  const auto eta = monitor::remaining_seconds(p.elapsed_s, p.units_done - p.units_done_before,
                                              p.units_total - p.units_done, p.seeds - p.seed_index - 1, p.units_total);
  std::snprintf(buf, sizeof buf, "[%s seed %llu] %-22s %3llu/%llu | reward mean %.3f max %.3f | correct %3.0f%% fast_1 %3.0f%% | %.1f cand/s | %s elapsed, ETA %s",
                p.mode.c_str(), static_cast<unsigned long long>(p.seed), unit.name.c_str(),
                static_cast<unsigned long long>(p.units_done),
                static_cast<unsigned long long>(p.units_total), m.reward_mean, m.reward_max, 100 * m.correct,
                100 * m.fast_1, p.elapsed_s > 0 ? static_cast<double>(p.candidates_done) / p.elapsed_s : 0.0,
                clock_text(p.elapsed_s).c_str(), eta ? clock_text(*eta).c_str() : "unknown");
  return buf;
}

}  // namespace crucible::actors
