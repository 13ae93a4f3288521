#include "policy/teacher_context.h"

#include <cstdio>

#include "policy/feedback.h"
#include "policy/kernel_prompt.h"

namespace crucible::policy {

std::string_view teacher_feedback_name(TeacherFeedback kind) {
  return kind == TeacherFeedback::execution ? "execution" : "successful_sibling";
}

std::optional<TeacherFeedback> parse_teacher_feedback(std::string_view name) {
  for (auto k : {TeacherFeedback::execution, TeacherFeedback::successful_sibling})
    if (teacher_feedback_name(k) == name) return k;
  return std::nullopt;
}

namespace {

std::string sibling_text(const GroupAttempt& sibling, eval::CandidateLanguage language) {
  std::string speedup = "speedup not measured";
  if (sibling.verdict->speedup) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3fx faster than the reference", *sibling.verdict->speedup);
    speedup = buf;
  }
  return "A correct kernel for this task (" + speedup + "):\n" + fenced_code(sibling.source, language) +
         "\nWrite your own correct kernel.\n";
}

}  // namespace

std::vector<std::string> teacher_contexts(const std::vector<GroupAttempt>& group, TeacherFeedback kind,
                                          eval::CandidateLanguage language) {
  std::vector<std::string> out(group.size());
  if (kind == TeacherFeedback::execution) {
    for (std::size_t i = 0; i < group.size(); ++i)
      if (group[i].verdict) out[i] = feedback_text(feedback_of(*group[i].verdict));
    return out;
  }
  // The best correct member teaches the others; it is taught by the second best (never by itself).
  std::optional<std::size_t> best, second;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (!group[i].verdict || group[i].verdict->status != eval::Status::correct) continue;
    if (!best || group[i].reward > group[*best].reward) {
      second = best;
      best = i;
    } else if (!second || group[i].reward > group[*second].reward) {
      second = i;
    }
  }
  for (std::size_t i = 0; i < group.size(); ++i) {
    const auto teacher = i == best ? second : best;
    if (teacher) out[i] = sibling_text(group[*teacher], language);
  }
  return out;
}

}  // namespace crucible::policy
