#pragma once
// What a sample's self-distillation teacher (SDPO, `[policy.train] loss = "sdpo"`) reads after the task's prompt:
// the evaluator's feedback on that very sample, or a correct sibling from its group as implicit feedback. The
// teacher is the same model reading the same completion; only this added context differs (docs/experiments.md).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "crucible/eval/candidate_language.h"
#include "crucible/eval/verdict.h"

namespace crucible::policy {

enum class TeacherFeedback {
  execution,           // the sample's own verdict (feedback_text): status, first mismatch, compiler output, speedup
  successful_sibling,  // the best correct other member of the group (by reward); none: no teacher for the sample
};

std::string_view teacher_feedback_name(TeacherFeedback kind);
std::optional<TeacherFeedback> parse_teacher_feedback(std::string_view name);

struct GroupAttempt {
  const eval::Verdict* verdict = nullptr;
  std::string source;  // the candidate's source (or its whole reply when none could be assembled)
  double reward = 0.0;
};

// One context per member, in order; empty where the member gets no teacher. `language` fences a sibling's code.
std::vector<std::string> teacher_contexts(const std::vector<GroupAttempt>& group, TeacherFeedback kind,
                                          eval::CandidateLanguage language);

}  // namespace crucible::policy
