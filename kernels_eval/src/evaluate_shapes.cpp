// A task scored over several shapes: each shape is evaluated as a task of its own (its own inputs, pools and
// reference timing); the first shape that is not correct decides the verdict, which names it. A correct candidate's
// times are the geometric means of its shapes' medians.
#include <algorithm>
#include <cmath>

#include "evaluator_impl.h"

namespace crucible::eval {
namespace {

void add_stages(StageTimes& a, const StageTimes& b) {
  a.compile_s += b.compile_s, a.gate_s += b.gate_s, a.load_s += b.load_s, a.correctness_s += b.correctness_s;
  a.timing_s += b.timing_s, a.total_s += b.total_s, a.kernel_s += b.kernel_s, a.overhead_s += b.overhead_s;
}

// The combined verdict starts as the first shape's, without what belongs to that shape alone.
Verdict combined_from_first(const Verdict& first, const std::optional<TritonBuild>& prebuilt) {
  Verdict combined = first;
  combined.trials.clear();
  combined.stages = {};
  if (prebuilt) combined.stages.compile_s = combined.stages.total_s = prebuilt->seconds;
  combined.candidate_event_median_us.reset();
  combined.gflops.reset();
  combined.gbps.reset();
  combined.speedup_spread.reset();
  combined.reasons.clear();
  return combined;
}

// A correct shape's part of the combined verdict: its reasons (named), its medians, and the worst of its spreads.
void add_shape(Verdict& combined, const Verdict& v, const std::string& shape) {
  for (const auto& r : v.reasons) combined.reasons.push_back({r.code, "shape " + shape + ": " + r.detail});
  combined.shapes.push_back({shape, v.candidate_time->median_us, v.reference_time->median_us, v.candidate_time->cv,
                             v.reference_time->cv});
  combined.candidate_time->cv = std::max(combined.candidate_time->cv, v.candidate_time->cv);
  combined.reference_time->cv = std::max(combined.reference_time->cv, v.reference_time->cv);
  combined.candidate_time->retaken = combined.candidate_time->retaken || v.candidate_time->retaken;
  combined.reference_time->retaken = combined.reference_time->retaken || v.reference_time->retaken;
  if (v.launches == Launches::eager) combined.launches = Launches::eager;  // one shape timed as launched
  if (v.kernel_coverage && combined.kernel_coverage)
    combined.kernel_coverage = std::min(*combined.kernel_coverage, *v.kernel_coverage);
}

// Each shape's median enters once: min and max are over the shapes, mean and median their geometric mean.
void over_shapes(Verdict& combined) {
  const double n = static_cast<double>(combined.shapes.size());
  auto summarize = [&](TimingStats& t, double ShapeTime::*field) {
    double log_sum = 0.0;
    for (const auto& s : combined.shapes) log_sum += std::log(s.*field);
    t.median_us = t.mean_us = std::exp(log_sum / n);
    t.min_us = t.max_us = combined.shapes.front().*field;
    for (const auto& s : combined.shapes) {
      t.min_us = std::min(t.min_us, s.*field);
      t.max_us = std::max(t.max_us, s.*field);
    }
  };
  summarize(*combined.candidate_time, &ShapeTime::candidate_us);
  summarize(*combined.reference_time, &ShapeTime::reference_us);
  combined.speedup = combined.reference_time->median_us / combined.candidate_time->median_us;
}

}  // namespace

Verdict Evaluator::Impl::evaluate_cases(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                        const std::string& size_set, const std::string& source,
                                        const EvalOptions& options) {
  EvalOptions o = options;
  o.sizes = size_set;
  const std::optional<TritonBuild> prebuilt = prebuild_triton(task, cases, size_set, source, o);
  if (prebuilt && prebuilt->outcome != TritonBuild::Outcome::ok) {
    // A refusal or a failed compile holds for the whole candidate: reported now, not gated and compiled again by
    // each shape's evaluation after the shapes before the failing one were evaluated in full.
    Verdict v = verdict_header(task, options, config.threads);
    accept_triton_build(*prebuilt, v);
    v.stages.total_s = prebuilt->seconds;
    clean_details(v);
    return v;
  }
  Verdict combined;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Verdict v = evaluate(task.at_case(cases[i], size_set), source, o);
    if (i == 0) {
      if (prebuilt) {  // the shapes' compile step, which each shape's evaluation then found cached
        v.compile.cached = prebuilt->cached;
        v.compile.seconds += prebuilt->seconds;
      }
      combined = combined_from_first(v, prebuilt);
    }
    add_stages(combined.stages, v.stages);
    for (auto t : v.trials) combined.trials.push_back(t);
    if (v.status != Status::correct || !v.candidate_time || !v.reference_time) {
      v.task = task.name;
      for (auto& r : v.reasons) r.detail = "shape " + cases[i].name + ": " + r.detail;
      v.stages = combined.stages;
      return v;
    }
    add_shape(combined, v, cases[i].name);
  }
  combined.task = task.name;
  over_shapes(combined);
  return combined;
}

}  // namespace crucible::eval
