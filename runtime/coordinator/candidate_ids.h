#pragma once
// How a run numbers its candidates, and the bounds that keep the numbers apart: the one place both the experiment's
// checks and the coordinator read. A group owns a block of kIdsPerGroup ids: its first turn is numbered from the
// block's start by sample index; each refinement turn takes the next kIdsPerTurn ids, so a multi-turn group keeps
// under kIdsPerTurn samples and turns under kIdsPerGroup / kIdsPerTurn.
#include <cstdint>

namespace crucible::coordinator {

constexpr uint64_t kIdsPerGroup = 100'000;
constexpr uint64_t kIdsPerTurn = 1'000;
// The most samples of one group's first turn, and of a group refined over turns.
constexpr int kMaxGroupSamples = static_cast<int>(kIdsPerGroup) - 1;
constexpr int kMaxMultiTurnSamples = static_cast<int>(kIdsPerTurn) - 1;
// Turns of a refined group: turn t starts at t * kIdsPerTurn inside its group's block.
constexpr uint32_t kMaxTurns = static_cast<uint32_t>(kIdsPerGroup / kIdsPerTurn) - 1;

// The id of a group's first sample of a turn (turn 0: the group's first samples).
constexpr uint64_t first_candidate_id(uint64_t group, uint32_t turn = 0) {
  return group * kIdsPerGroup + uint64_t{turn} * kIdsPerTurn;
}

// Whether a group of `samples` refined over `turns` turns is numbered without two candidates sharing an id.
constexpr bool ids_fit(int samples, uint32_t turns) {
  if (samples < 1 || turns < 1) return false;
  return turns == 1 ? samples <= kMaxGroupSamples : samples <= kMaxMultiTurnSamples && turns <= kMaxTurns;
}

}  // namespace crucible::coordinator
