#include "evaluation.h"

#include "crucible/eval/utf8_text.h"

namespace crucible::messages {

VerdictReport report(uint64_t candidate_id, eval::Verdict verdict) {
  // Also verdicts made outside the evaluator, around the candidate (an exception's text).
  for (auto& r : verdict.reasons) r.detail = eval::valid_utf8(r.detail);
  VerdictReport out;
  out.candidate_id = candidate_id;
  out.verdict = std::move(verdict);
  return out;
}

}  // namespace crucible::messages
