#pragma once
// The result of evaluating one candidate: a status, the reasons behind it and the measurements.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "crucible/eval/device.h"
#include "crucible/eval/eval_settings.h"
#include "crucible/eval/reason_code.h"

namespace crucible::eval {

// parse_error: a policy's reply held no usable source (a language model's cut-off or missing code block); it is
// recorded without compiling anything.
enum class Status { correct, incorrect, compile_error, rejected, runtime_error, timeout, parse_error };

std::string_view status_name(Status s);
Status parse_status(std::string_view name);  // the inverse of status_name; throws std::invalid_argument

// A machine-readable code (input_mutated, forbidden_import, ...) and a human-readable detail.
struct Reason {
  ReasonCode code = ReasonCode::evaluator_error;
  std::string detail;
};
// A reason as read from text (a record, the Triton gate's report): a name this build does not know becomes
// `unrecognized`, its detail led by the name, so nothing read is lost.
Reason reason_from_text(std::string_view code, std::string detail);

struct CompileReport {
  bool cached = false;
  double seconds = 0.0;
  std::string hash;
  std::string log_excerpt;
};

struct TrialReport {
  int trial = 0;
  bool passed = false;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  int64_t mismatched = 0;  // elements outside tolerance
  int64_t elements = 0;
};

struct TimingStats {
  int trials = 0;
  double median_us = 0.0;
  double mean_us = 0.0;
  double min_us = 0.0;
  double max_us = 0.0;
  double cv = 0.0;  // standard deviation / mean
  // GPU: the first set of samples spread past the extension bound (timing_rules.h) and more were taken; these stats
  // are over all of them.
  bool retaken = false;
};

TimingStats summarize_times(std::vector<double> samples_us);

// Wall time of each stage and how much of it was not spent inside the kernels themselves.
struct StageTimes {
  double compile_s = 0.0;
  double gate_s = 0.0;
  double load_s = 0.0;
  double correctness_s = 0.0;
  double timing_s = 0.0;
  double total_s = 0.0;
  double kernel_s = 0.0;    // time inside candidate and reference calls
  double overhead_s = 0.0;  // total - compile - kernel
};

// A task scored over several shapes: one shape's medians (the verdict's own times are their geometric means).
struct ShapeTime {
  std::string name;
  double candidate_us = 0.0;
  double reference_us = 0.0;
  double cv = 0.0;  // the candidate's
  double reference_cv = 0.0;
};

struct Verdict {
  Status status = Status::runtime_error;
  std::string task;
  // Where and how thoroughly it was evaluated; unset for a verdict reached without evaluating (a reply with no
  // source, an evaluator's failure before its device was known).
  std::optional<Device> device;
  std::optional<EvalDepth> mode;
  Launches launches = Launches::eager;  // how GPU calls were timed (eval_settings.h)
  std::vector<Reason> reasons;
  CompileReport compile;
  std::vector<TrialReport> trials;
  std::optional<TimingStats> candidate_time;
  std::optional<TimingStats> reference_time;
  // GPU: the median of the candidate's calls by events on its own stream, as its worker reported them. Shown for
  // insight only; candidate_time (never faster than the evaluator's own clock allows) is what counts.
  std::optional<double> candidate_event_median_us;
  // GPU: the share of the correctness calls' GPU time spent in kernels the candidate compiled itself (CUPTI), against
  // library kernels, copies and memsets. Reported by the worker: a hint for rewards against lazy optimisation.
  std::optional<double> kernel_coverage;
  std::optional<double> speedup;
  // CPU: candidate and reference are timed in pairs; the interquartile range of the pairs' ratios over their
  // median. Above the evaluator's bound after re-measuring, the verdict carries the reason `timing_noisy`.
  std::optional<double> speedup_spread;
  std::optional<double> gflops;  // candidate, when the task declares flops
  std::optional<double> gbps;    // candidate: the least traffic (inputs read, outputs written once) per second
  std::vector<ShapeTime> shapes;  // multi-shape tasks only, in the task's order
  int threads = 1;
  uint64_t seed = 0;  // reproduces the inputs with EvalOptions::seed
  StageTimes stages;

  bool has_reason(ReasonCode code) const;
};

// A verdict the runtime reaches without evaluating: a reply with no source (parse_error), or a failure around the
// candidate rather than in it (runtime_error with reason evaluator_error). One reason, no measurements.
Verdict verdict_without_evaluation(std::string task, std::optional<Device> device, Status status, ReasonCode code,
                                   std::string detail);

}  // namespace crucible::eval
