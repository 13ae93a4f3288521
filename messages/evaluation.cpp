#include "evaluation.h"

#include "crucible/eval/utf8_text.h"

namespace crucible::messages {

VerdictReport report(uint64_t candidate_id, eval::Verdict verdict) {
  for (auto& r : verdict.reasons) r.detail = eval::valid_utf8(r.detail);  // also verdicts made outside the evaluator
  verdict.compile.log_excerpt = eval::valid_utf8(verdict.compile.log_excerpt);
  VerdictReport out;
  out.candidate_id = candidate_id;
  out.verdict = std::move(verdict);
  return out;
}

}  // namespace crucible::messages
