#pragma once
// What a running experiment is doing now, shared between the coordinator (which writes it after each decision)
// and the monitor's HTTP threads (which read copies). The only state the monitor cannot read from the run
// directory: units in each phase, queue lengths, what each actor is busy with, and the ETA.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace crucible::monitor {

struct LiveSnapshot {
  std::string experiment, mode;
  uint64_t seed = 0;
  std::size_t seed_index = 0, seeds = 1;  // this seed is the seed_index-th (from 0) of `seeds`
  std::size_t units_total = 0, units_committed = 0, units_committed_at_start = 0;  // this seed
  std::map<std::string, std::size_t> units_by_phase;  // waiting, generating, running, training, committing
  std::string latest_unit;                            // the newest unit started
  std::size_t candidates_done = 0;                    // committed, this process, all seeds
  std::size_t candidates_in_flight = 0;
  std::size_t compile_queue = 0, evaluation_queue = 0, evaluators_idle = 0;
  std::map<std::string, std::string> actors;  // actor -> "busy: ..." or "idle"
  double started_at = 0;                      // this process's start (seconds since the epoch)
  double seed_started_at = 0;
  bool finished = false;
};

// Seconds left over every seed: this seed's remaining units at the pace this process has kept so far (units
// committed before a resume do not count towards the pace), plus the seeds after it at that pace; none before a
// unit of this process has committed.
std::optional<double> remaining_seconds(double elapsed, std::size_t done_here, std::size_t left_this_seed,
                                        std::size_t seeds_after, std::size_t units_per_seed);
std::optional<double> eta_seconds(const LiveSnapshot& s, double now);

class LiveStatus {
 public:
  template <class Update>
  void update(Update&& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    f(snapshot_);
  }
  LiveSnapshot snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return snapshot_;
  }

 private:
  mutable std::mutex mutex_;
  LiveSnapshot snapshot_;
};

}  // namespace crucible::monitor
