#include "evaluation.h"

#include "crucible/eval/utf8_text.h"
#include "crucible/eval/verdict_json.h"

namespace crucible::messages {

VerdictSummary summarize(uint64_t candidate_id, const eval::Verdict& v) {
  VerdictSummary s;
  s.candidate_id = candidate_id;
  s.status = std::string(eval::status_name(v.status));
  for (const auto& r : v.reasons) {
    s.reason_codes.push_back(r.code);
    s.reason_details.push_back(eval::valid_utf8(r.detail));  // also verdicts made outside the evaluator
  }
  s.compile_cached = v.compile.cached;
  s.compile_seconds = v.compile.seconds;
  if (v.candidate_time) {
    s.has_times = true;
    s.candidate_median_us = v.candidate_time->median_us;
    s.candidate_cv = v.candidate_time->cv;
    s.reference_median_us = v.reference_time ? v.reference_time->median_us : 0.0;
  }
  if (v.speedup) {
    s.has_speedup = true;
    s.speedup = *v.speedup;
  }
  if (v.kernel_coverage) {
    s.has_kernel_coverage = true;
    s.kernel_coverage = *v.kernel_coverage;
  }
  s.total_seconds = v.stages.total_s;
  s.kernel_seconds = v.stages.kernel_s;
  s.seed = v.seed;
  s.json = eval::to_json(v, -1);
  return s;
}

eval::Verdict to_verdict(const VerdictSummary& s) {
  eval::Verdict v;
  v.status = eval::parse_status(s.status);
  for (std::size_t i = 0; i < s.reason_codes.size(); ++i)
    v.reasons.push_back({s.reason_codes[i], i < s.reason_details.size() ? s.reason_details[i] : std::string()});
  v.compile.cached = s.compile_cached;
  v.compile.seconds = s.compile_seconds;
  if (s.has_times) {
    eval::TimingStats candidate, reference;
    candidate.median_us = s.candidate_median_us;
    candidate.cv = s.candidate_cv;
    reference.median_us = s.reference_median_us;
    v.candidate_time = candidate;
    v.reference_time = reference;
  }
  if (s.has_speedup) v.speedup = s.speedup;
  if (s.has_kernel_coverage) v.kernel_coverage = s.kernel_coverage;
  v.stages.total_s = s.total_seconds;
  v.stages.kernel_s = s.kernel_seconds;
  v.seed = s.seed;
  return v;
}

}  // namespace crucible::messages
