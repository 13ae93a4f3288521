#include "coordinator/puct_states.h"

namespace crucible::coordinator {

bool PuctBook::add(const EvaluatedState& s) {
  if (s.policy_error) return false;
  auto& archive = archives_.try_emplace(s.task, options_).first->second;
  std::optional<uint64_t> parent;
  if (s.parent >= 0) {
    const auto p = static_cast<uint64_t>(s.parent);
    parent = state_of(p).value_or(p);
  }
  const uint64_t state = archive.add(s.id, parent, s.code, s.reward);
  state_of_[s.id] = state;
  return state == s.id;
}

std::vector<uint64_t> PuctBook::choose(const std::string& task, uint32_t n) {
  auto archive = archives_.find(task);
  return archive == archives_.end() ? std::vector<uint64_t>{} : archive->second.choose(n);
}

std::optional<uint64_t> PuctBook::state_of(uint64_t candidate) const {
  auto known = state_of_.find(candidate);
  return known == state_of_.end() ? std::nullopt : std::optional<uint64_t>(known->second);
}

}  // namespace crucible::coordinator
