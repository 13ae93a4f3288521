// The evaluator's KernelBench stage 1-2: the candidate built (kernelbench_candidate.h), its plan for the task
// written, and the pool of KernelBench workers that loads it. Loading, correctness and timing are the evaluator's
// own, as for every other candidate.
#include "crucible/eval/evaluator.h"
#include "crucible/eval/kernelbench_candidate.h"

namespace crucible::eval {
namespace fs = std::filesystem;

namespace {

// What a build's outcome makes of the verdict: true when the candidate can be loaded.
bool accept_kernelbench_build(const KernelBenchBuild& built, Verdict& v) {
  v.compile = {built.compile.cached, built.seconds, built.compile.hash, built.compile.log};
  v.stages.compile_s = built.seconds;
  switch (built.outcome) {
    case KernelBenchBuild::Outcome::ok: return true;
    case KernelBenchBuild::Outcome::rejected:
      v.status = Status::rejected;
      v.reasons = built.refusals;
      return false;
    case KernelBenchBuild::Outcome::source_too_large:
      v.status = Status::rejected;
      v.reasons.push_back({"source_too_large", built.compile.log});
      return false;
    case KernelBenchBuild::Outcome::compile_error:
      v.status = Status::compile_error;
      v.reasons.push_back(built.compile.outcome == CompileResult::Outcome::timed_out
                              ? Reason{"compile_timeout", "compile time limit exceeded"}
                              : Reason{"compiler_error", "the compiler reported errors in the load_inline sources "
                                                         "(see compile log; lines are the candidate file's)"});
      return false;
    case KernelBenchBuild::Outcome::environment_error:
      v.status = Status::compile_error;
      v.reasons.push_back({"compile_environment", "not the candidate's fault, and not cached: " + built.compile.log});
      return false;
  }
  return false;
}

std::vector<DType> task_dtypes(const TaskSpec& task) {
  std::vector<DType> dtypes;
  for (const auto* group : {&task.inputs, &task.outputs})
    for (const auto& t : *group) dtypes.push_back(t.dtype);
  return dtypes;
}

}  // namespace

bool Evaluator::build_kernelbench(const TaskSpec& task, const std::string& size_set, const std::string& source,
                                  const EvalOptions& options, Verdict& v, fs::path& plan_path, WorkerPool*& pool) {
  auto refuse = [&](const std::string& why) {
    v.status = Status::rejected;
    v.reasons.push_back({"kernelbench_unavailable", why});
    return false;
  };
  if (parse_device(options.device, /*allow_bare_cuda=*/true).is_cuda())
    return refuse("KernelBench candidates are evaluated on the CPU in this build (cpp_sources only); the GPU worker "
                  "is not wired in yet");
  std::string why;
  const auto python = find_kernelbench_python(why);
  if (!python) return refuse(why);
  const fs::path support = default_python_worker_support();
  if (support.empty() || !fs::exists(support))
    return refuse("the Python worker's support library is missing (" + support.string() + ")");
  KernelBenchBuildOptions b;
  b.backend = "cpu";
  b.forbid_torch_ops = options.forbid_torch_ops;
  b.dtypes = task_dtypes(task);
  b.time_limit_s = std::max(options.compile.time_limit_s, 120.0);  // torch/extension.h is a large header
  b.max_source_bytes = options.compile.max_source_bytes;
  KernelBenchBuild built = build_kernelbench_candidate(*python, compiler_, source, b);
  if (!accept_kernelbench_build(built, v)) return false;
  plan_path = write_kernelbench_plan(built, task, size_set);
  std::lock_guard<std::mutex> lock(gpu_mutex_);
  if (!kernelbench_workers_)
    // A worker imports PyTorch before it says hello: seconds on a loaded machine.
    kernelbench_workers_ = std::make_unique<WorkerPool>(
        python->executable, 1,
        std::vector<std::string>{"-I", (default_python_dir() / "crucible_kernelbench" / "worker.py").string(),
                                 "--support", support.string()},
        120.0);
  pool = kernelbench_workers_.get();
  return true;
}

}  // namespace crucible::eval
