#pragma once
// How telemetry writes what the coordinator tells it: one JSON record per candidate, one metrics object per unit,
// and the console progress line. Plain functions over the typed records (messages/records.h).
#include <string>
#include <vector>

#include "actors/interfaces.h"
#include "run/step_metrics.h"

namespace crucible::actors {

std::string candidate_record_json(const msg::CandidateRecord& record, const msg::UnitRecord& unit);
run::Outcome outcome_of(const msg::CandidateRecord& record);
run::StepMetrics unit_metrics(const std::vector<const msg::CandidateRecord*>& records);
// The metrics plus the unit's identity, timings, staleness and budget (samples, tokens, compile and evaluation
// seconds), per-node figures, the policy update's measurements, and the best candidate.
std::string unit_metrics_json(const msg::UnitRecord& unit, const std::vector<const msg::CandidateRecord*>& records,
                              const run::StepMetrics& metrics);
std::string progress_line(const msg::Progress& progress, const msg::UnitRecord& unit, const run::StepMetrics& metrics);

}  // namespace crucible::actors
