#include "coordinator/run_view.h"

#include <map>

namespace crucible::coordinator {
namespace {

void append(std::string& list, const std::string& name) { list += (list.empty() ? "" : ", ") + name; }

// Which units each actor works on now: the generator's, the optimizer's and telemetry's.
struct BusyUnits {
  std::string generating, training, committing;
};

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::waiting: return "waiting";
    case Phase::generating: return "generating";
    case Phase::running: return "running";
    case Phase::training: return "training";
    case Phase::committing: return "committing";
    case Phase::committed: return "committed";
  }
  return "?";
}

void describe_run(const UnitPipeline& pipeline, const QueueCounts& q, monitor::LiveSnapshot& s) {
  std::map<std::string, std::size_t> phases;
  std::string latest;
  BusyUnits busy;
  for (UnitIndex u = 0; u < pipeline.size(); ++u) {
    const auto p = pipeline.phase(u);
    ++phases[phase_name(p)];
    const auto& name = pipeline.plan(u).name;
    if (p != Phase::waiting && p != Phase::committed) latest = name;
    if (p == Phase::generating) append(busy.generating, name);
    if (p == Phase::training) append(busy.training, name);
    if (p == Phase::committing) append(busy.committing, name);
  }
  s.units_total = pipeline.size();
  s.units_committed = pipeline.committed_count();
  s.units_committed_at_start = pipeline.committed_before();
  s.units_by_phase = phases;
  if (!latest.empty()) s.latest_unit = latest;
  s.candidates_in_flight = q.candidates_in_flight;
  s.compile_queue = q.compile_queue;
  s.evaluation_queue = q.evaluation_queue;
  s.evaluators_idle = q.evaluators_idle;
  s.actors["coordinator"] = q.finished ? "finished" : "running";
  s.actors["generator"] = busy.generating.empty() ? "idle" : "busy: " + busy.generating;
  s.actors["optimizer"] = busy.training.empty() ? "idle" : "busy: " + busy.training;
  s.actors["telemetry"] = busy.committing.empty() ? "idle" : "committing " + busy.committing;
  s.actors["evaluators"] = std::to_string(q.evaluators_idle) + " waiting for work, " +
                           std::to_string(q.evaluation_queue) + " candidates queued";
}

std::optional<UnitIndex> oldest_unit_in_flight(const UnitPipeline& pipeline) {
  for (UnitIndex u = 0; u < pipeline.size(); ++u) {
    const auto phase = pipeline.phase(u);
    if (phase == Phase::generating || phase == Phase::running) return u;
  }
  return std::nullopt;
}

std::string unit_progress_line(const std::string& mode, uint64_t seed, const std::string& unit,
                               const std::vector<std::optional<eval::Status>>& verdicts) {
  std::map<eval::Status, int> by_status;
  std::size_t judged = 0;
  for (const auto& v : verdicts)
    if (v) ++judged, ++by_status[*v];
  std::string counts;
  for (const auto& [status, n] : by_status) counts += " " + std::string(eval::status_name(status)) + " " + std::to_string(n);
  return "[" + mode + " seed " + std::to_string(seed) + "] " + unit + " in progress: " + std::to_string(judged) + "/" +
         std::to_string(verdicts.size()) + " evaluated |" + counts;
}

}  // namespace crucible::coordinator
