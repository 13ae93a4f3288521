#pragma once
// What the coordinator writes about its work: one JSON record per candidate, one metrics object per unit, and the
// console progress line. Plain functions over the messages a candidate collected on its way.
#include <optional>
#include <string>
#include <vector>

#include "messages/coordination.h"
#include "modes/unit_plan.h"
#include "run/step_metrics.h"

namespace crucible::actors {

// Everything that happened to one candidate, with wall-clock stage timestamps (seconds since the epoch).
struct CandidateTrace {
  messages::Candidate candidate;
  double generate_start = 0, generate_end = 0;
  std::optional<messages::CompileDone> compile;
  std::optional<messages::VerdictSummary> verdict;
  double dispatched_at = 0, received_at = 0;  // coordinator's clock: handed to the evaluator, its verdict back
  std::size_t source_hash = 0;                // which node's cache may hold its build (cache-affine hand-out)
  double reward = 0;
  std::optional<double> advantage;  // none when the group was dropped or the mode does not train
  double scored_at = 0;
};

struct UnitTrace {
  const modes::UnitPlan* plan = nullptr;
  double train_start = 0, train_end = 0;
  uint64_t policy_version_after = 0;  // the version this unit's update published (or the current one)
  std::string train_metrics;          // the policy's own measurements of that update (JSON object)
  double committed_at = 0;
};

std::string candidate_record_json(const CandidateTrace& trace, const UnitTrace& unit);
run::Outcome outcome_of(const CandidateTrace& trace);
run::StepMetrics unit_metrics(const std::vector<const CandidateTrace*>& traces);
// The metrics plus the unit's identity, timings, staleness and budget (samples, tokens, compile and evaluation
// seconds), and the best candidate.
std::string unit_metrics_json(const UnitTrace& unit, const std::vector<const CandidateTrace*>& traces,
                              const run::StepMetrics& metrics);
std::string progress_line(const std::string& mode, const UnitTrace& unit, const run::StepMetrics& metrics,
                          std::size_t units_done, std::size_t units_total, double elapsed_s, std::size_t candidates_done);

}  // namespace crucible::actors
