#include "monitor/live_status.h"

namespace crucible::monitor {

std::optional<double> eta_seconds(const LiveSnapshot& s, double now) {
  const std::size_t done_here = s.units_committed - s.units_committed_at_start;
  if (done_here == 0 || now <= s.seed_started_at) return std::nullopt;
  const double per_unit = (now - s.seed_started_at) / static_cast<double>(done_here);
  const std::size_t left_here = s.units_total - s.units_committed;
  const std::size_t seeds_after = s.seeds > s.seed_index + 1 ? s.seeds - s.seed_index - 1 : 0;
  return per_unit * static_cast<double>(left_here + seeds_after * s.units_total);
}

}  // namespace crucible::monitor
