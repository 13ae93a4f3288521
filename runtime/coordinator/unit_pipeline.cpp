#include "coordinator/unit_pipeline.h"

#include <stdexcept>

namespace crucible::coordinator {

UnitPipeline::UnitPipeline(std::vector<modes::UnitPlan> plans, const std::set<std::string>& committed) {
  for (auto& p : plans) {
    Unit u;
    u.phase = committed.count(p.name) ? Phase::committed : Phase::waiting;
    committed_before_ += u.phase == Phase::committed;
    u.plan = std::move(p);
    units_.push_back(std::move(u));
  }
}

bool UnitPipeline::done(int index) const {
  return index < 0 || units_.at(static_cast<std::size_t>(index)).phase == Phase::committed;
}

std::size_t UnitPipeline::committed_count() const {
  std::size_t n = 0;
  for (const auto& u : units_) n += u.phase == Phase::committed;
  return n;
}

std::optional<UnitIndex> UnitPipeline::unit_of(CandidateId candidate) const {
  auto it = where_.find(candidate);
  if (it == where_.end()) return std::nullopt;
  return it->second.first;
}

const std::vector<CandidateId>& UnitPipeline::group(UnitIndex unit, uint64_t group) const {
  return units_.at(unit).groups.at(group);
}

std::vector<CandidateId> UnitPipeline::turn(UnitIndex unit, uint64_t group, uint32_t turn) const {
  const auto& u = units_.at(unit);
  const auto& sizes = u.turn_sizes.at(group);
  const auto& ids = u.groups.at(group);
  std::size_t begin = 0;
  for (uint32_t t = 0; t < turn; ++t) begin += sizes.at(t);
  return {ids.begin() + static_cast<std::ptrdiff_t>(begin),
          ids.begin() + static_cast<std::ptrdiff_t>(begin + sizes.at(turn))};
}

uint32_t UnitPipeline::turns_generated(UnitIndex unit, uint64_t group) const {
  const auto& sizes = units_.at(unit).turn_sizes;
  auto it = sizes.find(group);
  return it == sizes.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

std::vector<CandidateId> UnitPipeline::candidates(UnitIndex unit) const {
  std::vector<CandidateId> out;
  for (const auto& [group, ids] : units_.at(unit).groups) out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::vector<Decision> UnitPipeline::start() { return pump(); }

std::vector<Decision> UnitPipeline::generated(UnitIndex unit, uint64_t group, const std::vector<CandidateId>& ids) {
  auto& u = units_.at(unit);
  auto& sizes = u.turn_sizes[group];
  const bool first_turn = sizes.empty();
  const bool sequential = u.plan.sequential_groups;
  if (first_turn ? !(u.phase == Phase::generating || (sequential && u.phase == Phase::running)) : u.phase != Phase::running)
    throw std::logic_error("samples for unit " + u.plan.name + ", which is not " + (first_turn ? "generating" : "running"));
  auto& members = u.groups[group];
  for (CandidateId id : ids) {
    members.push_back(id);
    where_[id] = {unit, group};
  }
  sizes.push_back(ids.size());
  if (first_turn && (++u.groups_generated == u.plan.groups.size() || sequential)) u.phase = Phase::running;
  // A group the policy returned no samples for has nothing to wait for.
  if (ids.empty()) return {Score{unit, group}};
  return {};
}

std::vector<Decision> UnitPipeline::judged(CandidateId candidate) {
  auto it = where_.find(candidate);
  if (it == where_.end() || !judged_.insert(candidate).second) return {};
  const auto [unit, group] = it->second;
  const auto& u = units_[unit];
  for (CandidateId id : u.groups.at(group))
    if (!judged_.count(id)) return {};
  const auto turns = static_cast<uint32_t>(u.turn_sizes.at(group).size());
  if (turns < u.plan.turns) return {Refine{unit, group, turns}};
  return {Score{unit, group}};
}

std::vector<Decision> UnitPipeline::scored(UnitIndex unit, uint64_t) {
  auto& u = units_.at(unit);
  ++u.groups_scored;
  if (u.plan.sequential_groups && u.groups_asked < u.plan.groups.size())
    return {Expand{unit, u.plan.groups[u.groups_asked++].group}};
  return pump();
}

std::vector<Decision> UnitPipeline::trained(UnitIndex unit) {
  units_.at(unit).phase = Phase::committing;
  return {Commit{unit}};
}

std::vector<Decision> UnitPipeline::committed(UnitIndex unit) {
  auto& u = units_.at(unit);
  u.phase = Phase::committed;
  for (const auto& [group, ids] : u.groups)
    for (CandidateId id : ids) where_.erase(id), judged_.erase(id);
  u.groups.clear();
  u.turn_sizes.clear();
  return pump();
}

// Each unit moves on as soon as its dependencies allow.
std::vector<Decision> UnitPipeline::pump() {
  std::vector<Decision> out;
  if (finished_) return out;
  bool all_committed = true;
  for (UnitIndex i = 0; i < units_.size(); ++i) {
    auto& u = units_[i];
    all_committed = all_committed && u.phase == Phase::committed;
    if (u.phase == Phase::waiting && done(u.plan.generate_after)) {
      u.phase = u.plan.groups.empty() ? Phase::running : Phase::generating;
      u.groups_asked = u.plan.sequential_groups ? 1 : u.plan.groups.size();
      if (!u.plan.groups.empty()) out.push_back(Generate{i});
    }
    if (u.phase == Phase::running && u.groups_scored == u.plan.groups.size() && done(u.plan.train_after)) {
      if (u.plan.train) {
        u.phase = Phase::training;
        out.push_back(Train{i});
      } else {
        u.phase = Phase::committing;
        out.push_back(Commit{i});
      }
    }
  }
  if (all_committed) {
    finished_ = true;
    out.push_back(Finish{});
  }
  return out;
}

}  // namespace crucible::coordinator
