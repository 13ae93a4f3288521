// A Triton candidate's build step: gated on its source, compiled by Triton at its task's shapes, and run by a pool
// of Python workers of its own (triton_candidate.h).
#include <algorithm>

#include "evaluator_impl.h"

namespace crucible::eval {
namespace fs = std::filesystem;

TritonShapeSet shapes_at(const TaskSpec& task, const std::string& size_set) {
  const Sizes& sizes = task.sizes_for(size_set);
  TritonShapeSet set;
  for (const auto& t : task.inputs) set.inputs.push_back({t.dtype, resolve_shape(t, sizes)});
  for (const auto& t : task.outputs) set.outputs.push_back({t.dtype, resolve_shape(t, sizes)});
  return set;
}

std::unique_ptr<WorkerPool> python_gpu_worker_pool(const std::string& python, const std::string& script, int warm,
                                                   const fs::path& support, int device, const fs::path& cache_dir) {
  const fs::path warm_cache = cache_dir / "triton" / "worker-warm";
  std::error_code ec;
  fs::create_directories(warm_cache, ec);
  return std::make_unique<WorkerPool>(
      python, gpu_warm_workers(warm),
      std::vector<std::string>{"-I", (default_python_dir() / script).string(), "--device", std::to_string(device),
                               "--support", support.string(), "--warm-cache", warm_cache.string()},
      120.0);
}

TritonBuildOptions triton_build_options(const EvalOptions& options, const GpuResources& gpu) {
  TritonBuildOptions b;
  b.device = gpu.device;
  b.device_name = gpu.info.name + " sm_" + std::to_string(gpu.info.major) + std::to_string(gpu.info.minor);
  b.time_limit_s = std::max(options.compile.time_limit_s, 120.0);
  b.max_source_bytes = options.compile.max_source_bytes;
  return b;
}

std::size_t bytes_of(const std::vector<TensorShape>& shapes) {
  std::size_t total = 0;
  for (const auto& t : shapes) total += static_cast<std::size_t>(numel(t.shape)) * dtype_size(t.dtype);
  return total;
}

bool accept_triton_build(const TritonBuild& built, Verdict& v) {
  v.compile = {built.cached, built.seconds, built.hash, built.log};
  v.stages.compile_s = built.seconds;
  switch (built.outcome) {
    case TritonBuild::Outcome::ok: return true;
    case TritonBuild::Outcome::rejected:
      v.status = Status::rejected;
      v.reasons = built.refusals;
      return false;
    case TritonBuild::Outcome::source_too_large:
      v.status = Status::rejected;
      v.reasons.push_back({ReasonCode::source_too_large, built.log});
      return false;
    case TritonBuild::Outcome::timed_out:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compile_timeout, built.log});
      return false;
    case TritonBuild::Outcome::failed:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compiler_error, "Triton could not compile a kernel (see compile log)"});
      return false;
    case TritonBuild::Outcome::environment_error:
      v.status = Status::compile_error;
      v.reasons.push_back({ReasonCode::compile_environment, "not the candidate's fault, and not cached: " + built.log});
      return false;
  }
  return false;
}

namespace {

// Each worker imports PyTorch and Triton and makes its own CUDA context: about 2.5 s, and a few hundred MB of GPU
// memory. A multi-shape task takes a fresh worker for each shape every ~1.5 s, so three start ahead (with one, a
// cached TriMul evaluation waited 1.6-2.4 s for each of its seven workers).
constexpr int kTritonWarmWorkers = 3;

}  // namespace

bool Evaluator::Impl::build_triton(Evaluation& e) {
  auto refuse = [&](const std::string& why) {
    e.v.status = Status::rejected;
    e.v.reasons.push_back({ReasonCode::triton_unavailable, why});
    return false;
  };
  if (!e.gpu)
    return refuse("Triton candidates run on a GPU node; this evaluation is on the CPU (evaluate with --device cuda)");
  std::string why;
  const auto python = find_triton_python(why);
  if (!python) return refuse(why);
  const fs::path support = default_python_worker_support();
  if (support.empty() || !fs::exists(support))
    return refuse("the Triton worker's support library is missing (" + support.string() + ")");

  TritonBuild built = build_triton_candidate(*python, e.source, {{e.in_shapes, e.out_shapes}}, config.cache_dir,
                                             triton_build_options(e.options, *e.gpu));
  if (!accept_triton_build(built, e.v)) return false;
  e.candidate_path = built.candidate_path;
  std::lock_guard<std::mutex> lock(gpu_mutex);
  if (!e.gpu->triton_workers)
    e.gpu->triton_workers = python_gpu_worker_pool(python->executable, "crucible_triton/worker.py", kTritonWarmWorkers,
                                                   support, e.gpu->device, config.cache_dir);
  e.python_pool = e.gpu->triton_workers.get();
  return true;
}

// A Triton candidate's shapes compiled by one step before the first is evaluated: PyTorch, Triton and a CUDA context
// start once rather than once per shape, and kernels whose specialisation does not change are compiled once. Each
// shape's evaluation then finds its build cached. A failure here is left for the shape that has it to report.
std::optional<TritonBuild> Evaluator::Impl::prebuild_triton(const TaskSpec& task, const std::vector<ShapeCase>& cases,
                                                            const std::string& size_set, const std::string& source,
                                                            const EvalOptions& options) {
  if (options.kind != CandidateKind::triton || !options.device.is_cuda() || cases.size() < 2) return std::nullopt;
  std::string why;
  const auto python = find_triton_python(why);
  if (!python) return std::nullopt;
  GpuResources* gpu = nullptr;
  {
    std::lock_guard<std::mutex> lock(gpu_mutex);
    gpu = &gpu_resources(options.device.index);
  }
  std::vector<TritonShapeSet> sets;
  for (const auto& c : cases) sets.push_back(shapes_at(task.at_case(c, size_set), size_set));
  return build_triton_candidate(*python, source, sets, config.cache_dir, triton_build_options(options, *gpu));
}

}  // namespace crucible::eval
