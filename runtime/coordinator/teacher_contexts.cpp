#include "coordinator/teacher_contexts.h"

namespace crucible::coordinator {

std::map<uint64_t, std::string> unit_teacher_contexts(const std::vector<std::vector<uint64_t>>& groups,
                                                      const std::function<policy::GroupAttempt(uint64_t)>& attempt_of,
                                                      policy::TeacherFeedback kind, eval::CandidateLanguage language) {
  std::map<uint64_t, std::string> out;
  for (const auto& ids : groups) {
    std::vector<policy::GroupAttempt> group;
    for (uint64_t id : ids) group.push_back(attempt_of(id));
    auto contexts = policy::teacher_contexts(group, kind, language);
    for (std::size_t k = 0; k < ids.size(); ++k) out[ids[k]] = std::move(contexts[k]);
  }
  return out;
}

}  // namespace crucible::coordinator
