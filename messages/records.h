#pragma once
// What the coordinator tells telemetry, the run directory's only writer: each candidate's whole story, each unit's
// commit, and what happened to the cluster. Typed until telemetry writes them as JSON.
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "candidate.h"
#include "cluster.h"
#include "evaluation.h"
#include "training.h"

namespace crucible::messages {

// Everything that happened to one candidate, with wall-clock stage timestamps (seconds since the epoch).
struct CandidateRecord {
  std::string unit;
  Candidate candidate;
  double generate_start = 0, generate_end = 0;
  caf::optional<CompileDone> compile;   // none when it was compiled where it ran (a node), or never (parse_error)
  caf::optional<VerdictReport> verdict;
  double dispatched_at = 0, received_at = 0;  // coordinator's clock: handed to the evaluator, its verdict back
  std::size_t source_hash = 0;                // which node's cache may hold its build (cache-affine hand-out)
  double reward = 0;
  caf::optional<double> advantage;  // none when the group was dropped or the mode does not train
  double scored_at = 0;
  bool judged = false;              // LLM-as-judge: asked about this candidate
  caf::optional<double> judge_score;  // none when judging failed
  std::string judge_note;           // the judge's reason, or why judging failed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CandidateRecord& x) {
  return f(caf::meta::type_name("crucible.CandidateRecord"), x.unit, x.candidate, x.generate_start, x.generate_end,
           x.compile, x.verdict, x.dispatched_at, x.received_at, x.source_hash, x.reward, x.advantage, x.scored_at,
           x.judged, x.judge_score, x.judge_note);
}

// A unit as a whole, at its commit.
struct UnitRecord {
  std::string name;  // "step=3", "task=relu", "task=relu/step=4"
  uint64_t step = 0;
  std::string task;  // best_of_n and ttt: the unit's task
  bool train = false;
  double train_start = 0, train_end = 0;
  uint64_t policy_version_after = 0;  // the version this unit's update published (or the current one)
  std::vector<policy::UpdateMetrics> train_metrics;
  double committed_at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UnitRecord& x) {
  return f(caf::meta::type_name("crucible.UnitRecord"), x.name, x.step, x.task, x.train, x.train_start, x.train_end,
           x.policy_version_after, x.train_metrics, x.committed_at);
}

// Where the run stands, for the console's progress line.
struct Progress {
  std::string mode;
  uint64_t units_done = 0, units_total = 0;
  double elapsed_s = 0;
  uint64_t candidates_done = 0;
  uint64_t units_done_before = 0;  // committed before this process started (a resume): not part of its pace
  uint64_t seed = 0, seed_index = 0, seeds = 1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Progress& x) {
  return f(caf::meta::type_name("crucible.Progress"), x.mode, x.units_done, x.units_total, x.elapsed_s,
           x.candidates_done, x.units_done_before, x.seed, x.seed_index, x.seeds);
}

// A unit is done: telemetry writes its candidates' records (sent before it) and metrics, stores the policy after it,
// then makes the commit durable before it replies.
struct CommitUnit {
  UnitRecord unit;
  std::string source_extension;  // "cpp" or "cu": how the candidates' sources are stored
  std::string policy_snapshot;   // the policy's own serialized state, opaque here
  Progress progress;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CommitUnit& x) {
  return f(caf::meta::type_name("crucible.CommitUnit"), x.unit, x.source_extension, x.policy_snapshot, x.progress);
}

// Something that happened to the run's cluster: a node joined, was lost (and what was re-queued), or sent a result
// for a candidate it no longer held.
enum class ClusterEventKind : uint8_t { joined, lost, late_result };

struct ClusterEvent {
  ClusterEventKind kind = ClusterEventKind::joined;
  double at = 0;
  std::string node;
  uint64_t session = 0;
  std::vector<NodeDevice> devices;  // joined
  std::string reason;               // lost
  std::vector<uint64_t> requeued;   // lost
  uint64_t candidate_id = 0;        // late_result
  eval::Status status = eval::Status::runtime_error;  // late_result: what the discarded verdict said
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ClusterEvent& x) {
  return f(caf::meta::type_name("crucible.ClusterEvent"), x.kind, x.at, x.node, x.session, x.devices, x.reason,
           x.requeued, x.candidate_id, x.status);
}

}  // namespace crucible::messages
