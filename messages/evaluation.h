#pragma once
// Messages between the coordinator and the evaluators: a request to evaluate a candidate, and the verdict back.
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "candidate.h"
#include "crucible/eval/verdict.h"

namespace crucible::messages {

// The evaluator judges it on its own device under the run's settings, which it was set up with.
struct EvalRequest {
  Candidate candidate;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EvalRequest& x) {
  return f(caf::meta::type_name("crucible.EvalRequest"), x.candidate);
}

// What rewards, metrics and the run directory need from a verdict. Optional values travel with a flag, as CAF
// 0.17 cannot inspect std::optional; `json` is the evaluator's full verdict for the run directory.
struct VerdictSummary {
  uint64_t candidate_id = 0;
  std::string status;                      // eval::status_name
  std::vector<std::string> reason_codes;
  std::vector<std::string> reason_details;
  bool compile_cached = false;
  double compile_seconds = 0.0;
  bool has_times = false;
  double candidate_median_us = 0.0, candidate_cv = 0.0, reference_median_us = 0.0;
  bool has_speedup = false;
  double speedup = 0.0;
  bool has_kernel_coverage = false;
  double kernel_coverage = 0.0;
  double total_seconds = 0.0, kernel_seconds = 0.0;
  uint64_t seed = 0;
  std::string json;
  std::string device;                          // the evaluator that judged it
  std::string node;                            // its node ("local": the coordinator's); set by the coordinator
  double started_at = 0.0, finished_at = 0.0;  // wall clock of the evaluator's node, seconds since the epoch
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VerdictSummary& x) {
  return f(caf::meta::type_name("crucible.VerdictSummary"), x.candidate_id, x.status, x.reason_codes,
           x.reason_details, x.compile_cached, x.compile_seconds, x.has_times, x.candidate_median_us, x.candidate_cv,
           x.reference_median_us, x.has_speedup, x.speedup, x.has_kernel_coverage, x.kernel_coverage,
           x.total_seconds, x.kernel_seconds, x.seed, x.json, x.device, x.node, x.started_at, x.finished_at);
}

VerdictSummary summarize(uint64_t candidate_id, const eval::Verdict& verdict);
// The fields a reward needs, back in the evaluator's own type (status, reasons, times, speedup, coverage).
eval::Verdict to_verdict(const VerdictSummary& summary);

}  // namespace crucible::messages
