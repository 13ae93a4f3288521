#pragma once
// The evaluator's run stages after the candidate is loaded. Each stage reads the shared context, adds
// its findings to the verdict, and returns false when the verdict is decided.
#include <cstdint>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "crucible/eval/evaluator.h"
#include "cuda/cuda_device.h"
#include "references.h"
#include "tensor_checks.h"

namespace crucible::eval {

// What a GPU evaluation adds: where the tensors are, the L2 flush before each timed call, and the fixed cost of
// a call measured on trusted code (the worker's null calls), which bounds how fast a call can claim to be.
struct GpuStage {
  int device = 0;
  std::byte* tensors = nullptr;  // device memory the worker maps
  cuda::L2Flush* flush = nullptr;
  double null_call_s = 0.0;
  // Queued launches (eval_settings.h): the reference's calls are held by `held` (null when launches are eager or the
  // driver cannot hold; then it is timed as launched). A reference that waits for the GPU while launching is timed
  // as launched from then on.
  cuda::HeldTimer* held = nullptr;
  double null_launch_s = 0.0;  // the fixed cost of launching a held call (null calls)
  std::vector<double> event_samples_us;  // what the worker's events said of each timed call
  std::vector<double> kernel_coverage;   // of each profiled (correctness) call
  std::vector<double> own_kernel_us;     // of each profiled call: its share times its events' span
  // Every kernel must be the candidate's own (a Triton candidate's, by name): PyTorch or a library doing the work
  // is refused rather than reported.
  bool own_kernels_only = false;
  // Below this share of the GPU time in its own kernels, a candidate that may keep PyTorch's operators (KernelBench's
  // format) did no real work of its own (a decoy beside PyTorch's), unless its own kernels ran at least as long as
  // writing its outputs once takes (custom_work_rule.h): a fused epilogue after cuBLAS's GEMM is 1% of the
  // time, a decoy on a scrap 0.03%. 0: not checked.
  double min_own_share = 0.0;
};

struct StageContext {
  const TaskSpec& task;
  ReferenceFn reference;
  const InputPool& pool;
  const ArenaLayout& layout;
  WorkerProcess& worker;
  std::vector<TensorShape> output_shapes;
  GpuStage* gpu = nullptr;  // null on the CPU
  bool profiling = false;   // GPU calls measure kernel coverage (the correctness stage's calls)
  uint64_t seed = 0;
  uint64_t input_key = 0;  // the secret of input fingerprints (write_input): drawn per evaluation, never reported
  bool full = false;
  int trials = 0, timed = 0, warmup = 0, verified = 0;
  double timeout_s = 10.0;
  // The evaluation's wall-clock budget: a fixed one, or derived once the reference's own time is known.
  std::chrono::steady_clock::time_point started;
  double budget_s = 0.0;        // the budget in force (from `started`)
  bool budget_derived = false;  // grows to its derived value at the first reference run (see derive_budget)
  int planned_calls = 0;        // calls the evaluation may make, for the derived budget
  double kernel_s = 0.0;  // time inside candidate and reference calls, summed by the stages
  // The task's own checks (its outputs move with its inputs; zeros do not pass) passed in an earlier evaluation:
  // set by the evaluator when it knows, and by the correctness stage when it has shown it.
  bool task_sound = false;
  double harness_cpu_s = 0.0;  // CPU: the worker's own CPU cost of a call and its sync (null calls, trusted code)

  ArenaRef arena() const { return gpu ? ArenaRef{gpu->tensors, gpu->device} : ArenaRef{worker.arena(), -1}; }
  int sets() const { return layout.sets(); }
  std::vector<torch::Tensor> draw(uint64_t stream) const { return pool.draw(seed * 0x100000001b3ULL + stream); }
  Tolerance tolerance(std::size_t output) const { return task.tolerance_for(task.outputs[output].dtype); }
  std::vector<torch::Tensor> run_reference(const std::vector<torch::Tensor>& inputs);  // counted in kernel_s
  // The reference timed as a candidate call is: on a GPU by events, after the same L2 flush; on the CPU by this
  // thread's CPU clock (LibTorch runs single-threaded here), as the worker's calls are by the worker's.
  double timed_reference(const std::vector<torch::Tensor>& inputs);
  // One call of the candidate on a set, counted in kernel_s; false (verdict filled) when it failed. `seconds`
  // is the sample a timing records: the evaluator's own clock on the CPU; on a GPU the device time by events,
  // but never less than the evaluator's clock minus the fixed cost of a call.
  // With `settle` (CPU), the call lasts until a sync returns (see timing); a GPU call always ends with the
  // worker synchronising the whole device. `flush`: empty the L2 first (GPU timing).
  bool call(int set, Verdict& v, double* seconds = nullptr, bool settle = false, bool flush = false);
  std::string budget_detail() const;
  void derive_budget(const std::vector<torch::Tensor>& inputs, double first_run_s);
};

// With CRUCIBLE_TRACE_CALLS set, where a stage's wall time went, step by step: each mark ends a step (after a device
// sync on a GPU, so the step's own work is counted in it) and the totals are printed on stderr when the stage ends.
// Without it, marks cost nothing.
class StepTrace {
 public:
  StepTrace(const char* stage, bool gpu);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  void mark(const char* step);

 private:
  const char* stage_;
  bool on_ = false, gpu_ = false;
  std::chrono::steady_clock::time_point last_;
  struct Step {
    const char* name;
    double seconds;
    int count;
  };
  std::vector<Step> steps_;  // first-seen order
};

// Maps how a worker load or call ended onto the verdict; false when it succeeded.
bool classify_failure(const CallOutcome& out, Verdict& v);

// Fresh inputs per trial in the same buffers, poisoned outputs, inputs checked unchanged, the first
// trial called twice. Throws TaskError for tasks a constant answer could pass.
bool check_correctness(StageContext& ctx, Verdict& v);

// What timing learns once per task and settings (the key) and keeps for the task's later candidates: the
// reference's time, and on a GPU whether timed calls are checked at sampled elements (see timing_stage.cpp).
struct TaskTimings {
  std::map<std::string, TimingStats> reference;
  std::map<std::string, bool> sampled;
};

// Candidate timing with checked outputs.
bool measure_timing(StageContext& ctx, Verdict& v, TaskTimings& known, const std::string& key);

}  // namespace crucible::eval
