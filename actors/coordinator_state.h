#pragma once
// The coordinator actor's state and the steps its two halves share: coordinator.cpp answers the messages (pulls,
// results, nodes), coordinator_units.cpp carries out the pipeline's decisions (generate, score, train, commit). What
// decides lives in runtime/coordinator; this holds what only an actor can: handles, promises, and the candidates'
// traces that become their records.
#include <caf/all.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator.h"
#include "coordinator/puct_states.h"
#include "coordinator/reference_timings.h"
#include "coordinator/run_view.h"
#include "coordinator/unit_pipeline.h"
#include "coordinator/work_queue.h"
#include "logging/log.h"

namespace crucible::actors::coordination {

namespace core = crucible::coordinator;

// What a PUCT state was: the sample a later group improves on, and what its evaluator said.
struct PuctState {
  msg::Candidate candidate;
  eval::Verdict verdict;
};

// Who pulls work, by the core's numbering: evaluators (and the sessions they pull under) and compile workers.
struct Pullers {
  std::map<caf::actor_addr, core::EvaluatorId> ids;
  core::EvaluatorId next_id = 1;
  std::map<core::EvaluatorId, caf::typed_response_promise<msg::EvalRequest>> eval_waiters;
  std::map<core::EvaluatorId, caf::typed_response_promise<msg::CompileRequest>> compile_waiters;
  std::set<core::EvaluatorId> monitored;
  std::map<core::SessionId, caf::node_id> session_nodes;
};

struct CoordinatorState {
  CoordinatorSetup setup;
  std::unique_ptr<core::UnitPipeline> pipeline;
  core::WorkQueue work;
  core::CompileQueue compiles;
  core::ReferenceTimingTable reference_timings;
  std::optional<core::PuctStates<PuctState>> puct;
  Pullers pullers;
  std::vector<msg::UnitRecord> units;  // by unit index, with the policy snapshot each one's update published
  std::vector<std::string> snapshots;
  std::map<uint64_t, msg::CandidateRecord> candidates;  // until their unit is committed
  caf::typed_response_promise<msg::RunOutcome> outcome;
  bool started = false, finished = false;
  double start_time = 0;
  core::ProgressClock progress{false, 0};
  std::size_t candidates_done = 0;
  uint64_t policy_version = 0;
  log::Logger log{"coordinator"};
  static inline const char* name = "coordinator";
};

using Self = coordinator_actor::stateful_pointer<CoordinatorState>;

// coordinator_units.cpp: the pipeline's decisions carried out, and what feeds it.
void decide(Self self, const std::vector<core::Decision>& decisions);
void record_verdict(Self self, msg::VerdictReport verdict);
void on_generated(Self self, std::size_t unit, uint64_t group, msg::Generated& generated);
void finish(Self self, bool ok, const std::string& message);
// The queues' hand-outs delivered to the pullers that wait for them, refusals to the others.
void deliver(Self self, const core::Decisions& d);
void deliver_compiles(Self self, const core::Decisions& d);
core::Offered offered(const msg::CandidateRecord& trace);
// An actor's failure as a person reads it: the text it carried, else CAF's rendering.
std::string reason_of(Self self, const caf::error& e);
// PUCT: what the archive needs of an evaluated candidate.
core::EvaluatedState evaluated(const msg::Candidate& c, double reward);

}  // namespace crucible::actors::coordination
