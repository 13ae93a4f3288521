#include "actors/unit_records.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace crucible::actors {
namespace {

using nlohmann::json;

json or_null(const std::optional<double>& x) { return x ? json(*x) : json(nullptr); }

std::string clock_text(double seconds) {
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

}  // namespace

run::Outcome outcome_of(const CandidateTrace& t) {
  run::Outcome o;
  o.task = t.candidate.task;
  // Without a compile of its own (the candidate went to a node as source), the verdict tells.
  o.compiled = t.compile ? t.compile->ok
                         : t.verdict && t.verdict->status != "compile_error" && t.verdict->status != "parse_error";
  o.correct = t.verdict && t.verdict->status == "correct";
  if (t.verdict && t.verdict->has_speedup) o.speedup = t.verdict->speedup;
  o.reward = t.reward;
  return o;
}

std::string candidate_record_json(const CandidateTrace& t, const UnitTrace& unit) {
  const auto& c = t.candidate;
  json j;
  j["candidate_id"] = c.id;
  j["step"] = c.step;
  j["task"] = c.task;
  j["group"] = c.group;
  j["index"] = c.index;
  j["policy_version"] = c.policy_version;
  // Staleness in policy versions, where versions count this chain's updates only (GRPO; TTT is on-policy per task).
  if (unit.plan->train && unit.plan->task.empty()) j["staleness"] = unit.policy_version_after - 1 - c.policy_version;
  j["policy_output"] = c.output;
  j["tokens"] = c.tokens;
  j["logprobs"] = c.logprobs;
  if (t.compile) {
    j["compile"] = {{"ok", t.compile->ok}, {"cached", t.compile->cached}, {"seconds", t.compile->seconds},
                    {"hash", t.compile->hash}, {"log", t.compile->log}};
  }
  if (t.verdict) {
    const auto& v = *t.verdict;
    j["status"] = v.status;
    json reasons = json::array();
    for (std::size_t i = 0; i < v.reason_codes.size(); ++i)
      reasons.push_back({{"code", v.reason_codes[i]}, {"detail", i < v.reason_details.size() ? v.reason_details[i] : ""}});
    j["reasons"] = reasons;
    j["device"] = v.device;
    j["node"] = v.node;
    j["candidate_median_us"] = v.has_times ? json(v.candidate_median_us) : json(nullptr);
    j["candidate_cv"] = v.has_times ? json(v.candidate_cv) : json(nullptr);
    j["reference_median_us"] = v.has_times ? json(v.reference_median_us) : json(nullptr);
    j["speedup"] = v.has_speedup ? json(v.speedup) : json(nullptr);
    j["verdict"] = v.json.empty() ? json(nullptr) : json::parse(v.json, nullptr, false);
  }
  j["reward"] = t.reward;
  j["advantage"] = or_null(t.advantage);
  json times;
  times["generate"] = {t.generate_start, t.generate_end};
  if (t.compile) times["compile"] = {t.compile->started_at, t.compile->finished_at};
  if (t.verdict) times["evaluate"] = {t.verdict->started_at, t.verdict->finished_at};
  // On the coordinator's clock; minus the evaluation itself, what handing it out and back cost.
  if (t.received_at > 0) times["dispatch"] = {t.dispatched_at, t.received_at};
  times["scored"] = t.scored_at;
  if (unit.plan->train) times["train"] = {unit.train_start, unit.train_end};
  times["committed"] = unit.committed_at;
  j["times"] = times;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on a stray byte
}

namespace {

// Per node: candidates judged, their evaluation seconds, and failures of the evaluator itself (not the candidate's).
json node_metrics(const std::vector<const CandidateTrace*>& traces) {
  json nodes = json::object();
  for (const auto* t : traces) {
    if (!t->verdict || t->verdict->node.empty()) continue;
    const auto& v = *t->verdict;
    auto& n = nodes[v.node];
    if (n.is_null()) n = {{"candidates", 0}, {"evaluation_seconds", 0.0}, {"evaluator_errors", 0}};
    n["candidates"] = n["candidates"].get<int>() + 1;
    n["evaluation_seconds"] = n["evaluation_seconds"].get<double>() + (v.finished_at - v.started_at);
    const bool failed = std::find(v.reason_codes.begin(), v.reason_codes.end(), "evaluator_error") != v.reason_codes.end();
    n["evaluator_errors"] = n["evaluator_errors"].get<int>() + (failed ? 1 : 0);
  }
  return nodes;
}

}  // namespace

run::StepMetrics unit_metrics(const std::vector<const CandidateTrace*>& traces) {
  std::vector<run::Outcome> outcomes;
  for (const auto* t : traces) outcomes.push_back(outcome_of(*t));
  return run::compute_metrics(outcomes);
}

std::string unit_metrics_json(const UnitTrace& unit, const std::vector<const CandidateTrace*>& traces,
                              const run::StepMetrics& metrics) {
  json j = json::parse(run::metrics_json(metrics));
  j["step"] = unit.plan->step;
  if (!unit.plan->task.empty()) j["task"] = unit.plan->task;
  j["policy_version"] = unit.policy_version_after;
  double first = 0, compile_s = 0, eval_s = 0;
  uint64_t tokens = 0, min_version = UINT64_MAX;
  const CandidateTrace* best = nullptr;
  for (const auto* t : traces) {
    first = first == 0 ? t->generate_start : std::min(first, t->generate_start);
    if (t->compile) compile_s += t->compile->seconds;
    if (t->verdict) eval_s += t->verdict->finished_at - t->verdict->started_at;
    tokens += t->candidate.tokens.size();
    min_version = std::min(min_version, t->candidate.policy_version);
    if (!best || t->reward > best->reward) best = t;
  }
  j["budget"] = {{"samples", traces.size()}, {"tokens", tokens}, {"compile_seconds", compile_s},
                 {"evaluation_seconds", eval_s}};
  j["nodes"] = node_metrics(traces);
  if (unit.plan->train) {
    j["train_seconds"] = unit.train_end - unit.train_start;
    if (!unit.train_metrics.empty() && unit.train_metrics != "{}")
      j["train"] = json::parse(unit.train_metrics, nullptr, false);
    if (unit.plan->task.empty() && !traces.empty()) j["max_staleness"] = unit.policy_version_after - 1 - min_version;
  }
  j["wall_seconds"] = unit.committed_at - first;
  if (best && best->verdict) {
    j["best"] = {{"candidate_id", best->candidate.id}, {"task", best->candidate.task},
                 {"status", best->verdict->status}, {"reward", best->reward},
                 {"speedup", best->verdict->has_speedup ? json(best->verdict->speedup) : json(nullptr)},
                 {"policy_output", best->candidate.output}};
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on a stray byte
}

std::string progress_line(const std::string& mode, const UnitTrace& unit, const run::StepMetrics& m,
                          std::size_t done, std::size_t total, double elapsed, std::size_t candidates_done) {
  char buf[256];
  const double eta = done ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
  std::snprintf(buf, sizeof buf, "[%s] %-22s %3zu/%zu | reward mean %.3f max %.3f | correct %3.0f%% fast_1 %3.0f%% | %.1f cand/s | %s elapsed, ETA %s",
                mode.c_str(), unit.plan->name.c_str(), done, total, m.reward_mean, m.reward_max, 100 * m.correct,
                100 * m.fast_1, elapsed > 0 ? static_cast<double>(candidates_done) / elapsed : 0.0,
                clock_text(elapsed).c_str(), clock_text(eta).c_str());
  return buf;
}

}  // namespace crucible::actors
