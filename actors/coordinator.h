#pragma once
// Coordinator: drives one run of an experiment's mode. It asks generators for samples, queues them for the compiler
// pool and the evaluators (which pull), has groups scored, batches trained in order, and units committed to the run
// directory through telemetry. Units already committed (a resumed run) are skipped.
#include <caf/actor_system.hpp>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/interfaces.h"
#include "modes/unit_plan.h"
#include "monitor/live_status.h"
#include "policy/teacher_context.h"
#include "search/puct_archive.h"

namespace crucible::actors {

struct CoordinatorSetup {
  std::string mode;                      // for progress lines
  std::vector<modes::UnitPlan> units;    // modes::plan_units
  std::set<std::string> committed;       // unit names done before this process started
  eval::Device compile_device;           // the device whose compiler options candidates are built with
  bool compile_locally = true;           // false: no local evaluator; candidates go to the nodes as source
  // What candidates are written in: their sources' file extension, and the language a teacher's code block is in.
  eval::Backend backend = eval::Backend::cpu;
  eval::CandidateKind kind = eval::CandidateKind::native;
  // PUCT state reuse ([search] kind = "puct"): groups after a task's first improve on states chosen from its archive.
  std::optional<search::PuctOptions> puct;
  // PUCT after --resume: the committed candidates of earlier units, in commit order, rebuild each task's archive.
  struct ArchivedState {
    msg::Candidate candidate;
    eval::Verdict verdict;
    double reward = 0;
  };
  std::vector<ArchivedState> archived;
  // Self-distillation (`[policy.train] loss = "sdpo"`): each trained sample carries what its teacher reads.
  std::optional<policy::TeacherFeedback> teacher_feedback;
  // The monitor's view of the run, updated after every decision; none without [monitor].
  std::shared_ptr<monitor::LiveStatus> live;
  // Progress lines: which seed this is (for the ETA over all seeds), and whether to print how far the oldest
  // unit in flight has got (at most every progress_interval_s, from its verdicts).
  uint64_t seed = 0;
  std::size_t seed_index = 0, seeds = 1;
  bool progress_lines = false;
  double progress_interval_s = 5.0;
  generator_actor generator;
  normalizer_actor normalizer;
  optimizer_actor optimizer;
  telemetry_actor telemetry;
};

// Evaluators of other nodes pull under the session their node's gateway reported (NodeJoined); a session's work is
// re-queued when it is lost (NodeLost), and a result from an evaluator that no longer holds its candidate is
// discarded and logged, so every candidate gets exactly one recorded verdict.
//
// Spawns it; ask it `run_atom` to start, and it answers with the outcome when every unit is committed or the run
// cannot go on (a failed policy update or commit: committed units stay, --resume continues).
coordinator_actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup);

}  // namespace crucible::actors
