#pragma once
// What a person watching a run reads, decided from the pipeline and the queues: the monitor's copy of the run
// (units by phase, queues, what each actor is busy with) and the console's line on the oldest unit in flight.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/unit_pipeline.h"
#include "crucible/eval/verdict.h"
#include "monitor/live_status.h"

namespace crucible::coordinator {

const char* phase_name(Phase phase);

// The queues beside the pipeline, as the actor counts them.
struct QueueCounts {
  std::size_t candidates_in_flight = 0, compile_queue = 0, evaluation_queue = 0, evaluators_idle = 0;
  bool finished = false;
};

// Fills the snapshot's view of this seed's run; what belongs to the process (experiment, seeds, candidates done) is
// left as it is.
void describe_run(const UnitPipeline& pipeline, const QueueCounts& queues, monitor::LiveSnapshot& snapshot);

// The unit a progress line is about: the oldest one generating or running; none when no unit is.
std::optional<UnitIndex> oldest_unit_in_flight(const UnitPipeline& pipeline);

// "[mode seed S] unit in progress: judged/total evaluated | status n ...": `verdicts` holds one entry per candidate
// generated so far, the status of those with a verdict.
std::string unit_progress_line(const std::string& mode, uint64_t seed, const std::string& unit,
                               const std::vector<std::optional<eval::Status>>& verdicts);

// Progress lines at most every interval_s (a commit's own line resets the clock).
class ProgressClock {
 public:
  ProgressClock(bool enabled, double interval_s) : enabled_(enabled), interval_s_(interval_s) {}
  bool due(double now) const { return enabled_ && now - last_ >= interval_s_; }
  void reset(double now) { last_ = now; }

 private:
  bool enabled_;
  double interval_s_;
  double last_ = 0;
};

}  // namespace crucible::coordinator
