#pragma once
// PUCT's archive after --resume: a seed's committed candidate records read back as the states the coordinator
// archived before the restart (candidate, the verdict parts a refinement prompt shows, reward), in commit order.
#include <filesystem>
#include <vector>

#include "actors/coordinator.h"

namespace crucible::node {

// Reads <seed_dir>/candidates.jsonl, which a resumed RunDirectory has cut to its committed units. Records of
// samples the policy never gave (policy_error) are left out, as the coordinator leaves them out.
std::vector<actors::CoordinatorSetup::ArchivedState> archived_states(const std::filesystem::path& seed_dir);

}  // namespace crucible::node
