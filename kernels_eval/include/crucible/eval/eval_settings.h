#pragma once
// How a run judges its candidates, as an experiment's [eval] table says and as evaluator nodes receive it: one
// type on every side (its CAF inspect lives in messages/, so kernels_eval stays free of CAF).
#include <string>
#include <string_view>

#include "crucible/eval/device.h"

namespace crucible::eval {

enum class Mode { fast, full };

std::string_view mode_name(Mode mode);
// "fast" or "full"; throws std::invalid_argument otherwise.
Mode parse_mode(std::string_view text);

// How a Triton candidate's GPU calls are timed (docs/cuda.md). eager: from the doorbell, the candidate's launching
// included, as KernelBench and GPU MODE time it. queued: the call's GPU work waits until the candidate has returned
// from launching and is timed from its release, so the host's speed (Python launches) does not move the time; the
// launching itself is timed too and bounds the call from below. References are timed the same way. CUDA C++
// candidates are always timed eagerly: they share their worker's memory, so its word that they returned is not
// evidence.
enum class Launches { eager, queued };

std::string_view launches_name(Launches launches);
// "eager" or "queued"; throws std::invalid_argument otherwise.
Launches parse_launches(std::string_view text);

struct EvalSettings {
  Backend backend = Backend::cpu;  // what candidates are written for
  CandidateKind kind = CandidateKind::native;  // triton: Python with Triton kernels (backend cuda)
  Mode mode = Mode::fast;
  Launches launches = Launches::eager;
  std::string sizes;               // the tasks' size set; empty: the backend's own
  int correctness_trials = -1, timing_trials = -1;  // -1: the mode's defaults
  double call_timeout_s = 10.0;
  double evaluation_budget_s = 0.0;  // 0: derived from the task (see EvalOptions)

  // The size set candidates are judged at.
  std::string size_set() const { return sizes.empty() ? std::string(backend_name(backend)) : sizes; }
  std::string_view source_extension() const { return eval::source_extension(backend, kind); }
  // What policies write candidates in: "cpu" (C++), "cuda" (CUDA C++) or "triton" (Python).
  std::string language() const { return kind == CandidateKind::triton ? "triton" : std::string(backend_name(backend)); }
};

}  // namespace crucible::eval
