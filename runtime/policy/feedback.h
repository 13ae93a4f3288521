#pragma once
// What the evaluator said about a candidate, for the policy's next turn (multi-turn refinement): the verdict kept
// typed for policies that search (status, speedup), and rendered as a bounded text for a language model's prompt.
// The text's format is documented in docs/experiments.md ("Multi-turn refinement").
#include <cstddef>
#include <optional>
#include <string>

#include "crucible/eval/verdict.h"

namespace crucible::policy {

struct Feedback {
  eval::Status status = eval::Status::runtime_error;
  std::optional<eval::ReasonCode> reason;  // the first reason's code (mismatch, compiler_error, ...), if any
  std::string detail;        // its detail: the first mismatch, the refused import, ... (untrusted, bounded)
  std::string compile_log;   // the compiler's excerpt when the build failed (untrusted, bounded)
  std::optional<double> speedup;
  std::optional<double> kernel_coverage;  // GPU only: unavailable on the CPU, never reported as zero
};

// Parts of the text are cut to these many bytes (valid UTF-8, control characters other than newlines and tabs
// removed): a candidate's compiler output or a hostile detail cannot flood the next prompt.
constexpr std::size_t kFeedbackDetailBytes = 400, kFeedbackLogBytes = 1200;

Feedback feedback_of(const eval::Verdict& verdict);

// The documented text; at most about 2 KB whatever the verdict holds.
std::string feedback_text(const Feedback& feedback);

}  // namespace crucible::policy
