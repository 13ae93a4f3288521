#pragma once
// The order of a run's work, without CAF: each unit is generated once the unit it waits for (`generate_after`) is
// committed, each group is scored once all its candidates are judged, a unit trains once all its groups are scored
// and `train_after` is committed (so updates apply in order), then it is committed; the run is finished when every
// unit is. Events go in, decisions come out; the coordinator actor turns decisions into messages.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "coordinator/work_queue.h"
#include "modes/unit_plan.h"

namespace crucible::coordinator {

// Ask the policy for every group of the unit (only the first, with sequential_groups).
struct Generate {
  UnitIndex unit = 0;
};
// Generate one more group of a unit whose groups go one after another (sequential_groups: PUCT search), now that
// the group before it is scored.
struct Expand {
  UnitIndex unit = 0;
  uint64_t group = 0;
};
// Ask the policy to refine a group's latest turn (its candidates judged) into turn `turn` (multi-turn).
struct Refine {
  UnitIndex unit = 0;
  uint64_t group = 0;
  uint32_t turn = 0;
};
// Turn a complete group's verdicts into rewards and advantages.
struct Score {
  UnitIndex unit = 0;
  uint64_t group = 0;
};
// Update the policy on the unit's scored samples.
struct Train {
  UnitIndex unit = 0;
};
// Make the unit durable in the run directory.
struct Commit {
  UnitIndex unit = 0;
};
// Every unit is committed.
struct Finish {};

using Decision = std::variant<Generate, Expand, Refine, Score, Train, Commit, Finish>;

enum class Phase { waiting, generating, running, training, committing, committed };

class UnitPipeline {
 public:
  // `committed`: unit names a resumed run committed before; they are not redone.
  UnitPipeline(std::vector<modes::UnitPlan> plans, const std::set<std::string>& committed);

  std::vector<Decision> start();
  // One group's samples arrived, their ids in sample order: its first turn, or (after Refine) its next. A unit runs
  // once all its groups' first turns have. An empty group is scored at once.
  std::vector<Decision> generated(UnitIndex unit, uint64_t group, const std::vector<CandidateId>& candidates);
  // A candidate's verdict is in. Only the first counts (a duplicate, or one for a candidate of no unit here, is
  // ignored); the one that completes its group's latest turn decides Refine (turns left) or Score.
  std::vector<Decision> judged(CandidateId candidate);
  std::vector<Decision> scored(UnitIndex unit, uint64_t group);
  std::vector<Decision> trained(UnitIndex unit);
  // After this the unit's candidates are forgotten.
  std::vector<Decision> committed(UnitIndex unit);

  const modes::UnitPlan& plan(UnitIndex unit) const { return units_.at(unit).plan; }
  std::size_t size() const { return units_.size(); }
  Phase phase(UnitIndex unit) const { return units_.at(unit).phase; }
  std::size_t committed_count() const;
  std::size_t committed_before() const { return committed_before_; }
  std::optional<UnitIndex> unit_of(CandidateId candidate) const;
  bool judged_already(CandidateId candidate) const { return judged_.count(candidate) > 0; }
  // A group's candidates in sample order, turn after turn.
  const std::vector<CandidateId>& group(UnitIndex unit, uint64_t group) const;
  // The candidates of one turn of a group, in sample order.
  std::vector<CandidateId> turn(UnitIndex unit, uint64_t group, uint32_t turn) const;
  uint32_t turns_generated(UnitIndex unit, uint64_t group) const;
  // The unit's candidates, group by group, each in sample order.
  std::vector<CandidateId> candidates(UnitIndex unit) const;

 private:
  struct Unit {
    modes::UnitPlan plan;
    Phase phase = Phase::waiting;
    std::size_t groups_generated = 0, groups_scored = 0, groups_asked = 0;
    std::map<uint64_t, std::vector<CandidateId>> groups;
    std::map<uint64_t, std::vector<std::size_t>> turn_sizes;  // group -> candidates of each turn generated so far
  };

  bool done(int index) const;
  std::vector<Decision> pump();

  std::vector<Unit> units_;
  std::map<CandidateId, std::pair<UnitIndex, uint64_t>> where_;  // candidate -> unit, group
  std::set<CandidateId> judged_;
  std::size_t committed_before_ = 0;
  bool finished_ = false;
};

}  // namespace crucible::coordinator
