// Stage 4: correctness. Fresh inputs per trial in the same buffers (an output cache keyed on pointers
// replays a stale answer), outputs poisoned before every call, inputs checked unchanged after it,
// and the first trial called twice on the same inputs (state left between calls shows as disagreement).
#include <algorithm>
#include <cstdio>
#include <string>

#include "custom_work_rule.h"
#include "stages.h"

namespace crucible::eval {
namespace {
double output_bytes(const ArenaLayout& layout) {
  double bytes = 0.0;
  for (const auto& slot : layout.outputs[0]) bytes += static_cast<double>(slot.bytes);
  return bytes;
}

std::string percent(double share) {
  char text[32];
  std::snprintf(text, sizeof text, share < 0.1 ? "%.2f%%" : "%.0f%%", 100 * share);
  return text;
}

std::string microseconds(double us) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f us", us);
  return text;
}


void check_task_outputs(const StageContext& ctx, const std::vector<torch::Tensor>& refs) {
  const auto& task = ctx.task;
  const std::string where = "task '" + task.name + "' (" + task.source_path + ")";
  if (refs.size() != ctx.output_shapes.size())
    throw TaskError(where + ": the reference returns " + std::to_string(refs.size()) + " outputs but the task declares " +
                    std::to_string(ctx.output_shapes.size()));
  for (std::size_t i = 0; i < refs.size(); ++i)
    if (refs[i].sizes().vec() != ctx.output_shapes[i].shape ||
        refs[i].scalar_type() != to_torch(ctx.output_shapes[i].dtype))
      throw TaskError(where + ": the reference's output " + task.outputs[i].name + " is " + tensor_text(refs[i]) + ", but the task declares " + shape_text(ctx.output_shapes[i].shape) + " " +
                      std::string(dtype_name(ctx.output_shapes[i].dtype)) + " (its [[outputs]] shape and dtype)");
}

// The constant-output hack: if zeros would pass, the check proves nothing.
void check_not_degenerate(const StageContext& ctx, const std::vector<torch::Tensor>& refs) {
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (!refs[i].is_floating_point()) continue;
    auto tol = ctx.tolerance(i);
    if (max_abs(refs[i]) * (1.0 - tol.rtol) <= tol.atol)
      throw TaskError("task '" + ctx.task.name + "' is degenerate: an all-zero " + ctx.task.outputs[i].name +
                      " passes its tolerance; draw inputs that move the output away from zero");
  }
}

struct TrialOutcome {
  TrialReport report;
  bool mutated = false, disagree = false, out_of_bounds = false;
  int64_t unwritten = 0, nan_mismatched = 0;
};

// Runs one trial's calls on set 0; false when a call itself failed (verdict filled).
bool run_trial(StageContext& ctx, Verdict& v, int trial, const std::vector<torch::Tensor>& inputs,
               const std::vector<torch::Tensor>& refs, TrialOutcome& t, StepTrace& steps) {
  const ArenaRef arena = ctx.arena();
  const auto& in_slots = ctx.layout.inputs[0];
  const auto& out_slots = ctx.layout.outputs[0];
  std::vector<WrittenInput> written;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    written.push_back(write_input(arena, in_slots[i], inputs[i], ctx.input_key));
  steps.mark("write_inputs");
  t.report.trial = trial;
  const int runs = trial == 0 ? 2 : 1;
  bool run_passed[2] = {true, true};
  std::vector<torch::Tensor> first_run;  // kept, when the first call failed, to compare the two calls
  for (int run = 0; run < runs; ++run) {
    for (const auto& slot : out_slots) poison(arena, slot, run);
    steps.mark("poison");
    if (!ctx.call(0, v)) return false;
    steps.mark("call");
    for (const auto& slot : out_slots)
      if (!guard_intact(arena, slot)) {
        t.out_of_bounds = true;
        fill_guard(arena, slot);
      }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (input_intact(arena, in_slots[i], inputs[i], written[i], ctx.input_key)) continue;
      t.mutated = true;  // put the inputs back so the second call sees what the reference saw
      written[i] = write_input(arena, in_slots[i], inputs[i], ctx.input_key);
    }
    steps.mark("input_check");
    int64_t unwritten = 0;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      Comparison c = compare(view_tensor(arena, out_slots[i]), refs[i], ctx.tolerance(i));
      if (!c.passed) unwritten += count_poisoned(arena, out_slots[i], run);  // poison never passes
      run_passed[run] &= c.passed;
      t.report.max_abs_error = std::max(t.report.max_abs_error, c.max_abs);
      t.report.max_rel_error = std::max(t.report.max_rel_error, c.max_rel);
      t.report.mismatched = std::max(t.report.mismatched, c.mismatched);
      t.report.elements = c.elements;
      t.nan_mismatched = std::max(t.nan_mismatched, c.nan_mismatched);
    }
    t.unwritten = std::max(t.unwritten, unwritten);
    steps.mark("compare");
    if (run == 0 && !run_passed[0])
      for (const auto& slot : out_slots) first_run.push_back(view_tensor(arena, slot).clone());
  }
  t.disagree = runs == 2 && run_passed[0] != run_passed[1];
  if (runs == 2 && !run_passed[0] && !run_passed[1])
    for (std::size_t i = 0; i < refs.size(); ++i)
      t.disagree |= !compare(first_run[i], view_tensor(arena, out_slots[i]), ctx.tolerance(i)).passed;
  t.report.passed = run_passed[0] && run_passed[1] && !t.mutated && !t.out_of_bounds;
  return true;
}

void explain(const TrialOutcome& t, Verdict& v) {
  std::string where = "trial " + std::to_string(t.report.trial) + ": ";
  if (t.mutated) v.reasons.push_back({ReasonCode::input_mutated, where + "an input was modified by the candidate"});
  if (t.out_of_bounds)
    v.reasons.push_back({ReasonCode::out_of_bounds_write, where + "the candidate wrote past the end of an output"});
  if (t.unwritten > 0)
    v.reasons.push_back({ReasonCode::output_unwritten, where + std::to_string(t.unwritten) + " output elements never written"});
  if (t.disagree)
    v.reasons.push_back({ReasonCode::nondeterministic, where + "the same inputs gave different outputs on two calls "
                                                     "(stale memory or state kept between calls)"});
  if (t.unwritten == 0 && t.nan_mismatched > 0)
    v.reasons.push_back({ReasonCode::nan, where + std::to_string(t.nan_mismatched) + " NaN outputs"});
  if (!t.mutated && !t.out_of_bounds && t.unwritten == 0 && !t.disagree && t.nan_mismatched == 0)
    v.reasons.push_back({ReasonCode::mismatch, where + std::to_string(t.report.mismatched) + " of " +
                                         std::to_string(t.report.elements) + " elements outside tolerance"});
}

// Outputs that concentrate (a loss averaged over many elements) can, by chance, agree within tolerance over a few
// trials; the task is refused only when the first answer also passes a run of further draws, which a task whose
// inputs move its outputs does not do.
constexpr int kConfirmDraws = 8;

bool fixed_answer_passes_more_draws(StageContext& ctx, const std::vector<torch::Tensor>& first_refs) {
  for (int extra = 0; extra < kConfirmDraws; ++extra) {
    auto refs = ctx.run_reference(ctx.draw(static_cast<uint64_t>(ctx.trials + extra)));
    for (std::size_t i = 0; i < refs.size(); ++i)
      if (!compare(first_refs[i], refs[i], ctx.tolerance(i)).passed) return false;
  }
  return true;
}

}  // namespace

bool check_correctness(StageContext& ctx, Verdict& v) {
  struct StopProfiling {
    StageContext& ctx;
    ~StopProfiling() { ctx.profiling = false; }
  } stop{ctx};
  // The task's own checks cost a pass over its outputs per trial: made until the task has passed them once.
  const bool check_task = !ctx.task_sound && !ctx.task.constant_output;
  std::vector<torch::Tensor> first_refs;
  bool fixed_answer_passes = check_task && ctx.trials >= 2;
  StepTrace steps("correctness", ctx.gpu != nullptr);
  for (int trial = 0; trial < ctx.trials; ++trial) {
    ctx.profiling = trial == 0;  // coverage from the first trial's calls: profiling costs ~1-2 ms a call
    auto inputs = ctx.draw(static_cast<uint64_t>(trial));
    steps.mark("draw");
    auto refs = ctx.run_reference(inputs);
    steps.mark("reference");
    check_task_outputs(ctx, refs);
    if (trial == 0 && check_task) {
      check_not_degenerate(ctx, refs);  // later trials are covered by the fixed-answer check
      if (fixed_answer_passes)
        for (auto& r : refs) first_refs.push_back(r.clone());
    } else if (fixed_answer_passes) {
      for (std::size_t i = 0; i < refs.size() && fixed_answer_passes; ++i)
        fixed_answer_passes = compare(first_refs[i], refs[i], ctx.tolerance(i)).passed;
      if (!fixed_answer_passes) first_refs.clear();
    }
    steps.mark("task_checks");
    TrialOutcome t;
    if (!run_trial(ctx, v, trial, inputs, refs, t, steps)) return false;
    v.trials.push_back(t.report);
    if (!t.report.passed) {  // one failing trial decides the verdict
      v.status = Status::incorrect;
      explain(t, v);
      return false;
    }
  }
  if (fixed_answer_passes && fixed_answer_passes_more_draws(ctx, first_refs))
    throw TaskError("task '" + ctx.task.name + "' is degenerate: the first trial's answer passes every other "
                    "trial; vary the inputs (e.g. init.scale) so a fixed output cannot pass");
  if (check_task && ctx.trials >= 2) ctx.task_sound = true;
  v.status = Status::correct;
  if (ctx.gpu && !ctx.gpu->kernel_coverage.empty()) {
    double sum = 0.0;
    for (double share : ctx.gpu->kernel_coverage) sum += share;
    v.kernel_coverage = sum / static_cast<double>(ctx.gpu->kernel_coverage.size());
    // Copies and fills count as foreign too; a rounding margin only.
    if (ctx.gpu->own_kernels_only && *v.kernel_coverage < 0.999) {
      v.status = Status::rejected;
      v.reasons.push_back({ReasonCode::foreign_kernels, std::to_string(static_cast<int>(100 * (1.0 - *v.kernel_coverage) + 0.5)) +
                                                  "% of the GPU time was in kernels that are not the candidate's own "
                                                  "Triton kernels (PyTorch or a library did the work)"});
      return false;
    }
    const double own_us = *std::min_element(ctx.gpu->own_kernel_us.begin(), ctx.gpu->own_kernel_us.end());
    const double bytes = output_bytes(ctx.layout), write_us = output_write_us(bytes);
    if (no_custom_work(*v.kernel_coverage, ctx.gpu->min_own_share, own_us, bytes)) {
      v.status = Status::rejected;
      v.reasons.push_back({ReasonCode::no_custom_work,
                           percent(*v.kernel_coverage) + " of the GPU time was in the candidate's own kernels, " +
                               microseconds(own_us) + " a call (the floor: " + percent(kLeastOwnShare) +
                               ", or " + percent(ctx.gpu->min_own_share) + " unless as long as writing the outputs " +
                               "once takes, " + microseconds(write_us) + "): PyTorch or a library did the work"});
      return false;
    }
  }
  return true;
}

}  // namespace crucible::eval
