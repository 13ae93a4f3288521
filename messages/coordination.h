#pragma once
// Messages the coordinator exchanges with generators, the reward normalizer and telemetry.
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "candidate.h"
#include "evaluation.h"

namespace crucible::messages {

// Ask a rollout generator for n samples of one task; ids are first_id, first_id + 1, ...
struct GenerateRequest {
  std::string unit;
  uint64_t step = 0;
  std::string task;
  uint64_t group = 0;
  uint32_t n = 0;
  uint64_t first_id = 0;
  // A refinement turn (multi-turn): one new sample per previous candidate, improving on it in the light of its
  // verdict (n is then previous.size()).
  uint32_t turn = 0;
  std::vector<Candidate> previous;
  std::vector<eval::Verdict> verdicts;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GenerateRequest& x) {
  return f(caf::meta::type_name("crucible.GenerateRequest"), x.unit, x.step, x.task, x.group, x.n, x.first_id,
           x.turn, x.previous, x.verdicts);
}

struct Generated {
  std::string unit;
  std::vector<Candidate> candidates;
  double started_at = 0.0, finished_at = 0.0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Generated& x) {
  return f(caf::meta::type_name("crucible.Generated"), x.unit, x.candidates, x.started_at, x.finished_at);
}

// One group's verdicts (in sample order) to turn into rewards and advantages.
struct ScoreRequest {
  std::string unit;
  std::string task;
  uint64_t group = 0;
  std::vector<eval::Verdict> verdicts;  // turn by turn (multi-turn): the group's trajectories in the same order each turn
  uint32_t turns = 1;
  std::vector<std::string> sources;     // the candidates' sources (or replies), for a judge
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScoreRequest& x) {
  return f(caf::meta::type_name("crucible.ScoreRequest"), x.unit, x.task, x.group, x.verdicts, x.turns,
           x.sources);
}

struct ScoredGroup {
  std::string unit;
  uint64_t group = 0;
  std::vector<double> rewards;
  std::vector<double> advantages;  // empty when the group was dropped (constant rewards)
  // LLM-as-judge, when the group was judged: per sample its score (NaN where judging failed) and a note (the
  // judge's reason, or why it failed). Empty when not judged.
  std::vector<double> judge_scores;
  std::vector<std::string> judge_notes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScoredGroup& x) {
  return f(caf::meta::type_name("crucible.ScoredGroup"), x.unit, x.group, x.rewards, x.advantages,
           x.judge_scores, x.judge_notes);
}

}  // namespace crucible::messages

namespace crucible::messages {

// The coordinator's answer when a run ends: every unit committed, or why not.
struct RunOutcome {
  bool ok = false;
  std::string message;
  uint64_t units_committed = 0;
  uint64_t candidates = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunOutcome& x) {
  return f(caf::meta::type_name("crucible.RunOutcome"), x.ok, x.message, x.units_committed, x.candidates);
}

}  // namespace crucible::messages
