#pragma once
// Messages between the coordinator and the evaluators: a request to evaluate a candidate, and the verdict back. The
// verdict travels as kernels_eval's own type, field by field (its inspect functions are here, in the verdict's
// namespace, so kernels_eval needs no CAF): no text of a node's choosing is parsed as JSON anywhere.
#include <utility>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "candidate.h"
#include "crucible/eval/shared_timing.h"
#include "crucible/eval/verdict.h"
#include "eval_values.h"

namespace crucible::eval {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Reason& x) {
  return f(caf::meta::type_name("crucible.Reason"), x.code, x.detail);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CompileReport& x) {
  return f(caf::meta::type_name("crucible.CompileReport"), x.cached, x.seconds, x.hash, x.log_excerpt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrialReport& x) {
  return f(caf::meta::type_name("crucible.TrialReport"), x.trial, x.passed, x.max_abs_error, x.max_rel_error,
           x.mismatched, x.elements);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TimingStats& x) {
  return f(caf::meta::type_name("crucible.TimingStats"), x.trials, x.median_us, x.mean_us, x.min_us, x.max_us, x.cv,
           x.retaken);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StageTimes& x) {
  return f(caf::meta::type_name("crucible.StageTimes"), x.compile_s, x.gate_s, x.load_s, x.correctness_s, x.timing_s,
           x.total_s, x.kernel_s, x.overhead_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShapeTime& x) {
  return f(caf::meta::type_name("crucible.ShapeTime"), x.name, x.candidate_us, x.reference_us, x.cv,
           x.reference_cv);
}

// CAF 0.17 inspects its own optional, not std::optional: the verdict's optionals cross as caf::optional copies.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Verdict& x) {
  const auto out = [](const auto& o) {
    using T = typename std::decay_t<decltype(o)>::value_type;
    return o ? caf::optional<T>(*o) : caf::optional<T>();
  };
  auto candidate_time = out(x.candidate_time), reference_time = out(x.reference_time);
  auto event_median = out(x.candidate_event_median_us), coverage = out(x.kernel_coverage);
  auto speedup = out(x.speedup), gflops = out(x.gflops), gbps = out(x.gbps), spread = out(x.speedup_spread);
  auto device = out(x.device);
  auto mode = out(x.mode);
  auto in = [&] {
    const auto back = [](auto& o, const auto& c) {
      if (c) o = *c;
      else o.reset();
    };
    back(x.candidate_time, candidate_time), back(x.reference_time, reference_time);
    back(x.candidate_event_median_us, event_median), back(x.kernel_coverage, coverage);
    back(x.speedup, speedup), back(x.gflops, gflops), back(x.gbps, gbps), back(x.speedup_spread, spread);
    back(x.device, device), back(x.mode, mode);
    return caf::error{};
  };
  return f(caf::meta::type_name("crucible.Verdict"), x.status, x.task, device, mode, x.launches, x.reasons, x.compile,
           x.trials, candidate_time, reference_time, event_median, coverage, speedup, spread, gflops, gbps, x.shapes,
           x.threads,
           x.seed, x.stages, caf::meta::load_callback(in));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SharedTiming& x) {
  return f(caf::meta::type_name("crucible.SharedTiming"), x.task, x.key, x.reference, x.refresh);
}

}  // namespace crucible::eval

namespace crucible::messages {

// The evaluator evaluates it on its own device under the run's settings, which it was set up with. With it come the
// reference timings other evaluators measured for its task (shared_timing.h), which an evaluator of the same GPU
// model and settings uses instead of timing the reference itself.
struct EvalRequest {
  Candidate candidate;
  std::vector<eval::SharedTiming> reference_timings;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EvalRequest& x) {
  return f(caf::meta::type_name("crucible.EvalRequest"), x.candidate, x.reference_timings);
}

// One candidate's verdict, where and when it was reached.
struct VerdictReport {
  uint64_t candidate_id = 0;
  eval::Verdict verdict;                       // verdict.device: where it was evaluated (none: never evaluated)
  std::string node;                            // its node ("local": the coordinator's); set by the coordinator
  double started_at = 0.0, finished_at = 0.0;  // wall clock of the evaluator's node, seconds since the epoch
  // The GPU reference timings its evaluator knows for the task, for the coordinator to hand on; not recorded.
  std::vector<eval::SharedTiming> reference_timings;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VerdictReport& x) {
  return f(caf::meta::type_name("crucible.VerdictReport"), x.candidate_id, x.verdict, x.node, x.started_at,
           x.finished_at, x.reference_timings);
}

// A verdict as a report: its reason details (which may quote a candidate or an exception) made valid UTF-8.
VerdictReport report(uint64_t candidate_id, eval::Verdict verdict);

}  // namespace crucible::messages
