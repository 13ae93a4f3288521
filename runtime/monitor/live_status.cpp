#include "monitor/live_status.h"

namespace crucible::monitor {

std::optional<double> remaining_seconds(double elapsed, std::size_t done_here, std::size_t left_this_seed,
                                        std::size_t seeds_after, std::size_t units_per_seed) {
  if (done_here == 0 || elapsed <= 0) return std::nullopt;
  const double per_unit = elapsed / static_cast<double>(done_here);
  return per_unit * static_cast<double>(left_this_seed + seeds_after * units_per_seed);
}

std::optional<double> eta_seconds(const LiveSnapshot& s, double now) {
  const std::size_t seeds_after = s.seeds > s.seed_index + 1 ? s.seeds - s.seed_index - 1 : 0;
  return remaining_seconds(now - s.seed_started_at, s.units_committed - s.units_committed_at_start,
                           s.units_total - s.units_committed, seeds_after, s.units_total);
}

}  // namespace crucible::monitor
