// The evaluator's KernelBench steps 1-2: the candidate built (kernelbench_candidate.h), its plan for the task
// written, and the pool of KernelBench workers that loads it (the CPU's, or the GPU's Python workers). Loading, correctness and timing are the evaluator's
// own, as for every other candidate.
#include <algorithm>

#include "crucible/eval/kernelbench_candidate.h"
#include "evaluator_impl.h"
#include "kernelbench/kernelbench_triton.h"

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
      v.reasons.push_back({ReasonCode::source_too_large, built.compile.log});
      return false;
    case KernelBenchBuild::Outcome::compile_error:
      v.status = Status::compile_error;
      v.reasons.push_back(built.compile.outcome == CompileResult::Outcome::timed_out
                              ? Reason{ReasonCode::compile_timeout, "compile time limit exceeded"}
                              : Reason{ReasonCode::compiler_error, "the compiler reported errors in the load_inline sources "
                                                         "(see compile log; lines are the candidate file's)"});
      return false;
    case KernelBenchBuild::Outcome::environment_error:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compile_environment, "not the candidate's fault, and not cached: " + built.compile.log});
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

// A CPU worker imports PyTorch before it says hello: seconds on a loaded machine.
std::unique_ptr<WorkerPool> kernelbench_worker_pool(const KernelBenchPython& python, const fs::path& support) {
  return std::make_unique<WorkerPool>(
      python.executable, 1,
      std::vector<std::string>{"-I", (default_python_dir() / "crucible_kernelbench" / "worker.py").string(),
                               "--support", support.string()},
      120.0);
}

// A GPU worker is the Triton worker's process (its own CUDA context, the trusted Triton warm-up) around a
// KernelBench candidate: a few seconds to start, so two start ahead.
constexpr int kKernelBenchGpuWarmWorkers = 2;

std::string cuda_arch_of(const cuda::DeviceInfo& info) {
  return "sm_" + std::to_string(info.major) + std::to_string(info.minor);
}

// An answer with @triton.jit kernels on a GPU: Triton compiles them into the answer's cache before its worker (which
// cannot run ptxas) loads them. The verdict's compile report covers both builds, its log Triton's where Triton failed.
bool compile_triton_kernels(const Evaluation& e, const KernelBenchPython& python, const KernelBenchBuild& built,
                            Verdict& v) {
  const CompileReport extensions = v.compile;
  const TritonBuild t = compile_kernelbench_triton(python, built, e.candidate_path, {e.in_shapes, e.out_shapes},
                                                   triton_build_options(e.options, *e.gpu));
  const bool ok = accept_triton_build(t, v);
  v.compile.cached = t.cached && (built.extensions.empty() || extensions.cached);
  v.compile.seconds += extensions.seconds;
  v.stages.compile_s = v.compile.seconds;
  if (!extensions.hash.empty()) v.compile.hash = extensions.hash;
  if (ok) v.compile.log_excerpt = extensions.log_excerpt;
  return ok;
}

}  // namespace

bool Evaluator::Impl::build_kernelbench(Evaluation& e) {
  auto refuse = [&](const std::string& why) {
    e.v.status = Status::rejected;
    e.v.reasons.push_back({ReasonCode::kernelbench_unavailable, why});
    return false;
  };
  std::string why;
  const auto python = find_kernelbench_python(why, e.gpu != nullptr);
  if (!python) return refuse(why);
  const fs::path support = default_python_worker_support();
  if (support.empty() || !fs::exists(support))
    return refuse("the Python worker's support library is missing (" + support.string() + ")");
  KernelBenchBuildOptions b;
  b.backend = e.gpu ? Backend::cuda : Backend::cpu;
  if (e.gpu) b.cuda_arch = cuda_arch_of(e.gpu->info);
  b.forbid_torch_ops = e.options.forbid_torch_ops;
  b.dtypes = task_dtypes(e.task);
  b.time_limit_s = std::max(e.options.compile.time_limit_s, 120.0);  // torch/extension.h is a large header
  b.max_source_bytes = e.options.compile.max_source_bytes;
  const KernelBenchBuild built = build_kernelbench_candidate(*python, compiler, e.source, b);
  if (!accept_kernelbench_build(built, e.v)) return false;
  e.candidate_path = write_kernelbench_plan(built, e.task, e.size_set);  // what the worker is asked to load
  if (e.gpu && !built.kernels.empty() && !compile_triton_kernels(e, *python, built, e.v)) return false;
  std::lock_guard<std::mutex> lock(gpu_mutex);
  if (e.gpu) {
    if (!e.gpu->kernelbench_workers)
      e.gpu->kernelbench_workers =
          python_gpu_worker_pool(python->executable, "crucible_kernelbench/gpu_worker.py", kKernelBenchGpuWarmWorkers,
                                 support, e.gpu->device, config.cache_dir);
    e.python_pool = e.gpu->kernelbench_workers.get();
  } else {
    if (!kernelbench_workers) kernelbench_workers = kernelbench_worker_pool(*python, support);
    e.python_pool = kernelbench_workers.get();
  }
  return true;
}

}  // namespace crucible::eval
