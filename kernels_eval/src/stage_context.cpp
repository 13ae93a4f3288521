#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "crucible/eval/kernelbench_candidate.h"
#include "timing_rules.h"
#include "stages.h"

namespace crucible::eval {
namespace {
// Warm reference runs the derived budget takes the fastest of (CPU).
constexpr int kWarmReferenceRuns = 5;

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}

std::vector<torch::Tensor> StageContext::run_reference(const std::vector<torch::Tensor>& inputs) {
  auto start = Clock::now();
  auto outputs = reference(inputs, task.params);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  kernel_s += seconds;
  if (budget_derived) derive_budget(inputs, seconds);
  return outputs;
}

// The derived budget: 50 times the reference's time for every planned call. The evaluation's first reference run
// pays for first touches (its output's fresh pages, LibTorch's lazy set-up), and its wall clock for whatever else the
// machine ran meanwhile: on a busy 2-core VM 1.5-21 ms for relu, whose timed runs take 0.15 ms, and the run straight
// after it 14-18 ms by the wall clock. Sized from those, the budget grew up to 443 s, which a candidate sleeping just
// under the per-call limit in every call could fill. A warm run's own time sizes it: on the CPU this thread's CPU time,
// as the reference is timed.
void StageContext::derive_budget(const std::vector<torch::Tensor>& inputs, double first_run_s) {
  budget_derived = false;
  double warm_s = 0.0;
  if (gpu) {  // launches return before the work is done
    cuda::synchronize();
    const auto start = Clock::now();
    run_reference(inputs);
    cuda::synchronize();
    warm_s = std::chrono::duration<double>(Clock::now() - start).count();
  } else {  // the fastest of a few: a run may still find its inputs out of cache, or fault on its output's pages where
            // the VM's kernel reclaimed freed heap memory (relu's 0.15 ms then took 11-16 ms in run after run)
    warm_s = timed_reference(inputs);
    for (int run = 1; run < kWarmReferenceRuns; ++run) warm_s = std::min(warm_s, timed_reference(inputs));
  }
  budget_s = derived_evaluation_budget(budget_s, warm_s, planned_calls);
  if (trace_calls())
    std::fprintf(stderr, "budget: %.1f s (reference runs of %.3f ms, first, and %.3f ms, warm)\n", budget_s,
                 first_run_s * 1e3, warm_s * 1e3);
}

double StageContext::timed_reference(const std::vector<torch::Tensor>& inputs) {
  if (!gpu && torch::get_num_threads() > 1) {  // work on other threads: the wall clock is the closer figure
    const double before = kernel_s;
    run_reference(inputs);
    return kernel_s - before;
  }
  if (!gpu) {
    const double before = thread_cpu_seconds();
    run_reference(inputs);
    return thread_cpu_seconds() - before;
  }
  gpu->flush->run();
  cuda::synchronize();
  if (cuda::HeldTimer* held = gpu->held) {
    held->start();
    run_reference(inputs);
    held->stop();
    const double seconds = std::max(held->seconds(), held->launch_seconds());
    if (!held->missed()) return seconds;
    // Released by the watchdog: the reference waits for the GPU while launching. Timed as launched, this call again
    // and every later one.
    gpu->held = nullptr;
    return timed_reference(inputs);
  }
  cuda::EventTimer timer;
  timer.start();
  run_reference(inputs);
  timer.stop();
  return timer.seconds();
}

bool StageContext::call(int set, Verdict& v, double* seconds, bool settle, bool flush) {
  if (gpu) {
    // The worker's context does not wait for ours: everything written into its tensors must be finished.
    if (flush) gpu->flush->run();
    cuda::synchronize();
    settle = false;
  }
  const bool profile = gpu && profiling;
  // A call may use what is left of the evaluation's budget, and no more than a call's own limit.
  const double left = budget_s - std::chrono::duration<double>(Clock::now() - started).count();
  if (budget_s > 0.0 && left <= 0.0)
    return !classify_failure({CallOutcome::Kind::budget, 0, 0.0, budget_detail()}, v);
  const bool budget_binds = budget_s > 0.0 && left < timeout_s;
  CallOutcome out = worker.call(set, budget_binds ? left : timeout_s, /*then_sync=*/settle, profile);
  if (budget_binds && out.kind == CallOutcome::Kind::timed_out) out = {CallOutcome::Kind::budget, 0, out.seconds, budget_detail()};
  if (profile && out.ok() && out.own_kernel_share >= 0.0) {
    gpu->kernel_coverage.push_back(out.own_kernel_share);
    gpu->own_kernel_us.push_back(out.own_kernel_share * out.device_seconds * 1e6);
  }
  kernel_s += out.seconds;
  // On a GPU no sample is below the evaluator's own clock less the fixed cost of a call; held, nor below the
  // candidate's launching less the fixed cost of launching.
  if (seconds)
    *seconds = gpu ? std::max({out.device_seconds, out.seconds - gpu->null_call_s,
                               out.launch_seconds - gpu->null_launch_s})
                   : out.seconds;
  if (gpu && seconds && flush && out.ok()) gpu->event_samples_us.push_back(out.device_seconds * 1e6);
  return !classify_failure(out, v);
}

StepTrace::StepTrace(const char* stage, bool gpu) : stage_(stage), on_(trace_calls()), gpu_(gpu) {
  if (!on_) return;
  if (gpu_) cuda::synchronize();
  last_ = Clock::now();
}

void StepTrace::mark(const char* step) {
  if (!on_) return;
  if (gpu_) cuda::synchronize();
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  auto it = std::find_if(steps_.begin(), steps_.end(), [&](const Step& s) { return std::strcmp(s.name, step) == 0; });
  if (it == steps_.end()) it = steps_.insert(steps_.end(), Step{step, 0.0, 0});
  it->seconds += seconds;
  ++it->count;
}

StepTrace::~StepTrace() {
  if (!on_ || steps_.empty()) return;
  std::string line = std::string(stage_) + " steps:";
  char item[128];
  for (const Step& s : steps_) {
    std::snprintf(item, sizeof item, " %s %.1f ms (%d)", s.name, s.seconds * 1e3, s.count);
    line += item;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

std::string StageContext::budget_detail() const {
  return "the evaluation used its whole wall-clock budget of " + std::to_string(static_cast<int>(budget_s + 0.5)) +
         " s (calls that wait rather than work still take time)";
}

bool classify_failure(const CallOutcome& out, Verdict& v) {
  using K = CallOutcome::Kind;
  auto fail = [&](Status status, ReasonCode code) {
    v.status = status;
    v.reasons.push_back({code, out.detail});
    return true;
  };
  switch (out.kind) {
    case K::ok: return false;
    case K::candidate_error:
      if (auto refusal = kernelbench_refusal(out.detail)) {  // a KernelBench worker's classified refusal
        v.status = refusal->first;
        v.reasons.push_back(refusal->second);
        return true;
      }
      return fail(Status::runtime_error, out.rc != 0 ? ReasonCode::nonzero_return : ReasonCode::load_failed);
    case K::crashed: return fail(Status::runtime_error, ReasonCode::crash);
    case K::forbidden_syscall: return fail(Status::rejected, ReasonCode::forbidden_syscall);
    case K::timed_out: return fail(Status::timeout, ReasonCode::wall_timeout);
    case K::cpu_limit: return fail(Status::timeout, ReasonCode::cpu_time_limit);
    case K::worker_lost: return fail(Status::runtime_error, ReasonCode::worker_lost);
    case K::unsealed: return fail(Status::rejected, ReasonCode::unsealed);
    case K::budget: return fail(Status::timeout, ReasonCode::evaluation_budget);
    case K::device_error:
      return fail(Status::runtime_error, out.rc == 2 /* cudaErrorMemoryAllocation */ ? ReasonCode::out_of_memory : ReasonCode::cuda_error);
  }
  return true;
}

}  // namespace crucible::eval
