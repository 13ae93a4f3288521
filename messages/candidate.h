#pragma once
// Messages about one candidate kernel on its way from a policy to an evaluator.
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "eval_values.h"
#include "policy/sample.h"

namespace crucible::policy {

// The sample's own serialization, here beside the candidate it becomes (policy/ needs no CAF): the optimizer gets
// samples back as they were generated.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Sample& x) {
  return f(caf::meta::type_name("crucible.Sample"), x.task, x.output, x.source, x.tokens, x.logprobs, x.parse_error,
           x.policy_version, x.prompt, x.policy_error, x.teacher_context);
}

}  // namespace crucible::policy

namespace crucible::messages {

// A policy's sample, tagged with where it belongs in a batch: the one value that goes from the generator through
// evaluation and scoring to training (which reads it as the policy::Sample it is).
struct Candidate : policy::Sample {
  uint64_t id = 0;
  uint64_t step = 0;          // the mode's unit of work: GRPO step, best-of-N task, TTT (task, step)
  uint64_t group = 0;         // the task's group within a step (GRPO) or the sweep (best-of-N)
  uint32_t index = 0;         // position within the group
  uint64_t trajectory = 0;    // multi-turn: the id of the trajectory's first turn (its own id at turn 0)
  uint32_t turn = 0;          // multi-turn: 0 for the first sample, t for the t-th refinement
  int64_t parent = -1;        // the candidate this one refines (a previous turn, or a state PUCT chose); -1: none
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Candidate& x) {
  return f(caf::meta::type_name("crucible.Candidate"), static_cast<policy::Sample&>(x), x.id, x.step, x.group,
           x.index, x.trajectory, x.turn, x.parent);
}

struct CompileRequest {
  uint64_t candidate_id = 0;
  std::string source;
  eval::Device device;  // the device the candidate will run on: it decides the compiler and architecture
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CompileRequest& x) {
  return f(caf::meta::type_name("crucible.CompileRequest"), x.candidate_id, x.source, x.device);
}

struct CompileDone {
  uint64_t candidate_id = 0;
  bool ok = false;
  bool cached = false;
  double seconds = 0.0;
  std::string hash;  // content hash: the shared cache's key
  std::string log;
  double started_at = 0.0, finished_at = 0.0;  // wall clock, seconds since the epoch
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CompileDone& x) {
  return f(caf::meta::type_name("crucible.CompileDone"), x.candidate_id, x.ok, x.cached, x.seconds, x.hash, x.log,
           x.started_at, x.finished_at);
}

}  // namespace crucible::messages
