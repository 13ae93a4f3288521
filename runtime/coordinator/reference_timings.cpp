#include "coordinator/reference_timings.h"

#include <algorithm>

namespace crucible::coordinator {

std::size_t ReferenceTimingTable::learn(const std::string& task, const std::vector<eval::SharedTiming>& reported) {
  auto& known = by_task_[task];
  std::size_t added = 0;
  for (const auto& t : reported) {
    if (t.task != task || !eval::plausible(t) || known.size() >= kPerTask) continue;
    const bool seen = std::any_of(known.begin(), known.end(), [&](const eval::SharedTiming& k) { return k.key == t.key; });
    if (seen) continue;
    known.push_back(t);
    ++added;
  }
  return added;
}

const std::vector<eval::SharedTiming>& ReferenceTimingTable::for_task(const std::string& task) const {
  static const std::vector<eval::SharedTiming> none;
  auto it = by_task_.find(task);
  return it == by_task_.end() ? none : it->second;
}

}  // namespace crucible::coordinator
