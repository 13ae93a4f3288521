#pragma once
// Self-distillation (`[policy.train] loss = "sdpo"`): what each candidate of a unit has its teacher read before the
// update, decided group by group (all turns of a group together) by policy::teacher_contexts.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "policy/teacher_context.h"

namespace crucible::coordinator {

// `groups`: the unit's groups, each its candidates' ids; `attempt_of` what the teacher may read of one candidate;
// `language` what the candidates are written in, for the code fences. One entry per id.
std::map<uint64_t, std::string> unit_teacher_contexts(const std::vector<std::vector<uint64_t>>& groups,
                                                      const std::function<policy::GroupAttempt(uint64_t)>& attempt_of,
                                                      policy::TeacherFeedback kind, eval::CandidateLanguage language);

}  // namespace crucible::coordinator
