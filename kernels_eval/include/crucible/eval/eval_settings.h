#pragma once
// How candidates are evaluated: what a run asks of every evaluation, and what one evaluation gets.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "crucible/eval/compiler.h"
#include "crucible/eval/device.h"

namespace crucible::eval {

// How thoroughly a candidate is evaluated (the [eval] table's `mode`): fast, few trials and timed calls, for a
// run's many candidates; full, the trials and timed calls a reported number needs.
enum class EvalDepth { fast, full };

std::string_view eval_depth_name(EvalDepth depth);
// "fast" or "full"; throws std::invalid_argument otherwise.
EvalDepth parse_eval_depth(std::string_view text);

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

// Whether a KernelBench-format candidate's ModelNew may keep PyTorch operators (the [eval] table's `torch_ops`,
// `crucible eval --torch-ops`): "allow" (false), as KernelBench allows them, or "forbid" (true), as Crucible's own
// contract refuses them. Throws std::invalid_argument for any other name.
bool parse_forbid_torch_ops(std::string_view text);
std::string_view torch_ops_name(bool forbid_torch_ops);

// What a run asks of every evaluation of its candidates, as the experiment's [eval] table says and as evaluator nodes
// receive it: one type on every side (its CAF inspect lives in messages/, so kernels_eval stays free of CAF).
struct RunEvalSettings {
  Backend backend = Backend::cpu;  // what candidates are written for
  // triton: Python with Triton kernels (backend cuda); kernelbench: a KernelBench ModelNew file (docs/kernelbench.md)
  CandidateKind kind = CandidateKind::native;
  EvalDepth mode = EvalDepth::fast;
  Launches launches = Launches::eager;
  std::string sizes;               // the tasks' size set; empty: the backend's own
  int correctness_trials = -1, timing_trials = -1;  // -1: the mode's defaults (fast 2 / 5, full 5 / 50)
  double call_timeout_s = 10.0;
  double evaluation_budget_s = 0.0;  // 0: derived from the task (see EvalOptions)
  // kernelbench: PyTorch operators inside ModelNew are refused (`torch_ops = "forbid"`), as Crucible's own contract
  // refuses them; by default they are allowed, as KernelBench allows them.
  bool forbid_torch_ops = false;

  // The size set candidates are evaluated at.
  std::string size_set() const { return sizes.empty() ? std::string(backend_name(backend)) : sizes; }
  std::string_view source_extension() const { return eval::source_extension(backend, kind); }
  // What policies write candidates in: "cpu" (C++), "cuda" (CUDA C++) or "triton" (Python).
  std::string language() const { return std::string(candidate_language(backend, kind)); }
};

// Resource limits of the worker process a candidate runs in.
struct WorkerLimits {
  std::size_t memory_bytes = std::size_t{1} << 30;  // beyond the arena and the loaded libraries
  unsigned cpu_seconds = 120;
};

// What one evaluation gets: the run's settings, the device it runs on (which decides its compiler and its size set
// when `sizes` is empty), and what only a single evaluation sets.
struct EvalOptions : RunEvalSettings {
  Device device;  // the CPU unless set
  // Negative values take the mode's defaults: fast 1, full 3.
  int warmup_calls = -1;
  int input_sets = 3;           // timing rotates among these
  // `call_timeout_s` bounds one call (and loading). `evaluation_budget_s` bounds everything after compiling (load,
  // correctness, timing): past it the verdict is timeout / evaluation_budget. 0 derives it: min_evaluation_budget_s,
  // or 50 times the reference's own (warm) time for every call the evaluation may make, whichever is more.
  double min_evaluation_budget_s = 30.0;  // the least a derived budget allows
  WorkerLimits limits;
  CompileOptions compile;
  // Which windows of the input pools a trial sees. Unset: a fresh random nonce per evaluation (recorded
  // in the verdict), so no candidate can carry answers for known inputs.
  std::optional<uint64_t> seed;
  // Timed calls checked in full: at least one per input set; full mode all on the CPU, 4 on a GPU.
  int verified_timed_calls = -1;
};

// The options of one evaluation on `device` under the run's settings.
EvalOptions options_for(const RunEvalSettings& run, Device device);

}  // namespace crucible::eval
