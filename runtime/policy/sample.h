#pragma once
// A policy's sample: what it wrote for a task and what training needs of it. The same value travels as a candidate
// (messages::Candidate adds where it belongs in a batch) and comes back to the optimizer for training; its
// serialization lives in messages/, so this header needs no CAF.
#include <cstdint>
#include <string>
#include <vector>

namespace crucible::policy {

struct Sample {
  std::string task;
  std::string output;             // the policy's raw output (a model's text; the search policy's chosen knobs)
  std::string source;             // the candidate source assembled from it
  std::vector<int32_t> tokens;    // what was sampled: token ids, or one choice index per knob
  std::vector<float> logprobs;    // per token: the policy's own log-probability (a model's, before temperature)
  std::string parse_error;        // why no source could be assembled (recorded as a parse_error verdict); empty: ok
  uint64_t policy_version = 0;
  // A refinement turn's whole prompt as the model saw it (earlier code and feedback included), which training must
  // condition on; empty: the task's own prompt.
  std::string prompt;
  // The policy could not produce a sample at all (a served model's server down or refusing): parse_error says why,
  // and the record says policy_error instead of no_source.
  bool policy_error = false;
  // Self-distillation (SDPO): what this sample's teacher reads at the end of the prompt's user turn, filled in
  // before an update (policy/teacher_context.h); empty: no teacher.
  std::string teacher_context;
};

}  // namespace crucible::policy
